//! Faults on one batch, run in process: a Stripe 404 that is not
//! `resource_missing`, and a payment the webhook moves while the batch reads
//! Stripe.

use super::faults::nothing_written;
use crate::support::stripe_fake::{StripeFake, RETRIEVE};
use crate::support::*;
use sqlx::PgPool;
use stripe_reconciler::reconcile::Verdict;
use stripe_reconciler::scan::RunError;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_stripe_404_that_is_not_resource_missing_is_a_configuration_error(pool: PgPool) {
    insert_paid(&pool, 5).await;
    // Bare wiremock, not the fake: a wrong base URL, Stripe's
    // "Unrecognized request URL" 404 on every path (docs/testing.md).
    let stripe = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(404).set_body_json(serde_json::json!({
            "error": {"type": "invalid_request_error", "message": "Unrecognized request URL (GET: /v1/v1/payment_intents/pi_1)."}
        })))
        .mount(&stripe)
        .await;

    let e = scan_with(&pool, &gateway(&stripe), &settings(200))
        .await
        .unwrap_err();

    assert!(matches!(e, RunError::StripeRejected(_)), "{e:?}");
    assert_eq!(e.exit_code(), 78);
    nothing_written(&pool).await;
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_payment_moved_by_the_webhook_during_phase_2_gets_no_stale_finding(pool: PgPool) {
    let id = insert_payment(&pool, "pi_Racing", "pending", 3600).await;
    let stripe = StripeFake::start().await;
    stripe.answer_any("succeeded");
    // The batch's one read is held unanswered until the webhook has moved
    // the payment: the move falls in phase 2 whatever the machine's speed.
    let mut read = stripe.hold_request(RETRIEVE, 1);
    let gw = gateway(&stripe);
    let s = settings(200);

    let batch = scan_with(&pool, &gw, &s);
    let webhook = async {
        read.arrived().await;
        let applied = stripe_reconciler::repair::apply_payment_succeeded(
            &pool,
            &Default::default(),
            &id.into(),
            None,
            "webhook",
        )
        .await
        .unwrap();
        read.release();
        applied
    };
    let (report, applied) = tokio::join!(batch, webhook);
    let report = report.unwrap();

    assert!(applied.changed);
    assert_eq!(
        report.verdicts.get(Verdict::InFlight),
        1,
        "the changed row is left for the next cycle"
    );
    assert_eq!(report.verdicts.get(Verdict::Repairable), 0);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox WHERE event_type LIKE 'Apply%'"
        )
        .await,
        0
    );
    assert_eq!(verified(&pool, id).await, (None, false));
    assert_eq!(
        cursor(&pool, "payments-vs-stripe").await,
        0,
        "the table's last rows were read: the cycle ended and the cursor is back at 0"
    );
}
