//! PaymentIntents the events feed names that no payment row holds:
//! `missing_locally` once, and with a metadata key only this application's.

use super::events::{all_findings, events_once, retrieves, Finding};
use crate::support::stripe_fake::{event, StripeFake};
use crate::support::*;
use serde_json::json;
use sqlx::PgPool;

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_succeeded_payment_intent_without_a_row_is_missing_locally_once(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    feed.push(event("evt_1", "pi_Orphan", "succeeded", 900));
    feed.push(event("evt_2", "pi_NotMoney", "payment_failed", 900));
    let mut orphan = payment_intent("pi_Orphan", "succeeded");
    orphan["metadata"] = json!({"shop_order": "order-9"});
    stripe.add_object(None, orphan);

    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert_eq!(summary.missing_locally_created, 1);
    let f = all_findings(&pool).await;
    assert_eq!(
        f,
        [Finding {
            payment_id: None,
            stripe_payment_intent_id: Some("pi_Orphan".into()),
            kind: "missing_locally".into(),
            open: true
        }]
    );
    assert_eq!(retrieves(&stripe, "pi_NotMoney").await, 0);
    assert!(outbox(&pool).await.is_empty(), "never repaired");

    // Read again (the window overlaps): still one finding, no new read.
    sqlx::query("UPDATE reconciliation_events_position SET covered_until = covered_until - interval '1 hour'").execute(&pool).await.unwrap();
    events_once(&pool, &stripe, &settings(200)).await.1.unwrap();
    assert_eq!(all_findings(&pool).await.len(), 1);
    assert_eq!(retrieves(&stripe, "pi_Orphan").await, 1);

    // The review queue and the status keep working with a finding without a payment.
    let mut conn = pool.acquire().await.unwrap();
    let listed = stripe_reconciler::store::findings::list(&mut conn, None, true, 10)
        .await
        .unwrap();
    assert_eq!(
        listed[0].stripe_payment_intent_id.as_deref(),
        Some("pi_Orphan")
    );
    let st = stripe_reconciler::status::read(
        &mut conn,
        "payments-vs-stripe",
        Some(&stripe_reconciler::events::events_job("payments-vs-stripe")),
        &stripe_reconciler::config::OutboxSettings::default(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(st.open_findings.get("missing_locally"), Some(&1));
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn with_a_metadata_key_only_this_applications_payment_intents_are_orphans(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    let mut ours = event("evt_1", "pi_Ours", "succeeded", 900);
    ours["data"]["object"]["metadata"] = json!({"shop_order": "order-1"});
    let mut theirs = event("evt_2", "pi_Theirs", "succeeded", 900);
    theirs["data"]["object"]["metadata"] = json!({"crm_invoice": "inv-7"});
    feed.push(ours);
    feed.push(theirs);
    let mut pi = payment_intent("pi_Ours", "succeeded");
    pi["metadata"] = json!({"shop_order": "order-1"});
    stripe.add_object(None, pi);
    let mut s = settings(200);
    s.events.orphan_metadata_key = Some("shop_order".into());

    let (summary, result) = events_once(&pool, &stripe, &s).await;
    result.unwrap();

    assert_eq!(
        (summary.missing_locally_created, summary.orphans_foreign),
        (1, 1)
    );
    let intents: Vec<Option<String>> = all_findings(&pool)
        .await
        .into_iter()
        .map(|f| f.stripe_payment_intent_id)
        .collect();
    assert_eq!(intents, [Some("pi_Ours".to_owned())]);
    assert_eq!(
        retrieves(&stripe, "pi_Theirs").await,
        0,
        "another application's money costs no read"
    );
}
