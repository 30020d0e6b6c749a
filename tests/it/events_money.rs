//! Money through the events feed: refunds and disputes on paid orders
//! found by one events run, and a refund of a charge without a
//! PaymentIntent counted, not an error.

use super::events::{all_findings, covered_until, events_once, retrieves};
use crate::support::arrange;
use crate::support::stripe_fake::{event, StripeFake};
use crate::support::*;
use chrono::Utc;
use serde_json::{json, Value};
use sqlx::PgPool;

/// A Stripe event, `secs_ago` old, whose object is a charge, refund or
/// dispute (Stripe API reference shapes, trimmed to what names the money).
fn money_event(id: &str, event_type: &str, object: Value, secs_ago: i64) -> Value {
    json!({"id": id, "object": "event", "api_version": "2024-06-20",
           "created": Utc::now().timestamp() - secs_ago,
           "type": event_type, "data": {"object": object},
           "livemode": false, "pending_webhooks": 1,
           "request": {"id": null, "idempotency_key": null}})
}

/// A Refund object of `amount` on charge `charge`, naming `pi` (or null).
fn refund_object(charge: &str, pi: Value, amount: i64) -> Value {
    json!({"id": format!("re_{charge}"), "object": "refund", "amount": amount,
           "balance_transaction": "txn_1", "charge": charge, "created": Utc::now().timestamp(),
           "currency": "usd", "metadata": {}, "payment_intent": pi, "reason": null,
           "receipt_number": null, "source_transfer_reversal": null, "status": "succeeded",
           "transfer_reversal": null})
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_refund_and_a_dispute_on_paid_orders_are_found_by_one_events_run(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    let refunded = arrange::payment("pi_Refunded")
        .refunded(1099)
        .insert(&pool, &stripe)
        .await
        .id;
    let disputed = arrange::payment("pi_Disputed")
        .disputed()
        .insert(&pool, &stripe)
        .await
        .id;
    let mut charge = clean_charge("pi_Refunded");
    charge["amount_refunded"] = json!(1099);
    charge["refunded"] = json!(true);
    feed.push(event("evt_paid", "pi_Refunded", "succeeded", 300));
    feed.push(money_event("evt_refund", "charge.refunded", charge, 60));
    feed.push(money_event(
        "evt_refund_object",
        "refund.created",
        refund_object("ch_Refunded", json!("pi_Refunded"), 1099),
        60,
    ));
    feed.push(money_event(
        "evt_dispute",
        "charge.dispute.created",
        json!({"id": "dp_1", "object": "dispute", "amount": 1099, "charge": "ch_Disputed",
               "created": Utc::now().timestamp(), "currency": "usd", "evidence_details": {},
               "is_charge_refundable": false, "livemode": false, "metadata": {},
               "payment_intent": {"id": "pi_Disputed", "object": "payment_intent"},
               "reason": "fraudulent", "status": "needs_response"}),
        30,
    ));

    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();

    assert_eq!((summary.events_read, summary.payment_intents), (4, 2));
    assert_eq!(
        (
            retrieves(&stripe, "pi_Refunded").await,
            retrieves(&stripe, "pi_Disputed").await
        ),
        (1, 1),
        "each PaymentIntent is read once, however many events name it"
    );
    let open: Vec<(Option<i64>, String)> = all_findings(&pool)
        .await
        .into_iter()
        .filter(|f| f.open)
        .map(|f| (f.payment_id, f.kind))
        .collect();
    assert_eq!(
        open,
        [
            (Some(refunded), "refunded".to_owned()),
            (Some(disputed), "disputed".to_owned())
        ]
    );
    assert_eq!(summary.commands_enqueued, 0);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_refund_of_a_charge_without_a_payment_intent_is_counted_not_an_error(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    feed.push(money_event(
        "evt_legacy_refund",
        "refund.created",
        refund_object("ch_Legacy", Value::Null, 500),
        60,
    ));

    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;

    result.unwrap();
    assert_eq!(
        (
            summary.events_without_payment_intent,
            summary.events_read,
            summary.payment_intents_retrieved
        ),
        (1, 0, 0)
    );
    assert_eq!(summary.events_skipped, 0, "counted, not called unreadable");
    let mut metrics = stripe_reconciler::metrics::EventsMetrics::new().unwrap();
    metrics.observe_events(
        &stripe_reconciler::events::figures(&summary, gateway(&stripe).request_counts()),
        None,
        0.0,
    );
    let text = metrics.figures().encode().unwrap();
    assert!(
        text.lines()
            .any(|l| l == "stripe_reconciler_events_without_payment_intent 1"),
        "pushed: {text}"
    );
    assert!(all_findings(&pool).await.is_empty());
    assert!(
        covered_until(&pool).await.is_some(),
        "the position moves past it"
    );
}
