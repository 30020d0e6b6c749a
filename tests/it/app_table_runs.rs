//! The application's `payments` stays the application's (docs/design.md, "Invariants"), as the
//! scan sees it: a payment the application deletes closes its findings as
//! `payment_deleted` and skips its commands; a batch that reads the table's
//! last rows ends the cycle, so a small table or partition is verified again
//! by every run. (`app_table` covers `migrate` and upgrades.)

use crate::support::stripe_fake::StripeFake;
use serde_json::Value;
use sqlx::PgPool;
use stripe_reconciler::config::Sizing;
use stripe_reconciler::scan::ScanJob;

use crate::support::*;

#[sqlx::test(migrations = false)]
async fn a_deleted_payment_closes_its_findings_and_skips_its_commands(pool: PgPool) {
    // The application's table (the demo's): migrate never creates it.
    create_demo_payments(&pool).await;
    let out = reconciler_output(&["migrate"], &[("DATABASE_URL", database_url(&pool))]).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let gone = insert_payment(&pool, "pi_Gone", "pending", 3600).await;
    let kept = insert_payment(&pool, "pi_Kept", "pending", 3600).await;
    let stripe = StripeFake::start().await;
    for pi in ["pi_Gone", "pi_Kept", "pi_Late"] {
        stripe.set_status(pi, "succeeded");
    }
    let s = settings(100);
    let report = scan(&pool, &stripe, &s).await;
    assert_eq!((report.findings_created, report.commands_enqueued), (2, 2));

    // 1. The application deletes a payment with an open finding and a queued
    //    repair command (GDPR erasure, an archiving job): no foreign key
    //    stops it. The next scan passes its id.
    sqlx::query("DELETE FROM payments WHERE id = $1")
        .bind(gone)
        .execute(&pool)
        .await
        .unwrap();
    let report = scan(&pool, &stripe, &s).await;
    assert_eq!(report.findings_payment_deleted, 1, "{report:?}");
    assert_eq!(
        resolution_of(&pool, gone).await,
        Some("payment_deleted".into())
    );
    assert!(command_error(&pool, gone)
        .await
        .is_some_and(|e| e.starts_with("payment_deleted")));
    // `status` counts nothing for it.
    let out = reconciler_output(
        &["status", "--json"],
        &[("DATABASE_URL", database_url(&pool))],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        status["open_findings"],
        serde_json::json!({"missed_success": 1})
    );
    assert_eq!(resolution_of(&pool, kept).await, None);

    // 2. A payment deleted after the scan enqueued its command, before any
    //    scan passes it again: the repair worker skips the command.
    let late = insert_payment(&pool, "pi_Late", "pending", 3600).await;
    let report = scan(&pool, &stripe, &s).await;
    assert_eq!(report.findings_created, 1);
    sqlx::query("DELETE FROM payments WHERE id = $1")
        .bind(late)
        .execute(&pool)
        .await
        .unwrap();
    let drained = drain_all(&pool).await;
    assert_eq!(
        (drained.skipped, drained.failed, drained.applied),
        (1, 0, 1),
        "{drained:?}"
    );
    assert_eq!(
        resolution_of(&pool, late).await,
        Some("payment_deleted".into())
    );
    assert!(command_error(&pool, late)
        .await
        .is_some_and(|e| e.starts_with("payment_deleted")));
    assert_eq!(resolution_of(&pool, kept).await, Some("repaired".into()));
}

