//! One partition's job beside rows it never confirms (docs/scan.md, "Rows
//! behind the cursor"): two partitions on alternating ids, only `eu`'s job
//! runs, so every `us` row stays registered and unconfirmed behind its
//! cursor. The sweep of the rows behind the cursor must step over them, in
//! bounded steps, and still reach an `eu` row left behind in the grace
//! window, within the same cycle. And the size: two partitions of a
//! 40,000-row table loaded after `migrate`, each job completing its cycle
//! alone and side by side with the other's.

use crate::support::*;
use sqlx::PgPool;

const ROWS: i64 = 2_000;

fn env(
    pool: &PgPool,
    stripe: &stripe_fake::StripeFake,
    batches: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_BASE", stripe.uri()),
        ("STRIPE_API_KEY", "sk_test_eu".to_owned()),
        ("RECONCILER_READ_MODE", "retrieve".to_owned()),
        ("RECONCILER_JOB", "payments-eu".to_owned()),
        ("RECONCILER_PARTITION_COLUMN", "legal_entity".to_owned()),
        ("RECONCILER_PARTITION_VALUE", "eu".to_owned()),
        ("RECONCILER_BATCH_SIZE", "50".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", batches.to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "1000".to_owned()),
        ("RECONCILER_GRACE_SECONDS", "60".to_owned()),
    ]
}

async fn run(pool: &PgPool, stripe: &stripe_fake::StripeFake, batches: &str) {
    let out = reconciler_output(&["run"], &env(pool, stripe, batches)).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert!(
        !stderr(&out).contains("lock timeout"),
        "{}",
        all_output(&out)
    );
}

async fn cycle_completed(pool: &PgPool) -> bool {
    count(
        pool,
        "SELECT count(*) FROM reconciliation_cursor
          WHERE job = 'payments-eu' AND last_cycle_completed_at IS NOT NULL",
    )
    .await
        == 1
}

/// `rows` paid payments loaded after the migrations (none registered in the
/// state table), 30 days old, in two partitions of a `legal_entity` column:
/// `eu` on even ids, `us` on odd ones; then `ANALYZE`.
async fn partitioned_payments(pool: &PgPool, rows: i64) {
    sqlx::raw_sql(&format!(
        "ALTER TABLE payments ADD COLUMN legal_entity text;
         CREATE INDEX payments_legal_entity_id ON payments (legal_entity, id);
         INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at, legal_entity)
         SELECT 'order-' || i, 'pi_' || i, 'paid', now() - interval '30 days',
                now() - interval '1 hour', CASE WHEN i % 2 = 0 THEN 'eu' ELSE 'us' END
           FROM generate_series(1, {rows}) AS i;
         ANALYZE payments;"
    ))
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn one_partitions_job_beside_rows_it_never_confirms_completes_its_cycle_and_reads_a_row_behind_them(
    pool: PgPool,
) {
    partitioned_payments(&pool, ROWS).await;
    // In the grace window when the cursor passes it.
    sqlx::query("UPDATE payments SET updated_at = now() WHERE id = 400")
        .execute(&pool)
        .await
        .unwrap();
    let stripe = stripe_answering("succeeded", std::time::Duration::ZERO).await;

    // Run 1: 12 of the cycle's 20 batches; row 400 is passed in its grace window.
    run(&pool, &stripe, "12").await;
    assert!(!cycle_completed(&pool).await);
    assert!(
        !verified(&pool, 400).await.1,
        "in the grace window when passed"
    );
    let us_unconfirmed = count(
        &pool,
        "SELECT count(*) FROM reconciliation_payment_state s JOIN payments p ON p.id = s.payment_id
          WHERE p.legal_entity = 'us' AND s.last_reconciled_at IS NULL AND s.payment_id < 1200",
    )
    .await;
    assert!(
        us_unconfirmed >= 590,
        "us rows lie unconfirmed behind the cursor: {us_unconfirmed}"
    );
    // Out of the grace window now; behind it, ~200 unconfirmed us rows.
    sqlx::query("UPDATE payments SET updated_at = now() - interval '1 hour' WHERE id = 400")
        .execute(&pool)
        .await
        .unwrap();

    // Run 2: the rest of the cycle, its sweep stepping over the us rows.
    run(&pool, &stripe, "12").await;
    assert!(cycle_completed(&pool).await, "the cycle completed in run 2");
    assert!(
        verified(&pool, 400).await.1,
        "the row left behind is read in the same cycle"
    );
    let eu_unconfirmed = count(
        &pool,
        "SELECT count(*) FROM payments p LEFT JOIN reconciliation_payment_state s ON s.payment_id = p.id
          WHERE p.legal_entity = 'eu' AND s.last_reconciled_at IS NULL",
    )
    .await;
    assert_eq!(eu_unconfirmed, 0, "every eu row confirmed in the cycle");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM payments p JOIN reconciliation_payment_state s ON s.payment_id = p.id
              WHERE p.legal_entity = 'us' AND s.last_reconciled_at IS NOT NULL"
        )
        .await,
        0,
        "no us row confirmed by the eu job"
    );
}

