//! One batch end to end: every verdict path, on a real PostgreSQL, with Stripe
//! faked by wiremock; and the set-based phase 3 writes exactly what the design
//! note's per-row algorithm writes (docs/design.md; timings are in BENCHMARKS.md).

use crate::support::seed_algorithm::seed_run_batch;
use crate::support::stripe_fake::{self, StripeFake};
use crate::support::*;
use serde_json::json;
use sqlx::PgPool;
use stripe_reconciler::reconcile::Verdict;
use stripe_reconciler::scan::{run_batch, Mode, ScanGroups};

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn every_verdict_path_writes_exactly_what_it_should(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let in_sync = insert_payment(&pool, "pi_InSync1", "paid", 3600).await;
    let missed_success = insert_payment(&pool, "pi_MissedSuccess", "pending", 3600).await;
    let missed_cancel = insert_payment(&pool, "pi_MissedCancel", "pending", 3600).await;
    let paid_not_ext = insert_payment(&pool, "pi_PaidNotExt", "paid", 3600).await;
    let failed_succeeded = insert_payment(&pool, "pi_FailedSucceeded", "failed", 3600).await;
    let processing = insert_payment(&pool, "pi_Processing", "pending", 3600).await;
    let missing = insert_payment(&pool, "pi_Missing", "paid", 3600).await;
    let down = insert_payment(&pool, "pi_Down", "pending", 3600).await;
    let recent = insert_payment(&pool, "pi_Recent", "pending", 30).await;
    let malicious = insert_payment(&pool, "pi_1/../../v1/customers", "pending", 3600).await;
    let retried_failure = insert_payment(&pool, "pi_RetriedFailure", "failed", 3600).await;

    stripe.set_status("pi_InSync1", "succeeded");
    stripe.set_status("pi_MissedSuccess", "succeeded");
    stripe.set_status("pi_MissedCancel", "canceled");
    stripe.set_status("pi_PaidNotExt", "requires_payment_method");
    stripe.set_status("pi_FailedSucceeded", "succeeded");
    stripe.set_status("pi_Processing", "processing");
    stripe.delete("pi_Missing");
    stripe.fail_object(stripe_fake::RETRIEVE, "pi_Down", err(503, "api_error", ""));
    stripe.set_status("pi_RetriedFailure", "requires_payment_method");

    let report = scan_with(&pool, &gateway(&stripe), &settings(200))
        .await
        .unwrap();

    assert_eq!(report.scanned, 11);
    assert_eq!(report.verdicts.get(Verdict::InSync), 2);
    assert_eq!(report.verdicts.get(Verdict::InFlight), 2);
    assert_eq!(report.verdicts.get(Verdict::Repairable), 2);
    assert_eq!(report.verdicts.get(Verdict::NeedsReview), 4);
    assert_eq!(report.verdicts.get(Verdict::Unverifiable), 1);
    assert_eq!((report.findings_created, report.commands_enqueued), (6, 2));
    // The table's last rows: the batch ended the cycle (docs/scan.md, "Guards").
    assert!(report.wrapped);
    assert_eq!(report.cursor_to, 0);

    let f = |payment_id, kind: &str, local: &str, external: Option<&str>| FindingRow {
        payment_id,
        kind: kind.into(),
        local_status: local.into(),
        external_status: external.map(Into::into),
        open: true,
    };
    assert_eq!(
        findings(&pool).await,
        vec![
            f(
                missed_success,
                "missed_success",
                "pending",
                Some("succeeded")
            ),
            f(missed_cancel, "missed_cancel", "pending", Some("canceled")),
            f(
                paid_not_ext,
                "paid_locally_not_externally",
                "paid",
                Some("requires_payment_method")
            ),
            f(
                failed_succeeded,
                "unexpected:failed->succeeded",
                "failed",
                Some("succeeded")
            ),
            f(missing, "missing_externally", "paid", None),
            f(malicious, "invalid_payment_intent_id", "pending", None),
        ]
    );

    let finding_id = |pid: i64| {
        let pool = pool.clone();
        async move {
            count(
                &pool,
                &format!("SELECT id FROM reconciliation_findings WHERE payment_id = {pid}"),
            )
            .await
        }
    };
    assert_eq!(
        outbox(&pool).await,
        vec![
            OutboxRow {
                aggregate_type: "Payment".into(),
                aggregate_id: missed_success.to_string(),
                event_type: "ApplyPaymentSucceeded".into(),
                payload: json!({"payment_id": missed_success, "finding_id": finding_id(missed_success).await, "expected_local_status": "pending", "stripe_payment_intent_id": "pi_MissedSuccess"}),
            },
            OutboxRow {
                aggregate_type: "Payment".into(),
                aggregate_id: missed_cancel.to_string(),
                event_type: "ApplyPaymentCanceled".into(),
                payload: json!({"payment_id": missed_cancel, "finding_id": finding_id(missed_cancel).await, "expected_local_status": "pending", "stripe_payment_intent_id": "pi_MissedCancel"}),
            },
        ]
    );

    // Verified rows carry what Stripe said; unverifiable and in-flight rows are untouched.
    for (id, expected) in [
        (in_sync, (Some("succeeded"), true)),
        (missed_success, (Some("succeeded"), true)),
        (missed_cancel, (Some("canceled"), true)),
        (paid_not_ext, (Some("requires_payment_method"), true)),
        (failed_succeeded, (Some("succeeded"), true)),
        (processing, (Some("processing"), true)),
        (retried_failure, (Some("requires_payment_method"), true)),
        // Stripe's 404 and a malformed id are definitive answers: stamped, so
        // they do not hold the lag forever (their findings carry the problem).
        (missing, (None, true)),
        (malicious, (None, true)),
        (down, (None, false)),
        (recent, (None, false)),
    ] {
        let (status, reconciled) = verified(&pool, id).await;
        assert_eq!((status.as_deref(), reconciled), expected, "payment {id}");
    }

    // The scan never changes payments.status: that is the canonical writer's job.
    assert_eq!(
        count(&pool, "SELECT count(*) FROM payments WHERE version <> 0").await,
        0
    );
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 0);

    // Neither the recent row nor the malicious id produced a request.
    let paths: Vec<String> = stripe
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| r.url.path().to_owned())
        .collect();
    assert!(
        !paths
            .iter()
            .any(|p| p.contains("Recent") || p.contains("customers")),
        "{paths:?}"
    );
    assert!(
        paths
            .iter()
            .all(|p| p.starts_with("/v1/payment_intents/pi_")),
        "{paths:?}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_row_updated_a_minute_ago_is_in_flight_without_a_stripe_call(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let id = insert_payment(&pool, "pi_JustChanged", "pending", 60).await;
    stripe.set_status("pi_JustChanged", "succeeded");

    let report = scan_with(&pool, &gateway(&stripe), &settings(200))
        .await
        .unwrap();

    assert_eq!(report.verdicts.get(Verdict::InFlight), 1);
    assert!(
        stripe.received_requests().await.unwrap().is_empty(),
        "Stripe was called"
    );
    assert_eq!(verified(&pool, id).await, (None, false));
    assert!(findings(&pool).await.is_empty());
    assert_eq!(
        cursor(&pool, "payments-vs-stripe").await,
        0,
        "the cursor still moves past it (to the end of the table: the cycle ends)"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_verified_in_sync_row_clears_its_open_findings(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let id = insert_payment(&pool, "pi_Healed", "paid", 3600).await;
    sqlx::query("INSERT INTO reconciliation_findings (payment_id, kind, local_status) VALUES ($1, 'missing_externally', 'paid')")
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
    stripe.set_status("pi_Healed", "succeeded");

    let report = scan_with(&pool, &gateway(&stripe), &settings(200))
        .await
        .unwrap();

    assert_eq!(report.findings_cleared, 1);
    let resolution: Option<String> = sqlx::query_scalar("SELECT resolution FROM reconciliation_findings WHERE payment_id = $1 AND resolved_at IS NOT NULL")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(resolution.as_deref(), Some("cleared"));
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn dry_run_writes_nothing_not_even_the_cursor(pool: PgPool) {
    let stripe = StripeFake::start().await;
    insert_payment(&pool, "pi_Drift", "pending", 3600).await;
    stripe.set_status("pi_Drift", "succeeded");

    let s = settings(200);
    let facts = facts(&pool, &s).await;
    let report = run_batch(
        &pool,
        &gateway(&stripe),
        &ScanGroups::of(&s, &facts),
        Mode::DryRun { after: None },
        None,
    )
    .await
    .unwrap();

    assert_eq!(report.verdicts.get(Verdict::Repairable), 1);
    assert_eq!((report.findings_created, report.commands_enqueued), (1, 1));
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox").await, 0);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_cursor").await,
        0
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        0
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
    let payments = sqlx::query_as("SELECT p.id, s.observed_external_status, coalesce(s.last_reconciled_at IS NOT NULL, false) FROM payments p LEFT JOIN reconciliation_payment_state s ON s.payment_id = p.id ORDER BY p.id")
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
    // the PaymentIntent id the writer checks before applying (docs/scan.md, "Guards").
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
    let stripe = StripeFake::start().await;
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
            Some(status) => {
                stripe.set_status(pi, status);
            }
            None => stripe.delete(pi),
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
         TRUNCATE reconciliation_payment_state;",
    )
    .execute(&pool)
    .await
    .unwrap();
    for _ in 0..2 {
        scan_with(&pool, &gw, &settings(200)).await.unwrap();
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
