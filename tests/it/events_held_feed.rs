//! The events feed passes the PaymentIntents it holds: an event about one
//! already waiting in `reconciliation_events_retry` is left to the held
//! share (which takes the newer event), never read by the feed, so a new
//! missed success behind 1,500 held PaymentIntents (their events in one
//! crowded second) is found in the same run; and the held share drains once
//! Stripe answers, `RETRIES_PER_RUN` a run.

use super::events::all_findings;
use super::events_held::{held, hold_many};
use crate::support::arrange;
use crate::support::stripe_fake::{event, StripeFake, RETRIEVE};
use crate::support::*;
use sqlx::PgPool;
use std::collections::HashSet;
use std::time::Duration;
use stripe_reconciler::events::held::RETRIES_PER_RUN;
use stripe_reconciler::events::EventsJob;
use wiremock::{MockServer, ResponseTemplate};

/// The crowd: 1,500 PaymentIntents held, each with a newer event
/// on the feed, all 40 s old (one second, or two when the pushes straddle
/// one: 15 pages of their own and a few of the cuts that find them).
const HELD: i64 = 1_500;

/// Every request for a held PaymentIntent since request `from`, in order
/// (one per attempt).
async fn held_requests(stripe: &MockServer, from: usize) -> Vec<String> {
    stripe.received_requests().await.unwrap()[from..]
        .iter()
        .map(|r| r.url.path().to_owned())
        .filter_map(|p| {
            p.strip_prefix("/v1/payment_intents/pi_Held")
                .map(str::to_owned)
        })
        .collect()
}

/// The held PaymentIntents Stripe was asked about since request `from`,
/// each once however many attempts.
async fn held_asked(stripe: &MockServer, from: usize) -> HashSet<String> {
    held_requests(stripe, from).await.into_iter().collect()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_missed_success_behind_held_payment_intents_is_found_and_the_held_share_drains(
    pool: PgPool,
) {
    // 1,500 PaymentIntents held by earlier runs (Stripe failed for them),
    // each with a newer event on the feed; Stripe still answers 500.
    hold_many(&pool, HELD).await;
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    for i in 1..=HELD {
        feed.push(event(
            &format!("evt_new{i}"),
            &format!("pi_Held{i}"),
            "succeeded",
            40,
        ));
    }
    for i in 1..=HELD {
        stripe.fail_object(RETRIEVE, &format!("pi_Held{i}"), ResponseTemplate::new(500));
    }
    // Stripe (the fake) answers a probe: the failures are these
    // PaymentIntents' own.
    // After them on the feed, a missed success.
    let missed = arrange::payment("pi_MissedLater")
        .local("pending")
        .insert(&pool, &stripe)
        .await
        .id;
    feed.push(event("evt_missed", "pi_MissedLater", "succeeded", 20));

    // 10 reads a second: the feed reading the held ones again (3 attempts
    // each) would spend 7.5 minutes on them; the run's deadline is 30 s,
    // its held share a third of it, and the feed's pages (15 of the crowd,
    // a few of the cuts that find it) and one read, about 3 s at 10 a
    // second, fit in the 20 s left on any machine.
    let mut s = settings(200);
    s.stripe.rate_limit_rps = 10;
    s.run.run_deadline = Some(Duration::from_secs(30));
    let gw = gateway_with(&stripe, 10, Duration::from_secs(2));
    let (first, result) = run_job(&pool, &gw, &s, EventsJob).await;
    result.unwrap();

    let kinds: Vec<(Option<i64>, String)> = all_findings(&pool)
        .await
        .into_iter()
        .map(|f| (f.payment_id, f.kind))
        .collect();
    assert_eq!(
        kinds,
        [(Some(missed), "missed_success".to_owned())],
        "{first:?}"
    );
    // The feed asked Stripe about no held PaymentIntent: only the held
    // share did, each read counted as an attempt.
    let asked = held_asked(&stripe, 0).await;
    assert_eq!(asked.len() as u64, first.retries_read, "{first:?}");
    assert!(first.retries_read >= 1, "{first:?}");
    assert_eq!(first.events_left_to_held, HELD as u64 - first.retries_read);
    let waiting = held(&pool).await;
    assert_eq!(waiting.len(), HELD as usize);
    let tried = waiting.iter().filter(|(_, _, a)| *a == 2).count() as u64;
    assert_eq!(tried, first.retries_read, "{waiting:?}");
    // Those left to the held share wait with the feed's newer event.
    let renewed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM reconciliation_events_retry WHERE event_id LIKE 'evt_new%'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(renewed as u64, HELD as u64 - first.retries_read);

    // Stripe answers again: each later run's held share (no deadline: its
    // steps are a slice's worth) reads at most RETRIES_PER_RUN of them, so
    // the 1,500 drain in exactly three runs, each asked about once.
    for i in 1..=HELD {
        let pi = format!("pi_Held{i}");
        stripe
            .heal(&pi)
            .add_object(None, payment_intent(&pi, "succeeded"));
    }
    let s = settings(200);
    let before = stripe.received_requests().await.unwrap().len();
    let mut reads = Vec::new();
    while !held(&pool).await.is_empty() && reads.len() < 5 {
        let (next, result) = run_job(&pool, &gateway(&stripe), &s, EventsJob).await;
        result.unwrap();
        reads.push(next.retries_read);
    }
    assert_eq!(reads, [500, 500, 500], "{RETRIES_PER_RUN} a run");
    let drained = held_requests(&stripe, before).await.len();
    assert_eq!(drained, HELD as usize, "each asked about once");
    assert_eq!(held_asked(&stripe, before).await.len(), HELD as usize);
    let found = all_findings(&pool)
        .await
        .iter()
        .filter(|f| f.kind == "missed_success")
        .count();
    assert_eq!(
        found,
        HELD as usize + 1,
        "each held PaymentIntent once, the missed one once"
    );
}
