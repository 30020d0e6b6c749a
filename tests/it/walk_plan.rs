//! Runs sized on a key walk (docs/keys.md, "Cycle progress"): a uuid table
//! without an index on `created_at` is walked by key, where a key's value
//! says nothing about how far the cycle has come; the cycle's rows done
//! (`reconciliation_cursor.cycle_rows_done`) drive the plan and `status`.

use std::time::Duration;

use sqlx::PgPool;
use stripe_reconciler::config::{Settings, Sizing};
use stripe_reconciler::scan::{RunSummary, ScanJob};

use crate::support::keyed::{app_table, migrate};
use crate::support::*;

const ROWS: i64 = 3_000;

async fn run(pool: &PgPool, stripe: &stripe_fake::StripeFake, s: &Settings) -> RunSummary {
    let (summary, result) = run_job(pool, &gateway(stripe), s, ScanJob::default()).await;
    result.unwrap();
    summary
}

async fn status_percent(pool: &PgPool, stripe: &stripe_fake::StripeFake) -> f64 {
    let env = vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_BASE", stripe.uri()),
        ("STRIPE_API_KEY", "sk_test_walk".to_owned()),
    ];
    let out = reconciler_output(&["status", "--json"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    json["cycle_progress_percent"].as_f64().unwrap()
}

#[sqlx::test(migrations = false)]
async fn a_key_walk_plans_its_runs_from_the_rows_done_and_completes_the_cycle_in_two(pool: PgPool) {
    app_table(&pool, "uuid", "bigint", false).await;
    sqlx::query(
        "INSERT INTO payments (id, order_id, stripe_payment_intent_id, status, created_at, updated_at)
         SELECT gen_random_uuid(), 'order-' || i, 'pi_' || i, 'paid',
                now() - i * interval '1 minute', now() - interval '1 hour'
           FROM generate_series(1, $1) AS i",
    )
    .bind(ROWS)
    .execute(&pool)
    .await
    .unwrap();
    migrate(&pool, &[]).await;
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;
    // A 20-minute cycle target, a run every 10 minutes: two runs a cycle.
    let mut s = settings(100);
    s.scan.batches_per_run = Sizing::Auto;
    s.scan.target_cycle = Duration::from_secs(1_200);
    s.scan.schedule_interval = Duration::from_secs(600);

    let first = run(&pool, &stripe, &s).await;
    let plan = first.plan.unwrap();
    // 3,000 rows over 2 runs, with the plan's margin: 1,800 rows, 18 batches.
    assert_eq!(plan.batches, 18, "{plan:?}");
    assert_eq!(plan.rows_per_run_needed.round(), 1_800.0, "{plan:?}");
    assert_eq!((first.batches, first.rows_scanned), (18, 1_800));
    assert!(!first.wrapped);
    assert_eq!(
        count(&pool, "SELECT cycle_rows_done FROM reconciliation_cursor").await,
        1_800
    );
    assert_eq!(status_percent(&pool, &stripe).await.round(), 60.0);

    // Ten minutes later (the schedule), the second run plans the rest.
    sqlx::query(
        "UPDATE reconciliation_cursor SET cycle_started_at = cycle_started_at - interval '10 minutes'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let second = run(&pool, &stripe, &s).await;
    assert!(second.plan.unwrap().batches >= 12, "{second:?}");
    assert!(second.wrapped, "the cycle completed in the second run");
    assert_eq!(second.rows_scanned, 1_200);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_cursor
              WHERE last_cycle_completed_at IS NOT NULL AND cycle_rows_done = 0"
        )
        .await,
        1
    );
    assert_eq!(status_percent(&pool, &stripe).await, 0.0);
}
