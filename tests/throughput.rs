//! Issue 6's promises, as behaviour: bounded concurrency (the shared rate
//! limit is in tests/rate_limit.rs), and a set-based phase 3 that writes exactly what the design note's
//! per-row algorithm writes. Timings are in BENCHMARKS.md, not here.

mod support;

use std::time::Duration;

use sqlx::PgPool;
use stripe_reconciler::scan::{run_batch, Mode};
use support::seed_algorithm::seed_run_batch;
use support::*;
use wiremock::MockServer;

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn reads_run_concurrently_but_never_more_than_max_in_flight(pool: PgPool) {
    insert_paid(&pool, 24).await;
    let latency = Duration::from_millis(200);
    let (stripe, arrivals) = recording_stripe(latency).await;
    let s = support::JobSettings {
        max_in_flight: 3,
        ..settings(200)
    };

    run_batch(&pool, &gateway(&stripe), &s, Mode::Write, None)
        .await
        .unwrap();

    let arrivals = arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), 24);
    // A request is open for `latency` after it arrives: the arrivals inside
    // any slightly shorter window are requests open at the same time.
    let peak = max_in_window(&arrivals, latency - Duration::from_millis(30));
    assert_eq!(
        peak, 3,
        "concurrent, and bounded by RECONCILER_MAX_IN_FLIGHT"
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM payments WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        24
    );
}

/// What a user would compare: every row of the three tables, ids aside.
async fn snapshot(
    pool: &PgPool,
) -> (
    Vec<(i64, Option<String>, bool)>,
    Vec<(i64, String, String, Option<String>, bool)>,
    Vec<(String, String, String, String)>,
) {
    let payments = sqlx::query_as("SELECT id, observed_external_status, last_reconciled_at IS NOT NULL FROM payments ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap();
    let findings = sqlx::query_as(
        "SELECT payment_id, kind, local_status, external_status, resolved_at IS NULL FROM reconciliation_findings ORDER BY payment_id, kind",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    // The payload names its finding by (payment, kind), not by id; ours adds
    // the PaymentIntent id the writer checks before applying (issue 10).
    let outbox = sqlx::query_as(
        "SELECT o.aggregate_id, o.event_type, f.kind,
                (o.payload - 'finding_id' - 'stripe_payment_intent_id')::text
           FROM outbox o JOIN reconciliation_findings f ON f.id = (o.payload->>'finding_id')::bigint
          ORDER BY o.aggregate_id, o.event_type",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    (payments, findings, outbox)
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn set_based_phase_3_writes_what_the_design_notes_algorithm_writes(pool: PgPool) {
    let stripe = MockServer::start().await;
    for (pi, local, remote) in [
        ("pi_InSync", "paid", Some("succeeded")),
        ("pi_MissedSuccess", "pending", Some("succeeded")),
        ("pi_MissedCancel", "pending", Some("canceled")),
        ("pi_PaidNotExt", "paid", Some("requires_payment_method")),
        ("pi_FailedSucceeded", "failed", Some("succeeded")),
        ("pi_Processing", "pending", Some("processing")),
        (
            "pi_RetriedFailure",
            "failed",
            Some("requires_payment_method"),
        ),
        ("pi_Missing", "paid", None),
    ] {
        insert_payment(&pool, pi, local, 3600).await;
        match remote {
            Some(status) => mount(&stripe, pi, ok(pi, status)).await,
            None => {
                mount(
                    &stripe,
                    pi,
                    err(404, "invalid_request_error", "resource_missing"),
                )
                .await
            }
        }
    }
    insert_payment(&pool, "pi_Recent", "pending", 30).await;
    insert_payment(&pool, "pi_1/../../v1/customers", "pending", 3600).await;
    let gw = gateway(&stripe);

    // Twice each, so the second pass exercises dedup against open findings.
    for _ in 0..2 {
        seed_run_batch(&pool, &gw, "seed", 200, 600.0).await;
        sqlx::query("UPDATE reconciliation_cursor SET last_id = 0 WHERE job = 'seed'")
            .execute(&pool)
            .await
            .unwrap();
    }
    let reference = snapshot(&pool).await;
    sqlx::raw_sql(
        "TRUNCATE outbox; DELETE FROM reconciliation_findings; DELETE FROM reconciliation_cursor;
         UPDATE payments SET observed_external_status = NULL, last_reconciled_at = NULL;",
    )
    .execute(&pool)
    .await
    .unwrap();
    for _ in 0..2 {
        run_batch(&pool, &gw, &settings(200), Mode::Write, None)
            .await
            .unwrap();
        sqlx::query("UPDATE reconciliation_cursor SET last_id = 0")
            .execute(&pool)
            .await
            .unwrap();
    }
    let ours = snapshot(&pool).await;

    assert_eq!(ours, reference);
    assert_eq!(reference.1.len(), 6, "the data set has six findings");
    assert_eq!(reference.2.len(), 2, "and two commands");
}
