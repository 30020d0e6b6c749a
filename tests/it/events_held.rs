//! The events job's held PaymentIntents (`reconciliation_events_retry`):
//! one Stripe keeps failing for waits alone while the position moves on, and
//! one held past grace plus an hour is left to the scan.

use super::events::{all_findings, covered_until, events_once, retrieves};
use crate::support::arrange;
use crate::support::stripe_fake::{event, StripeFake, RETRIEVE};
use crate::support::*;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use wiremock::matchers::method;
use wiremock::{Mock, ResponseTemplate};

/// `(PaymentIntent, reason, attempts)` waiting for another events read.
pub(super) async fn held(pool: &PgPool) -> Vec<(String, String, i32)> {
    sqlx::query_as(
        "SELECT stripe_payment_intent_id, reason, attempts
           FROM reconciliation_events_retry ORDER BY stripe_payment_intent_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_payment_intent_stripe_keeps_failing_for_waits_alone_while_the_position_moves_on(
    pool: PgPool,
) {
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    let mut payments = Vec::new();
    for i in 0..30 {
        let pi = format!("pi_Burst{i:02}");
        payments.push(insert_payment(&pool, &pi, "pending", 3600).await);
        feed.push(event(&format!("evt_{i}"), &pi, "succeeded", 300 - i));
        if i != 7 {
            stripe.add_object(None, payment_intent(&pi, "succeeded"));
        }
    }
    // Stripe answers 500 for one of them, every time, for now.
    stripe.fail_object(RETRIEVE, "pi_Burst07", ResponseTemplate::new(500));

    let (first, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert_eq!(first.findings_created, 29, "every answered PaymentIntent");
    assert_eq!(
        held(&pool).await,
        [("pi_Burst07".to_owned(), "stripe_unanswered".to_owned(), 1)]
    );
    let newest = DateTime::from_timestamp(Utc::now().timestamp() - 271, 0).unwrap();
    assert!(
        covered_until(&pool).await.unwrap() >= newest,
        "the position passed the whole burst, the failing one's event included"
    );
    // `status` says what waits, and the lag is the position's, not the held event's.
    let s = settings(200);
    let mut conn = pool.acquire().await.unwrap();
    let st = stripe_reconciler::status::read(
        &mut conn,
        &s.run.job,
        Some(&stripe_reconciler::events::events_job(&s.run.job)),
        &s.outbox,
        None,
    )
    .await
    .unwrap();
    drop(conn);
    let ev = st.events.expect("the events job ran");
    assert_eq!(ev.payment_intents_held, 1);
    assert!(ev.lag_seconds.unwrap() < 60.0, "{:?}", ev.lag_seconds);
    assert!(ev.oldest_held_event_unix.is_some());

    // The next run reads only the held one again (still failing), not the burst.
    let before = stripe.received_requests().await.unwrap().len();
    let (second, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    let retrieves_now: Vec<String> = stripe.received_requests().await.unwrap()[before..]
        .iter()
        .filter(|r| r.url.path().starts_with("/v1/payment_intents/"))
        .map(|r| r.url.path().to_owned())
        .collect();
    assert!(
        retrieves_now
            .iter()
            .all(|p| p == "/v1/payment_intents/pi_Burst07"),
        "{retrieves_now:?}"
    );
    assert_eq!((second.retries_read, second.findings_created), (1, 0));
    assert_eq!(held(&pool).await[0].2, 2, "a second attempt");

    // Stripe answers again: the missed success is recorded, once, and settled.
    stripe
        .heal("pi_Burst07")
        .add_object(None, payment_intent("pi_Burst07", "succeeded"));
    let (third, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert_eq!(third.findings_created, 1);
    assert!(held(&pool).await.is_empty());
    let kinds: Vec<(Option<i64>, String)> = all_findings(&pool)
        .await
        .into_iter()
        .map(|f| (f.payment_id, f.kind))
        .collect();
    assert_eq!(kinds.len(), 30, "one finding per payment, none twice");
    assert!(kinds.contains(&(Some(payments[7]), "missed_success".into())));
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_held_payment_intent_older_than_grace_plus_an_hour_is_left_to_the_scan(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    insert_payment(&pool, "pi_Fresh", "pending", 20).await;
    feed.push(event("evt_1", "pi_Fresh", "succeeded", 10));
    events_once(&pool, &stripe, &settings(200)).await.1.unwrap();
    assert_eq!(held(&pool).await.len(), 1);

    // Its event is now older than grace (600 s) + 1 h, and out of the window.
    feed.clear();
    sqlx::query(
        "UPDATE reconciliation_events_retry SET event_created = now() - interval '2 hours'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert_eq!((summary.retries_expired, summary.retries_read), (1, 0));
    assert!(held(&pool).await.is_empty());
    assert_eq!(retrieves(&stripe, "pi_Fresh").await, 0);
}

/// Holds `n` PaymentIntents `pi_Held{i}` (rows pending, their events 0.1 s
/// apart from 300 s ago: all in the past for up to 3,000) as earlier runs
/// would have after Stripe failed for them.
pub(super) async fn hold_many(pool: &PgPool, n: i64) {
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         SELECT 'order-held-' || i, 'pi_Held' || i, 'pending', now() - interval '30 days',
                now() - interval '1 hour'
           FROM generate_series(1, $1) AS i",
    )
    .bind(n)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO reconciliation_events_retry
                (job, stripe_payment_intent_id, event_id, event_type, event_created,
                 event_status, reason, last_held_at)
         SELECT 'payments-vs-stripe-events', 'pi_Held' || i, 'evt_held' || i,
                'payment_intent.succeeded',
                now() - interval '300 seconds' + make_interval(secs => i / 10.0::float8),
                'succeeded', 'stripe_unanswered', now() - interval '60 seconds'
           FROM generate_series(1, $1) AS i",
    )
    .bind(n)
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn thousands_of_held_payment_intents_stripe_keeps_failing_leave_the_run_time_for_a_missed_success(
    pool: PgPool,
) {
    // 2,000 PaymentIntents held by earlier runs; Stripe answers 500 for
    // each, slowly (every read spends its retries).
    hold_many(&pool, 2_000).await;
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    Mock::given(method("GET"))
        .and(wiremock::matchers::path_regex(
            "^/v1/payment_intents/pi_Held[0-9]+$",
        ))
        .respond_with(ResponseTemplate::new(500).set_delay(std::time::Duration::from_millis(40)))
        .with_priority(1)
        .mount(&stripe)
        .await;
    // Stripe (the fake) answers a probe: the failures are these
    // PaymentIntents' own.
    // Later, a missed success on the feed.
    let missed = arrange::payment("pi_MissedLater")
        .local("pending")
        .insert(&pool, &stripe)
        .await
        .id;
    feed.push(event("evt_missed", "pi_MissedLater", "succeeded", 120));

    // A deadline of 30 s: the held share (a third, 10 s) cannot read the
    // 2,000 (each read spends its retries), and the feed's one page and
    // read after it fit in the 20 s left on any machine.
    let mut s = settings(200);
    s.run.run_deadline = Some(std::time::Duration::from_secs(30));
    let (summary, result) = events_once(&pool, &stripe, &s).await;
    result.unwrap();

    let kinds: Vec<(Option<i64>, String)> = all_findings(&pool)
        .await
        .into_iter()
        .map(|f| (f.payment_id, f.kind))
        .collect();
    assert!(
        kinds.contains(&(Some(missed), "missed_success".into())),
        "the missed success is found in this run: {kinds:?} {summary:?}"
    );
    assert!(summary.slices >= 1, "{summary:?}");
    assert!(summary.held_share_reached, "{summary:?}");
    // Nothing lost: every held PaymentIntent still waits; those read again
    // this run counted one more attempt, the others wait first next time.
    let waiting = held(&pool).await;
    assert_eq!(waiting.len(), 2_000);
    let tried = waiting.iter().filter(|(_, _, a)| *a == 2).count() as u64;
    assert_eq!(tried, summary.retries_read, "{summary:?}");
    assert!(tried < 2_000, "a bounded share: {tried}");
    assert!(
        waiting.iter().all(|(_, r, _)| r == "stripe_unanswered"),
        "{waiting:?}"
    );
}
