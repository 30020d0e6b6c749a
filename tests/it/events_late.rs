//! Events listed late: an event whose `created` lies behind the stored
//! position but that Stripe listed only after the run that wrote it is read
//! by the next run's overlap and handled once, and the overlap widens to
//! follow the lateness observed, so one later than the old fixed 60 s is
//! not lost.

use super::events::{all_findings, events_once, retrieves};
use crate::support::arrange;
use crate::support::stripe_fake::{event, StripeFake};
use crate::support::*;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::PgPool;
use stripe_reconciler::store::events_position;

const JOB: &str = "payments-vs-stripe-events";

/// The platform feed's stored position and lateness (seconds).
async fn position(pool: &PgPool) -> (DateTime<Utc>, f64) {
    let mut conn = pool.acquire().await.unwrap();
    let p = events_position::read(&mut conn, JOB)
        .await
        .unwrap()
        .unwrap();
    (p.covered_until.unwrap(), p.lateness_seconds)
}

/// `e` with its `created` set `secs` before `at`: an event Stripe lists
/// only now, although created before the position.
fn behind(mut e: Value, at: DateTime<Utc>, secs: i64) -> Value {
    e["created"] = json!(at.timestamp() - secs);
    e
}

/// A `charge.refunded` event of `pi`'s charge (refunded 1099).
fn refund_event(id: &str, pi: &str) -> Value {
    let mut charge = clean_charge(pi);
    charge["amount_refunded"] = json!(1099);
    charge["refunded"] = json!(true);
    json!({"id": id, "object": "event", "api_version": "2024-06-20",
           "created": Utc::now().timestamp(), "type": "charge.refunded",
           "data": {"object": charge}, "livemode": false, "pending_webhooks": 1,
           "request": {"id": null, "idempotency_key": null}})
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_late_event_within_the_overlap_is_handled_exactly_once(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    arrange::payment("pi_OnTime").insert(&pool, &stripe).await;
    feed.push(event("evt_on_time", "pi_OnTime", "succeeded", 300));
    events_once(&pool, &stripe, &settings(200)).await.1.unwrap();
    let (first, _) = position(&pool).await;

    // A refund created 30 s before that position, listed only now.
    let refunded = arrange::payment("pi_LateRefund")
        .refunded(1099)
        .insert(&pool, &stripe)
        .await
        .id;
    feed.push(behind(refund_event("evt_late", "pi_LateRefund"), first, 30));
    let (second, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert_eq!(second.events_listed_late, 1, "{second:?}");
    let (_, lateness) = position(&pool).await;
    assert!((30.0..32.0).contains(&lateness), "{lateness}");

    // The next run's overlap (60 s + twice 30 s) reads it again: handled
    // before, it is not handled twice (a refund event is always re-read).
    let (third, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert!(third.overlap_seconds >= 120.0, "{third:?}");
    assert_eq!(
        (
            third.events_seen_before,
            third.events_listed_late,
            third.payment_intents
        ),
        (1, 0, 0),
        "{third:?}"
    );
    assert_eq!(retrieves(&stripe, "pi_LateRefund").await, 1);
    assert_eq!(retrieves(&stripe, "pi_OnTime").await, 1);
    let kinds: Vec<(Option<i64>, String)> = all_findings(&pool)
        .await
        .into_iter()
        .map(|f| (f.payment_id, f.kind))
        .collect();
    assert_eq!(kinds, [(Some(refunded), "refunded".to_owned())]);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_event_listed_later_than_the_old_sixty_seconds_is_not_lost(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    for pi in ["pi_Late45", "pi_Late120"] {
        insert_payment(&pool, pi, "pending", 3600).await;
        stripe.add_object(None, payment_intent(pi, "succeeded"));
    }
    events_once(&pool, &stripe, &settings(200)).await.1.unwrap();
    let (first, _) = position(&pool).await;
    // The feed first shows an event 45 s late: within the minute, read,
    // and the overlap widens to 60 + 2 × 45 s.
    feed.push(behind(
        event("evt_45", "pi_Late45", "succeeded", 0),
        first,
        45,
    ));
    let (second, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert_eq!(second.events_listed_late, 1, "{second:?}");
    let (after_second, _) = position(&pool).await;

    // Then one 120 s late: a fixed 60 s overlap would never read it.
    feed.push(behind(
        event("evt_120", "pi_Late120", "succeeded", 0),
        after_second,
        120,
    ));
    let (third, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert!(third.overlap_seconds >= 150.0, "{third:?}");
    assert_eq!(third.events_listed_late, 1, "{third:?}");
    let kinds: Vec<String> = all_findings(&pool)
        .await
        .into_iter()
        .map(|f| {
            format!(
                "{}:{}",
                f.stripe_payment_intent_id.unwrap_or_default(),
                f.kind
            )
        })
        .collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert!(
        kinds.iter().all(|k| k.ends_with(":missed_success")),
        "{kinds:?}"
    );
    let (_, lateness) = position(&pool).await;
    assert!((120.0..122.0).contains(&lateness), "{lateness}");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_first_event_listed_later_than_the_overlap_is_read_by_the_hourly_sweep(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    insert_payment(&pool, "pi_Late300", "pending", 3600).await;
    stripe.add_object(None, payment_intent("pi_Late300", "succeeded"));
    events_once(&pool, &stripe, &settings(200)).await.1.unwrap();
    let (first, _) = position(&pool).await;
    // No lateness observed yet (a 60 s overlap), and an event 300 s late.
    feed.push(behind(
        event("evt_300", "pi_Late300", "succeeded", 0),
        first,
        300,
    ));
    let (second, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert_eq!(second.overlap_seconds, 60.0, "{second:?}");
    assert_eq!(
        (second.sweeps, second.events_listed_late),
        (1, 1),
        "{second:?}"
    );
    assert!(!second.deadline_reached && !second.truncated, "{second:?}");
    let kinds: Vec<String> = all_findings(&pool)
        .await
        .into_iter()
        .map(|f| f.kind)
        .collect();
    assert_eq!(kinds, ["missed_success"]);
    // Swept: the next sweep is due an hour later; the wider overlap now
    // reads such an event again, handled once.
    let (third, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert_eq!(third.sweeps, 0, "{third:?}");
    assert!(third.overlap_seconds >= 660.0, "{third:?}");
    assert_eq!(
        (third.events_seen_before, third.payment_intents),
        (1, 0),
        "{third:?}"
    );
    assert_eq!(retrieves(&stripe, "pi_Late300").await, 1);
}
