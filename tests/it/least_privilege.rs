//! `sql/least_privilege.sql` grants enough for `run`, `repair`, `events` and
//! `status`, and no more.

use std::time::Duration;

use crate::support::*;
use sqlx::PgPool;

/// Applies the grants to a role of its own, runs `run`, `repair`, `events`
/// and `status` as that role, checks the repairs landed and the events job
/// held a PaymentIntent for another read, and drops the role.
async fn run_as_least_privileged_role(pool: &PgPool) {
    // Roles are cluster-wide: one per test database.
    let db = pool.connect_options().get_database().unwrap().to_owned();
    let suffix: String = db
        .chars()
        .rev()
        .take(20)
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let role = format!("reconciler_job_{suffix}");
    let grants =
        include_str!("../../sql/least_privilege.sql").replace("stripe_reconciler_job", &role);
    sqlx::raw_sql(&grants).execute(pool).await.unwrap();
    insert_paid(pool, 8).await;
    sqlx::query("UPDATE payments SET status = 'pending' WHERE id IN (2, 5)")
        .execute(pool)
        .await
        .unwrap();
    let stripe = stripe_mirroring(pool, "succeeded", Duration::ZERO).await;
    let mut url = url::Url::parse(&database_url(pool)).unwrap();
    url.set_username(&role).unwrap();
    let env = [
        ("DATABASE_URL", url.to_string()),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_BATCHES_PER_RUN", "1".to_owned()),
    ];

    let run = reconciler_output(&["run"], &env).await;
    let repair = reconciler_output(&["repair"], &env).await;
    // The events job: an event about a row the application just changed is
    // held for another read (reconciliation_events_retry).
    let events_stripe = crate::support::stripe_fake::StripeFake::start().await;
    let feed = events_stripe.feed();
    sqlx::query("UPDATE payments SET updated_at = now() WHERE id = 3")
        .execute(pool)
        .await
        .unwrap();
    feed.push(crate::support::stripe_fake::event(
        "evt_1",
        "pi_3",
        "succeeded",
        5,
    ));
    let mut events_env = env.clone();
    events_env[2].1 = events_stripe.uri();
    let events = reconciler_output(&["events"], &events_env).await;
    let status = reconciler_output(&["status", "--json"], &env).await;

    for (name, out) in [
        ("run", &run),
        ("repair", &repair),
        ("events", &events),
        ("status", &status),
    ] {
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The run read in the default list mode with the role's grants.
    stripe.assert_read_by_list(0);
    assert_eq!(
        count(
            pool,
            "SELECT count(*) FROM payments WHERE status = 'paid' AND version = 1"
        )
        .await,
        2
    );
    assert_eq!(
        count(
            pool,
            "SELECT count(*) FROM outbox WHERE event_type = 'PaymentStatusChanged'"
        )
        .await,
        2
    );
    assert_eq!(
        count(pool, "SELECT count(*) FROM reconciliation_events_retry").await,
        1,
        "the events job held the row in grace for another read"
    );
    // And no more: no DELETE or TRUNCATE anywhere, no UPDATE of other payment columns.
    let denied: bool = sqlx::query_scalar(
        "SELECT NOT has_table_privilege($1, 'payments', 'DELETE')
            AND NOT has_table_privilege($1, 'outbox', 'DELETE')
            AND NOT has_table_privilege($1, 'reconciliation_findings', 'TRUNCATE')
            AND NOT has_column_privilege($1, 'payments', 'order_id', 'UPDATE')",
    )
    .bind(&role)
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(denied);
    sqlx::raw_sql(&format!("DROP OWNED BY \"{role}\"; DROP ROLE \"{role}\";"))
        .execute(pool)
        .await
        .unwrap();
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn run_and_repair_work_as_the_least_privileged_role(pool: PgPool) {
    run_as_least_privileged_role(&pool).await;
}

#[sqlx::test(migrations = false)]
async fn the_grants_cover_an_applications_serial_outbox(pool: PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE outbox (
             id bigserial PRIMARY KEY,
             aggregate_type text NOT NULL,
             aggregate_id text NOT NULL,
             event_type text NOT NULL,
             payload jsonb NOT NULL,
             created_at timestamptz NOT NULL DEFAULT now())",
    )
    .execute(&pool)
    .await
    .unwrap();
    stripe_reconciler::MIGRATOR.run(&pool).await.unwrap();
    run_as_least_privileged_role(&pool).await;
}
