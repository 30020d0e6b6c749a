//! No single row can fail a batch (docs/design.md, "Invariants"; docs/scan.md, "Guards"): a
//! row whose write the database refuses (a trigger on the application's
//! outbox, a row lock held past the lock timeout) gets a `write_refused`
//! finding and is not stamped; the rest of its batch commits, the cursor
//! moves past it and the run exits 0. Only a batch refused for every row
//! fails the run. (The scan writes nothing into `payments` itself, so a
//! trigger there never fires for it: `own_state` tests that.)

use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use sqlx::{Connection, PgPool};

use crate::support::*;

/// A legal hold: the application's trigger on its outbox refuses every
/// command for one payment (`NEW.aggregate_id` is the payment id).
async fn hold_row(pool: &PgPool, condition: &str) {
    sqlx::raw_sql(&format!(
        "CREATE FUNCTION legal_hold() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'payment % is under legal hold', NEW.aggregate_id; END $$;
         CREATE TRIGGER legal_hold BEFORE INSERT ON outbox
            FOR EACH ROW WHEN ({condition}) EXECUTE FUNCTION legal_hold();"
    ))
    .execute(pool)
    .await
    .unwrap();
}

async fn run(pool: &PgPool, stripe: &str) -> Output {
    let env = [
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "1".to_owned()),
    ];
    reconciler_output(&["run"], &env).await
}

fn summary(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", all_output(o)))
}

async fn missed_success_commands(pool: &PgPool, payment: i64) -> i64 {
    count_for(
        pool,
        "SELECT count(*) FROM outbox WHERE event_type = 'ApplyPaymentSucceeded'
            AND processed_at IS NULL AND aggregate_id = $1::text",
        payment,
    )
    .await
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_trigger_refusing_one_row_leaves_the_rest_of_the_batch_committed(pool: PgPool) {
    let before = insert_payment(&pool, "pi_Before", "paid", 3600).await;
    let held = insert_payment(&pool, "pi_Held", "pending", 3600).await;
    let after = insert_payment(&pool, "pi_After", "pending", 3600).await;
    hold_row(&pool, &format!("NEW.aggregate_id = '{held}'")).await;
    let stripe = stripe_mirroring(&pool, "succeeded", Duration::ZERO).await;

    let out = run(&pool, &stripe.uri()).await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let s = summary(&out);
    assert_eq!(s["writes_refused"], 1, "{s}");
    assert_eq!(
        cursor(&pool, SCAN_JOB).await,
        0,
        "the cursor is past the held row (the table's last rows were read: the cycle ended and the cursor is back at 0)"
    );
    assert_eq!(
        verified(&pool, before).await,
        (Some("succeeded".into()), true)
    );
    assert_eq!(verified(&pool, held).await, (None, false), "not stamped");
    let refused = findings_of(&pool, held).await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].kind, "write_refused");
    assert!(refused[0].open);
    let details = refused[0].details.as_ref().unwrap();
    assert_eq!(details["sqlstate"], "P0001", "{details}");
    assert_eq!(
        details["message"],
        format!("payment {held} is under legal hold")
    );
    assert_eq!(details["write"], "outbox");
    let repaired = findings_of(&pool, after).await;
    assert_eq!(repaired.len(), 1);
    assert_eq!(repaired[0].kind, "missed_success");
    assert_eq!(missed_success_commands(&pool, after).await, 1, "enqueued");

    // The hold is lifted: the next cycle writes the row and clears the finding.
    sqlx::raw_sql("DROP TRIGGER legal_hold ON outbox")
        .execute(&pool)
        .await
        .unwrap();
    for _ in 0..2 {
        // The wrap at the end of the table, then the first batch of the next cycle.
        let next = run(&pool, &stripe.uri()).await;
        assert_eq!(next.status.code(), Some(0), "{}", all_output(&next));
    }
    assert_eq!(
        verified(&pool, held).await,
        (Some("succeeded".into()), true)
    );
    let after_lift = findings_of(&pool, held).await;
    let refused = after_lift
        .iter()
        .find(|f| f.kind == "write_refused")
        .unwrap_or_else(|| panic!("{after_lift:?}"));
    assert!(!refused.open, "{after_lift:?}");
    assert_eq!(refused.resolution.as_deref(), Some("cleared"));
    assert_eq!(
        missed_success_commands(&pool, held).await,
        1,
        "the held payment's repair is enqueued once the hold is lifted"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_batch_refused_for_every_row_fails_the_run_and_keeps_the_cursor(pool: PgPool) {
    insert_payment(&pool, "pi_One", "pending", 3600).await;
    insert_payment(&pool, "pi_Two", "pending", 3600).await;
    hold_row(&pool, "true").await;
    let stripe = stripe_mirroring(&pool, "succeeded", Duration::ZERO).await;

    let out = run(&pool, &stripe.uri()).await;

    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("refused for every row"),
        "{}",
        all_output(&out)
    );
    assert_eq!(cursor(&pool, SCAN_JOB).await, 0, "the cursor did not move");
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_row_locked_past_the_lock_timeout_is_refused_then_cleared(pool: PgPool) {
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;
    let locked = insert_payment(&pool, "pi_Locked", "paid", 3600).await;
    let after = insert_payment(&pool, "pi_After", "pending", 3600).await;
    let s = settings(2);
    // The lock an application's UPDATE of the payment takes, held by an
    // open transaction on another connection.
    let mut holder = sqlx::PgConnection::connect(&database_url(&pool))
        .await
        .unwrap();
    let mut hold = holder.begin().await.unwrap();
    sqlx::query("SELECT id FROM payments WHERE id = $1 FOR NO KEY UPDATE")
        .bind(locked)
        .execute(&mut *hold)
        .await
        .unwrap();

    let report = scan(&pool, &stripe, &s).await;

    assert_eq!(report.writes_refused, 1, "{report:?}");
    assert_eq!(
        cursor(&pool, SCAN_JOB).await,
        0,
        "the cursor is past it (the table's last rows were read: the cycle ended and the cursor is back at 0)"
    );
    assert_eq!(verified(&pool, locked).await, (None, false), "not stamped");
    let refused = findings_of(&pool, locked).await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].kind, "write_refused");
    let details = refused[0].details.as_ref().unwrap();
    assert_eq!(details["sqlstate"], "55P03", "{details}");
    assert_eq!(details["write"], "lock_payment");
    assert_eq!(missed_success_commands(&pool, after).await, 1, "enqueued");

    // The lock goes away: the next cycle writes the row and clears the finding.
    hold.rollback().await.unwrap();
    holder.close().await.unwrap();
    assert!(scan(&pool, &stripe, &s).await.wrapped);
    let next = scan(&pool, &stripe, &s).await;
    assert_eq!(next.writes_refused, 0);
    assert_eq!(
        verified(&pool, locked).await,
        (Some("succeeded".into()), true)
    );
    let cleared = findings_of(&pool, locked).await;
    assert!(!cleared[0].open, "{cleared:?}");
    assert_eq!(cleared[0].resolution.as_deref(), Some("cleared"));
}
