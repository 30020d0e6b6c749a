//! What a batch does with each Stripe failure class: a rejected key, Stripe
//! down for most of a batch, occasional failures, 404s that are and are not
//! `resource_missing`, rows that always fail, and a failing probe.

use crate::support::stripe_fake::{StripeFake, LIST, RETRIEVE};
use crate::support::*;
use serde_json::json;
use sqlx::PgPool;
use stripe_reconciler::reconcile::Verdict;
use stripe_reconciler::scan::RunError;
use stripe_reconciler::stripe::GatewayError;
use wiremock::ResponseTemplate;

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_rejected_key_aborts_the_batch_and_writes_nothing(pool: PgPool) {
    for i in 1..=5 {
        insert_payment(&pool, &format!("pi_{i}"), "pending", 3600).await;
    }
    // A rejected key: Stripe's 401 on every endpoint.
    let server = StripeFake::start().await;
    server.answer_every_request(&err(401, "invalid_request_error", "api_key_invalid"));

    let e = scan_with(&pool, &gateway(&server), &settings(200))
        .await
        .unwrap_err();

    assert!(matches!(e, RunError::StripeRejected(_)), "{e:?}");
    assert_eq!(e.exit_code(), 78);
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 0);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
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

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn stripe_down_for_most_of_a_batch_abandons_it_without_moving_the_cursor(pool: PgPool) {
    for i in 1..=10 {
        insert_payment(&pool, &format!("pi_{i}"), "pending", 3600).await;
    }
    let server = StripeFake::start().await;
    server.set_status("pi_1", "succeeded");
    // Stripe down for every other read, its outage probe too.
    for i in 2..=10 {
        server.fail_object(RETRIEVE, &format!("pi_{i}"), err(503, "api_error", ""));
    }
    server.answer_on(None, LIST, err(503, "api_error", ""));

    let e = scan_with(&pool, &gateway(&server), &settings(200))
        .await
        .unwrap_err();

    assert!(
        matches!(
            e,
            RunError::StripeDown {
                failed: 9,
                asked: 10
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.exit_code(), 1);
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 0);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn occasional_failures_are_unverifiable_and_the_cursor_moves_on(pool: PgPool) {
    for i in 1..=10 {
        insert_payment(&pool, &format!("pi_{i}"), "paid", 3600).await;
    }
    let server = StripeFake::start().await;
    server.fail_object(RETRIEVE, "pi_4", err(500, "api_error", ""));
    server.answer_any("succeeded");

    let report = scan_with(&pool, &gateway(&server), &settings(200))
        .await
        .unwrap();

    assert_eq!(
        report
            .verdicts
            .get(stripe_reconciler::reconcile::Verdict::Unverifiable),
        1
    );
    // The batch read the table's last rows: the cycle ended (docs/scan.md, "Guards").
    assert!(report.wrapped);
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 0);
    assert_eq!(verified(&pool, 4).await, (None, false));
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        9
    );
}

