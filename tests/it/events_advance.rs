//! The events feed's position only moves forward, and a list that does not
//! advance (a proxy that ignores `starting_after`, `has_more` with no new
//! ids, pages of new ids for ever) is bounded by the page cap and the run
//! deadline from the run's first page.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::events::{covered_until, events_once};
use crate::support::arrange;
use crate::support::stripe_fake::{event, StripeFake};
use crate::support::*;
use chrono::Utc;
use serde_json::{json, Value};
use sqlx::PgPool;
use stripe_reconciler::events::EventsError;
use stripe_reconciler::store::events_position::{self, Advance};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const JOB: &str = "payments-vs-stripe-events";

/// Sets the platform feed's stored position.
pub(super) async fn set_position(pool: &PgPool, at: chrono::DateTime<Utc>) {
    sqlx::query(
        "INSERT INTO reconciliation_events_position (job, covered_until) VALUES ($1, $2)
         ON CONFLICT (job) DO UPDATE SET covered_until = excluded.covered_until",
    )
    .bind(JOB)
    .bind(at)
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_slice_ending_before_the_stored_position_leaves_it_unchanged(pool: PgPool) {
    // A position written by a pod whose clock runs 30 s ahead: this run's
    // window ends at its own now, before the stored position.
    let ahead = Utc::now() + chrono::Duration::seconds(30);
    set_position(&pool, ahead).await;
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    let row = arrange::payment("pi_InWindow")
        .local("pending")
        .insert(&pool, &stripe)
        .await
        .id;
    feed.push(event("evt_1", "pi_InWindow", "succeeded", 10));

    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();

    assert_eq!(summary.slices, 1, "the slice was read and committed");
    assert_eq!(summary.findings_created, 1, "row {row}");
    let stored = covered_until(&pool).await.unwrap();
    assert_eq!(
        stored.timestamp_micros(),
        ahead.timestamp_micros(),
        "never moved backwards"
    );
    assert_eq!(
        summary.covered_until.map(|t| t.timestamp_micros()),
        Some(ahead.timestamp_micros()),
        "the summary shows the stored position"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_store_keeps_the_greater_position_for_the_platform_and_an_account(pool: PgPool) {
    let later = Utc::now();
    let earlier = later - chrono::Duration::seconds(35);
    let mut conn = pool.acquire().await.unwrap();
    assert!(events_position::acquire_lease(&mut conn, JOB, "me", 600.0)
        .await
        .unwrap());
    for (account, job) in [
        (None, JOB.to_owned()),
        (Some("acct_1Ahead"), format!("{JOB}:acct_1Ahead")),
    ] {
        for at in [later, earlier] {
            let to = Advance {
                covered_until: Some(at),
                newest_event: None,
                listing: None,
            };
            let moved = match account {
                None => events_position::advance(&mut conn, JOB, "me", 600.0, &to).await,
                Some(a) => {
                    events_position::advance_account(&mut conn, JOB, "me", 600.0, a, &to).await
                }
            };
            assert!(moved.unwrap());
        }
        let stored: chrono::DateTime<Utc> = sqlx::query_scalar(
            "SELECT covered_until FROM reconciliation_events_position WHERE job = $1",
        )
        .bind(&job)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        assert_eq!(stored.timestamp_micros(), later.timestamp_micros(), "{job}");
    }
}

/// `/v1/events` answering the same page every time, `has_more` true.
pub(super) struct SamePage;

impl Respond for SamePage {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let data: Vec<Value> = (0..3)
            .map(|i| {
                event(
                    &format!("evt_same{i}"),
                    &format!("pi_Same{i}"),
                    "processing",
                    30 + i,
                )
            })
            .collect();
        ResponseTemplate::new(200).set_body_json(
            json!({"object": "list", "url": "/v1/events", "has_more": true, "data": data}),
        )
    }
}

/// `/v1/events` answering `has_more` with no event at all.
struct EmptyMore;

impl Respond for EmptyMore {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        ResponseTemplate::new(200).set_body_json(
            json!({"object": "list", "url": "/v1/events", "has_more": true, "data": []}),
        )
    }
}

/// `/v1/events` answering pages of new ids for ever, each after `delay`,
/// all created in the last second of the asked range (so the run cuts its
/// slices down to that one second at once, and reads it whole).
pub(super) struct Endless {
    next: Arc<AtomicU64>,
    delay: Duration,
    /// `(n, hook)`: `hook` runs when the `n`-th page (from 1) is asked,
    /// before it is answered.
    on_page: Option<(u64, Box<dyn Fn() + Send + Sync>)>,
    asked: AtomicU64,
}

impl Endless {
    /// Pages after `delay` each.
    pub(super) fn slow(delay: Duration) -> Self {
        Endless {
            next: Arc::default(),
            delay,
            on_page: None,
            asked: AtomicU64::new(0),
        }
    }

    /// Runs `hook` when the `n`-th page is asked (a signal sent while that
    /// page is in flight).
    pub(super) fn on_page(mut self, n: u64, hook: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_page = Some((n, Box::new(hook)));
        self
    }
}

impl Respond for Endless {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let asked = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some((_, hook)) = self.on_page.as_ref().filter(|(n, _)| *n == asked) {
            hook();
        }
        let lt: i64 = req
            .url
            .query_pairs()
            .find(|(k, _)| k == "created[lt]")
            .map(|(_, v)| v.parse().unwrap())
            .unwrap();
        let secs_ago = Utc::now().timestamp() - (lt - 1);
        let data: Vec<Value> = (0..100)
            .map(|_| {
                let n = self.next.fetch_add(1, Ordering::Relaxed);
                event(
                    &format!("evt_n{n}"),
                    &format!("pi_N{n}"),
                    "processing",
                    secs_ago,
                )
            })
            .collect();
        ResponseTemplate::new(200)
            .set_delay(self.delay)
            .set_body_json(
                json!({"object": "list", "url": "/v1/events", "has_more": true, "data": data}),
            )
    }
}

