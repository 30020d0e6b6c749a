//! Checkout Session events (docs/checkout-sessions.md, "Events"): a missed
//! `checkout.session.completed`
//! is found within one events run, on the platform and on a connected
//! account; a paid session no row names is `missing_locally`; an async
//! `unpaid` completion is not booked.

use super::checkout_sessions::{
    add_session_columns, insert_session_row, now, pi_at, session_settings, ACCT,
};
use crate::support::stripe_fake::checkout_session;
use crate::support::stripe_fake::{StripeFake, SESSION_LIST, SESSION_RETRIEVE};
use crate::support::*;
use serde_json::{json, Value};
use sqlx::PgPool;
use stripe_reconciler::config::ReadMode;
use stripe_reconciler::events::EventsJob;

/// A `checkout.session.*` event carrying `session`, 15 minutes old (past
/// the grace window).
fn session_event(id: &str, event_type: &str, session: &Value) -> Value {
    json!({"id": id, "object": "event", "api_version": "2024-06-20",
           "created": now() - 900, "type": event_type, "data": {"object": session},
           "livemode": false, "pending_webhooks": 1,
           "request": {"id": null, "idempotency_key": null}})
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_missed_checkout_session_completed_is_found_by_one_events_run(pool: PgPool) {
    add_session_columns(&pool).await;
    let stripe = StripeFake::start().await;
    let t0 = now() - 3 * 3600;
    let platform = insert_session_row(&pool, "cs_test_EvPlatform", "pending", t0, None).await;
    let connected = insert_session_row(&pool, "cs_test_EvConnect", "pending", t0, Some(ACCT)).await;
    let sepa = insert_session_row(&pool, "cs_test_EvSepa", "pending", t0, None).await;
    let arrange = |account: Option<&str>, cs: &str, pi: &str, pi_status: &str, paid: &str| {
        stripe.add_object(account, pi_at(pi, pi_status, t0));
        let session = checkout_session(cs, "complete", paid, Some(pi), t0);
        stripe.add_session(account, session.clone());
        stripe.push_event(
            account,
            session_event(&format!("evt_{pi}"), "checkout.session.completed", &session),
        );
    };
    arrange(
        None,
        "cs_test_EvPlatform",
        "pi_EvPlatform",
        "succeeded",
        "paid",
    );
    arrange(
        Some(ACCT),
        "cs_test_EvConnect",
        "pi_EvConnect",
        "succeeded",
        "paid",
    );
    arrange(None, "cs_test_EvSepa", "pi_EvSepa", "processing", "unpaid");
    // Paid, and no row names the session or its PaymentIntent.
    arrange(None, "cs_test_EvOrphan", "pi_EvOrphan", "succeeded", "paid");
    // Stripe also sends `payment_intent.succeeded` for a paid session's
    // PaymentIntent: its row holds no PaymentIntent id yet, so it is judged
    // through the session, never as money no row names (`missing_locally`).
    for (account, pi) in [(None, "pi_EvPlatform"), (Some(ACCT), "pi_EvConnect")] {
        stripe.push_event(
            account,
            crate::support::stripe_fake::event(&format!("evt_s_{pi}"), pi, "succeeded", 890),
        );
    }

    let s = session_settings(ReadMode::List);
    let (summary, result) = run_job(&pool, &gateway(&stripe), &s, EventsJob).await;
    result.unwrap();
    assert_eq!(summary.events_read, 6, "{summary:?}");

    type Found = (Option<i64>, String, Option<String>, Option<String>);
    let found: Vec<Found> = sqlx::query_as(
        "SELECT payment_id, kind, checkout_session_id, stripe_payment_intent_id
           FROM reconciliation_findings WHERE resolved_at IS NULL ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let of = |id: Option<i64>| found.iter().filter(|f| f.0 == id).collect::<Vec<_>>();
    assert_eq!(
        of(Some(platform)),
        [&(
            Some(platform),
            "missed_success".into(),
            Some("cs_test_EvPlatform".into()),
            Some("pi_EvPlatform".into())
        )]
    );
    assert_eq!(
        of(Some(connected)),
        [&(
            Some(connected),
            "missed_success".into(),
            Some("cs_test_EvConnect".into()),
            Some("pi_EvConnect".into())
        )]
    );
    assert!(
        of(Some(sepa)).is_empty(),
        "an async unpaid session is in flight, not paid: {found:?}"
    );
    assert_eq!(
        of(None),
        [&(
            None,
            "missing_locally".into(),
            None,
            Some("pi_EvOrphan".into())
        )]
    );
    // Each row's session was read (listed, the default read mode) on its
    // own account.
    let reads: Vec<Option<String>> = stripe
        .seen()
        .into_iter()
        .filter(|x| [SESSION_RETRIEVE, SESSION_LIST].contains(&x.endpoint))
        .map(|x| x.account)
        .collect();
    assert!(reads.contains(&Some(ACCT.into())), "{reads:?}");
    assert!(reads.contains(&None), "{reads:?}");
    // The repairs go out like the scan's.
    let commands = outbox(&pool).await;
    let sessions: Vec<&Value> = commands
        .iter()
        .map(|c| &c.payload["checkout_session_id"])
        .collect();
    assert_eq!(commands.len(), 2, "{commands:?}");
    assert!(sessions.contains(&&json!("cs_test_EvPlatform")));
    assert!(sessions.contains(&&json!("cs_test_EvConnect")));
}