/// The resolution of the payment's only finding (`None` while open).
async fn resolution_of(pool: &PgPool, payment: i64) -> Option<String> {
    sqlx::query_scalar("SELECT resolution FROM reconciliation_findings WHERE payment_id = $1")
        .bind(payment)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// `last_error` of the payment's repair command, once closed.
async fn command_error(pool: &PgPool, payment: i64) -> Option<String> {
    sqlx::query_scalar(
        "SELECT last_error FROM outbox
          WHERE (payload->>'payment_id')::bigint = $1 AND processed_at IS NOT NULL",
    )
    .bind(payment)
    .fetch_optional(pool)
    .await
    .unwrap()
    .flatten()
}

/// 10 rows, one planned batch per run: every run reads the 10 rows and ends
/// the cycle; no run spends its batch on an empty read.
#[sqlx::test(migrations = false)]
async fn a_small_table_is_verified_again_by_every_run(pool: PgPool) {
    // The application's table (the demo's): migrate never creates it.
    create_demo_payments(&pool).await;
    let out = reconciler_output(&["migrate"], &[("DATABASE_URL", database_url(&pool))]).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    insert_paid(&pool, 10).await;
    let stripe = StripeFake::start().await;
    for i in 1..=10 {
        stripe.set_status(&format!("pi_{i}"), "succeeded");
    }
    let s = Settings {
        scan: ScanSettings {
            batches_per_run: Sizing::Fixed(1),
            ..settings(200).scan
        },
        ..settings(200)
    };
    let mut completed = Vec::new();
    for run in 1..=3 {
        let (summary, result) = run_job(&pool, &gateway(&stripe), &s, ScanJob::default()).await;
        result.unwrap();
        assert_eq!(
            (summary.batches, summary.rows_scanned, summary.wrapped),
            (1, 10, true),
            "run {run}: {summary:?}"
        );
        assert_eq!(summary.cursor_position, Some(0), "run {run}");
        assert_eq!(requests(&stripe).await, 10 * run as usize, "run {run}");
        let done: Option<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
            "SELECT last_cycle_completed_at FROM reconciliation_cursor WHERE job = $1",
        )
        .bind(SCAN_JOB)
        .fetch_one(&pool)
        .await
        .unwrap();
        completed.push(done.expect("the cycle completed"));
    }
    assert!(completed.windows(2).all(|w| w[0] < w[1]), "{completed:?}");

    // `status --json`: counts are integers, also the plan's.
    let out = reconciler_output(
        &["status", "--json"],
        &[("DATABASE_URL", database_url(&pool))],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(status["cycle_last_completed_unix"].is_number(), "{status}");
    let plan = &status["plan"];
    for key in ["batches", "rows_per_run_needed", "rows_per_run_planned"] {
        assert!(plan[key].is_u64(), "plan.{key} is an integer: {plan}");
    }
    assert!(status["rows"].is_i64(), "{status}");
}

/// The same for a partition: 10 of its rows among 20 others', one planned
/// batch per run; every run reads its 10 rows and ends its cycle.
#[sqlx::test(migrations = false)]
async fn a_small_partition_is_verified_again_by_every_run(pool: PgPool) {
    // The application's table (the demo's): migrate never creates it.
    create_demo_payments(&pool).await;
    use stripe_reconciler::config::{ColumnName, PartitionSetting};
    let out = reconciler_output(&["migrate"], &[("DATABASE_URL", database_url(&pool))]).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    sqlx::raw_sql("ALTER TABLE payments ADD COLUMN legal_entity text")
        .execute(&pool)
        .await
        .unwrap();
    insert_paid(&pool, 30).await;
    sqlx::raw_sql(
        "UPDATE payments SET legal_entity = CASE WHEN id % 3 = 0 THEN 'eu' ELSE 'us' END",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = StripeFake::start().await;
    for i in 1..=30 {
        stripe.set_status(&format!("pi_{i}"), "succeeded");
    }
    let mut s = Settings {
        scan: ScanSettings {
            batches_per_run: Sizing::Fixed(1),
            ..settings(200).scan
        },
        ..settings(200)
    };
    s.run.job = "payments-eu".into();
    s.schema.partition = Some(PartitionSetting {
        column: ColumnName::parse("RECONCILER_PARTITION_COLUMN", "legal_entity").unwrap(),
        value: "eu".into(),
    });
    for run in 1..=3 {
        let (summary, result) = run_job(&pool, &gateway(&stripe), &s, ScanJob::default()).await;
        result.unwrap();
        assert_eq!(
            (summary.batches, summary.rows_scanned, summary.wrapped),
            (1, 10, true),
            "run {run}: {summary:?}"
        );
        assert_eq!(requests(&stripe).await, 10 * run as usize, "run {run}");
    }
}
