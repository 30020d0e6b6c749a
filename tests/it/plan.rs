//! `RECONCILER_BATCHES_PER_RUN`: `auto` sizes a run at its start and never
//! plans more than fits before the run deadline; a number means exactly that
//! many batches; `status --json` shows the plan (docs/operations.md, "Sizing (`auto`)").

use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use stripe_reconciler::capacity::Shortfall;
use stripe_reconciler::config::RunSettings;
use stripe_reconciler::scan::ScanJob;

use crate::support::*;

async fn run(
    pool: &PgPool,
    stripe: &stripe_fake::StripeFake,
    rps: u32,
    s: &Settings,
) -> stripe_reconciler::scan::RunSummary {
    let gateway = gateway_with(stripe, rps, Duration::from_secs(2));
    let (summary, result) = run_job(pool, &gateway, s, ScanJob::default()).await;
    result.unwrap();
    summary
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn auto_plans_no_more_than_fits_before_the_deadline(pool: PgPool) {
    insert_paid(&pool, 2_000).await;
    let stripe = stripe_answering("succeeded", Duration::from_millis(50)).await;
    let s = Settings {
        scan: ScanSettings {
            batches_per_run: Sizing::Auto,
            // The whole table within one interval: far more than a run can read.
            target_cycle: Duration::from_secs(600),
            schedule_interval: Duration::from_secs(600),
            ..settings(10).scan
        },
        run: RunSettings {
            run_deadline: Some(Duration::from_secs(2)),
            ..RunSettings::default()
        },
        stripe: StripeSettings {
            rate_limit_rps: 20,
            max_in_flight: 2,
            ..settings(10).stripe
        },
        ..settings(10)
    };

    // A first run paces itself by the rate limit: 2 s × 20 rows/s = 4 batches of 10.
    let first = run(&pool, &stripe, 20, &s).await;
    let plan = first.plan.unwrap();
    assert_eq!(plan.batches, 4);
    assert!(!plan.pace.measured);
    assert_eq!(plan.shortfall, Some(Shortfall::RateBudget));
    assert!(plan.target_ratio < 1.0, "{plan:?}");
    assert!(first.batches <= 4 && first.rows_scanned <= 40, "{first:?}");

    // With a history of 5 rows/s the next run plans 2 s × 5 = 10 rows: one batch.
    sqlx::raw_sql(
        "DELETE FROM reconciliation_runs;
         INSERT INTO reconciliation_runs (job, started_at, finished_at, batch_size, batches, rows_scanned, outcome, max_payment_id) VALUES
             ('payments-vs-stripe', now() - interval '20 minutes', now() - interval '20 minutes' + interval '10 seconds', 10, 5, 50, 'completed', 2000),
             ('payments-vs-stripe', now() - interval '10 minutes', now() - interval '10 minutes' + interval '10 seconds', 10, 5, 50, 'completed', 2000);",
    )
    .execute(&pool)
    .await
    .unwrap();
    let second = run(&pool, &stripe, 20, &s).await;
    let plan = second.plan.unwrap();
    assert!(plan.pace.measured);
    assert_eq!(plan.pace.rows_per_second, 5.0);
    assert_eq!(plan.batches, 1);
    assert_eq!(plan.shortfall, Some(Shortfall::RateBudget));
    assert_eq!((second.batches, second.rows_scanned), (1, 10));
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_number_means_that_many_batches_and_auto_sizes_for_the_target(pool: PgPool) {
    insert_paid(&pool, 200).await;
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;

    let fixed = run(
        &pool,
        &stripe,
        1000,
        &Settings {
            scan: ScanSettings {
                batches_per_run: Sizing::Fixed(3),
                ..settings(10).scan
            },
            ..settings(10)
        },
    )
    .await;
    assert_eq!(fixed.plan.unwrap().batches, 3);
    assert_eq!((fixed.batches, fixed.rows_scanned), (3, 30));

    // 170 rows ahead, a day of 10-minute runs: 170 / 144 × 1.2 = 1.4 rows a run, one batch.
    let auto = run(
        &pool,
        &stripe,
        1000,
        &Settings {
            scan: ScanSettings {
                batches_per_run: Sizing::Auto,
                ..settings(10).scan
            },
            ..settings(10)
        },
    )
    .await;
    let plan = auto.plan.unwrap();
    assert_eq!(plan.batches, 1);
    assert_eq!(plan.shortfall, None);
    assert!(plan.expected_cycle_seconds.unwrap() <= 86_400.0, "{plan:?}");
    assert_eq!((auto.batches, auto.rows_scanned), (1, 10));

    // One hour for the 160 rows left: 6 runs of 32 rows, four batches.
    let hour = Settings {
        scan: ScanSettings {
            batches_per_run: Sizing::Auto,
            target_cycle: Duration::from_secs(3_600),
            ..settings(10).scan
        },
        ..settings(10)
    };
    let fast = run(&pool, &stripe, 1000, &hour).await;
    assert_eq!(fast.plan.unwrap().batches, 4);
    assert_eq!(fast.rows_scanned, 40);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn status_json_shows_the_next_runs_plan(pool: PgPool) {
    insert_paid(&pool, 10_000).await;
    sqlx::raw_sql(
        "INSERT INTO reconciliation_cursor (job, last_id, cycle_started_at) VALUES ('payments-vs-stripe', 0, now());
         INSERT INTO reconciliation_runs (job, started_at, finished_at, batch_size, batches, rows_scanned, outcome, max_payment_id) VALUES
             ('payments-vs-stripe', now() - interval '20 minutes', now() - interval '20 minutes' + interval '100 seconds', 1900, 1, 1000, 'completed', 10000),
             ('payments-vs-stripe', now() - interval '10 minutes', now() - interval '10 minutes' + interval '100 seconds', 1900, 1, 1000, 'completed', 10000);
         ANALYZE payments;",
    )
    .execute(&pool)
    .await
    .unwrap();

    let out = reconciler_output(
        &["status", "--json"],
        &[
            ("DATABASE_URL", database_url(&pool)),
            ("RECONCILER_TARGET_CYCLE_SECONDS", "3600".into()),
            ("RECONCILER_BATCH_SIZE", "100".into()),
        ],
    )
    .await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let plan = &s["plan"];
    // 10,000 rows in 6 runs: 1,667 rows, +20% = 2,000 rows a run, 20 batches of 100.
    assert_eq!(plan["batches"], 20, "{plan}");
    assert_eq!(
        plan["rows_per_run_needed"].as_f64().map(f64::round),
        Some(2_000.0)
    );
    assert_eq!(
        plan["pace"],
        serde_json::json!({"rows_per_second": 10.0, "measured": true})
    );
    assert_eq!(plan["target_cycle_seconds"], 3600.0);
    assert_eq!(plan["shortfall"], Value::Null);
    assert!(
        plan["expected_cycle_seconds"].as_f64().unwrap() <= 3600.0,
        "{plan}"
    );

    let pretty = reconciler_output(
        &["status"],
        &[
            ("DATABASE_URL", database_url(&pool)),
            ("RECONCILER_TARGET_CYCLE_SECONDS", "3600".into()),
            ("RECONCILER_BATCH_SIZE", "100".into()),
        ],
    )
    .await;
    let text = String::from_utf8_lossy(&pretty.stdout);
    assert!(
        text.contains("20 batches (2000 rows; 2000 rows per run needed)"),
        "{text}"
    );
    assert!(
        text.contains("10.0 rows/s (measured over the last 24 h)"),
        "{text}"
    );
}