/// Outage probes (`GET /v1/payment_intents?limit=1`): the only list reads
/// of a retrieve-mode batch.
async fn probes(server: &StripeFake) -> usize {
    server.count(LIST)
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_404_that_is_neither_resource_missing_nor_a_wrong_url_leaves_only_that_row_unverifiable(
    pool: PgPool,
) {
    let stripe = StripeFake::start().await;
    let mut healthy = Vec::new();
    for i in 0..7 {
        let pi = format!("pi_Healthy{i}");
        healthy.push(insert_payment(&pool, &pi, "paid", 3600).await);
        stripe.set_status(&pi, "succeeded");
    }
    // A Stripe envelope with another code, an empty object, a proxy's HTML page.
    let odd_code = insert_payment(&pool, "pi_OddCode", "pending", 3600).await;
    stripe.fail_object(
        RETRIEVE,
        "pi_OddCode",
        ResponseTemplate::new(404).set_body_json(json!({"error": {
            "type": "invalid_request_error", "code": "parameter_unknown",
            "message": "Received unknown parameter: expand"}})),
    );
    let empty = insert_payment(&pool, "pi_EmptyBody", "pending", 3600).await;
    stripe.fail_object(
        RETRIEVE,
        "pi_EmptyBody",
        ResponseTemplate::new(404).set_body_json(json!({})),
    );
    let html = insert_payment(&pool, "pi_HtmlBody", "pending", 3600).await;
    stripe.fail_object(
        RETRIEVE,
        "pi_HtmlBody",
        ResponseTemplate::new(404).set_body_raw("<html><body>Not Found</body></html>", "text/html"),
    );

    let report = scan_with(&pool, &gateway(&stripe), &settings(20))
        .await
        .expect("a 404 that says nothing is not a reason to abandon the batch");

    assert_eq!(report.verdicts.get(Verdict::Unverifiable), 3, "{report:?}");
    assert_eq!(report.verdicts.get(Verdict::InSync), 7, "{report:?}");
    for id in [odd_code, empty, html] {
        assert_eq!(
            verified(&pool, id).await,
            (None, false),
            "payment {id} is UNVERIFIABLE, not stamped"
        );
    }
    for id in &healthy {
        assert_eq!(verified(&pool, *id).await, (Some("succeeded".into()), true));
    }
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE kind = 'missing_externally'"
        )
        .await,
        0,
        "no row is claimed missing from Stripe on a 404 that did not say so"
    );
    assert_eq!(
        cursor(&pool, SCAN_JOB).await,
        0,
        "the cursor moved past the batch (the table's last rows: the cycle ended)"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn stripes_unrecognized_request_url_404_is_a_configuration_error_and_writes_nothing(
    pool: PgPool,
) {
    let stripe = StripeFake::start().await;
    for i in 0..5 {
        let pi = format!("pi_Fine{i}");
        insert_payment(&pool, &pi, "pending", 3600).await;
        stripe.set_status(&pi, "succeeded");
    }
    insert_payment(&pool, "pi_X", "paid", 3600).await;
    stripe.fail_object(RETRIEVE, "pi_X", ResponseTemplate::new(404).set_body_json(json!({"error": {
            "type": "invalid_request_error",
            "message": "Unrecognized request URL (GET: /v1/payment_intents/pi_X). Please see https://stripe.com/docs or we can help at https://support.stripe.com/."}})));

    let err = scan_with(&pool, &gateway(&stripe), &settings(20))
        .await
        .expect_err("a wrong URL must stop the run");

    assert!(
        matches!(
            err,
            RunError::StripeRejected(GatewayError::Misconfigured { status: 404, .. })
        ),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), 78);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox").await, 0);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        0
    );
    assert!(cursor(&pool, SCAN_JOB).await <= 0, "the cursor moved");
}

/// Ten paid payments; the first six answer 500 on every attempt, the other
/// four `succeeded`. Returns the ids in order.
async fn six_failing_of_ten(pool: &PgPool, stripe: &StripeFake) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 0..10 {
        let pi = format!("pi_Row{i}");
        ids.push(insert_payment(pool, &pi, "paid", 3600).await);
        if i < 6 {
            stripe.fail_object(RETRIEVE, &pi, server_error());
        } else {
            stripe.set_status(&pi, "succeeded");
        }
    }
    ids
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn rows_that_always_fail_at_the_head_of_a_batch_do_not_stall_the_scan_when_stripe_answers(
    pool: PgPool,
) {
    let stripe = StripeFake::start().await;
    let ids = six_failing_of_ten(&pool, &stripe).await;
    // The probe reads the fake's (empty) PaymentIntent list.
    let gw = gateway(&stripe);
    let s = settings(10);

    let report = scan_with(&pool, &gw, &s)
        .await
        .expect("Stripe answers the probe: the batch commits");

    assert_eq!(probes(&stripe).await, 1, "Stripe was probed once");
    assert_eq!(report.verdicts.get(Verdict::Unverifiable), 6);
    assert_eq!(report.verdicts.get(Verdict::InSync), 4);
    assert_eq!(
        cursor(&pool, SCAN_JOB).await,
        0,
        "the cursor moved past them (the table's last rows: the cycle ended)"
    );
    for id in &ids[..6] {
        assert_eq!(verified(&pool, *id).await, (None, false));
    }
    for id in &ids[6..] {
        assert_eq!(verified(&pool, *id).await, (Some("succeeded".into()), true));
    }
    // The next batch reaches the end of the table instead of retrying them forever.
    assert!(scan_with(&pool, &gw, &s).await.unwrap().wrapped);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn when_the_probe_fails_too_the_batch_is_abandoned_as_stripe_down(pool: PgPool) {
    let stripe = StripeFake::start().await;
    six_failing_of_ten(&pool, &stripe).await;
    stripe.answer_on(None, LIST, server_error());

    let err = scan_with(&pool, &gateway(&stripe), &settings(10))
        .await
        .expect_err("Stripe is down");

    assert!(
        matches!(
            err,
            RunError::StripeDown {
                failed: 6,
                asked: 10
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), 1);
    assert!(probes(&stripe).await >= 1, "Stripe was probed");
    assert_eq!(cursor(&pool, SCAN_JOB).await, 0, "cursor unmoved");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        0
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );
}