/// The environment of partition `entity`'s job (`payments-<entity>`).
fn partition_env(
    pool: &PgPool,
    stripe: &stripe_fake::StripeFake,
    entity: &str,
    batch: &str,
    batches: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_BASE", stripe.uri()),
        ("STRIPE_API_KEY", format!("sk_test_{entity}")),
        ("RECONCILER_READ_MODE", "retrieve".to_owned()),
        ("RECONCILER_JOB", format!("payments-{entity}")),
        ("RECONCILER_PARTITION_COLUMN", "legal_entity".to_owned()),
        ("RECONCILER_PARTITION_VALUE", entity.to_owned()),
        ("RECONCILER_BATCH_SIZE", batch.to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", batches.to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "10000".to_owned()),
        ("RECONCILER_MAX_IN_FLIGHT", "32".to_owned()),
        ("RECONCILER_GRACE_SECONDS", "60".to_owned()),
    ]
}

/// Runs partition `entity`'s job once; it must exit 0 without a lock timeout.
async fn run_partition(pool: &PgPool, stripe: &stripe_fake::StripeFake, entity: &str) {
    let env = partition_env(pool, stripe, entity, "1900", "30");
    let out = reconciler_output(&["run"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{entity}: {}", all_output(&out));
    assert!(
        !stderr(&out).contains("lock timeout"),
        "{entity}: {}",
        all_output(&out)
    );
}

/// Cycles `job` completed so far (its runs that wrapped) and whether its
/// cursor records a completed cycle.
async fn cycles(pool: &PgPool, job: &str) -> (i64, bool) {
    let wrapped = count(
        pool,
        &format!("SELECT count(*) FROM reconciliation_runs WHERE job = '{job}' AND wrapped"),
    )
    .await;
    let completed = count(
        pool,
        &format!(
            "SELECT count(*) FROM reconciliation_cursor
              WHERE job = '{job}' AND last_cycle_completed_at IS NOT NULL"
        ),
    )
    .await;
    (wrapped, completed == 1)
}

/// Rows of partition `entity` whose state row is confirmed.
async fn confirmed(pool: &PgPool, entity: &str) -> i64 {
    count(
        pool,
        &format!(
            "SELECT count(*) FROM payments p JOIN reconciliation_payment_state s ON s.payment_id = p.id
              WHERE p.legal_entity = '{entity}' AND s.last_reconciled_at IS NOT NULL"
        ),
    )
    .await
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn two_partitions_of_40000_rows_each_complete_their_cycles_alone_and_side_by_side(
    pool: PgPool,
) {
    const BIG: i64 = 40_000;
    // Loaded after the migrations: no row is registered in the state table.
    partitioned_payments(&pool, BIG).await;
    let stripe = stripe_answering("succeeded", std::time::Duration::ZERO).await;

    // Alone: the eu job's one run walks its 20,000 rows (11 batches of
    // 1,900) beside 20,000 us rows it registers and never confirms.
    run_partition(&pool, &stripe, "eu").await;
    assert_eq!(cycles(&pool, "payments-eu").await, (1, true), "eu alone");
    assert_eq!(
        confirmed(&pool, "eu").await,
        BIG / 2,
        "every eu row confirmed"
    );
    assert_eq!(confirmed(&pool, "us").await, 0, "no us row confirmed by eu");
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_payment_state").await,
        BIG,
        "the us rows in the walked ranges are registered, unconfirmed"
    );

    // Side by side: both jobs at once, each completing its cycle.
    let (eu, us) = (
        run_partition(&pool, &stripe, "eu"),
        run_partition(&pool, &stripe, "us"),
    );
    tokio::join!(eu, us);
    assert_eq!(
        cycles(&pool, "payments-eu").await,
        (2, true),
        "eu's second cycle"
    );
    assert_eq!(
        cycles(&pool, "payments-us").await,
        (1, true),
        "us's first cycle"
    );
    assert_eq!(
        confirmed(&pool, "us").await,
        BIG / 2,
        "every us row confirmed"
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_runs
              WHERE job IN ('payments-eu', 'payments-us') AND outcome IS DISTINCT FROM 'completed'"
        )
        .await,
        0,
        "every run completed"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0,
        "no finding: every row in sync"
    );
}