pub(super) async fn events_answering(r: impl Respond + 'static) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/events"))
        .respond_with(r)
        .mount(&server)
        .await;
    server
}

/// The run, failed if it does not end within a minute (a list read without bound).
async fn bounded_run(
    pool: &PgPool,
    stripe: &MockServer,
    s: &Settings,
) -> (
    stripe_reconciler::events::EventsSummary,
    Result<(), EventsError>,
) {
    tokio::time::timeout(Duration::from_secs(60), events_once(pool, stripe, s))
        .await
        .expect("the run ends: the list is read within a bound")
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_same_page_again_is_an_error_for_the_feed_and_the_position_stays(pool: PgPool) {
    let stripe = events_answering(SamePage).await;
    let (summary, result) = bounded_run(&pool, &stripe, &settings(200)).await;
    let e = result.unwrap_err();
    assert!(matches!(e, EventsError::FeedNotAdvancing { .. }), "{e:?}");
    assert!(e.to_string().contains("does not advance"), "{e}");
    assert_eq!(e.exit_code(), 1);
    assert_eq!(
        (summary.pages, summary.feeds_not_advancing),
        (2, 1),
        "{summary:?}"
    );
    assert_eq!(summary.outcome, "stripe_down");
    assert_eq!(
        covered_until(&pool).await,
        None,
        "the position did not move"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn has_more_with_no_new_ids_is_an_error_for_the_feed(pool: PgPool) {
    let stripe = events_answering(EmptyMore).await;
    let (summary, result) = bounded_run(&pool, &stripe, &settings(200)).await;
    assert!(
        matches!(result, Err(EventsError::FeedNotAdvancing { .. })),
        "{result:?}"
    );
    assert_eq!(
        (summary.pages, summary.feeds_not_advancing),
        (1, 1),
        "{summary:?}"
    );
    assert_eq!(covered_until(&pool).await, None);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn pages_of_new_ids_for_ever_stop_at_the_page_cap_from_the_first_page(pool: PgPool) {
    let stripe = events_answering(Endless::slow(Duration::ZERO)).await;
    let mut s = settings(200);
    s.events.max_pages = 6;
    let (summary, result) = bounded_run(&pool, &stripe, &s).await;
    result.unwrap();
    assert!(summary.truncated, "{summary:?}");
    assert_eq!(summary.pages, 6, "{summary:?}");
    assert_eq!(stripe.received_requests().await.unwrap().len(), 6);
    assert_eq!(covered_until(&pool).await, None, "no slice was whole");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn pages_of_new_ids_for_ever_stop_at_the_run_deadline_from_the_first_page(pool: PgPool) {
    let stripe = events_answering(Endless::slow(Duration::from_millis(20))).await;
    let mut s = settings(200);
    s.events.max_pages = 10_000;
    s.run.run_deadline = Some(Duration::from_secs(2));
    let (summary, result) = bounded_run(&pool, &stripe, &s).await;
    result.unwrap();
    assert!(summary.deadline_reached, "{summary:?}");
    assert!(!summary.truncated, "{summary:?}");
    assert_eq!(summary.slices, 0, "no slice was whole: {summary:?}");
}
