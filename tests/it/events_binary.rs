//! `stripe-reconciler events` through the real binary: its exit codes (78
//! for a bad setting or a key Stripe rejects, 75 while another run holds
//! the lease), SIGTERM, `RECONCILER_RUN_DEADLINE_SECONDS`, and its push to a
//! real Pushgateway. Stripe's `/v1/events` and PaymentIntents are faked by
//! wiremock.

use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use stripe_reconciler::store::events_position;
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::support::events_feed::*;
use crate::support::pushgateway::{self, value};
use crate::support::*;

const EVENTS_JOB: &str = "payments-vs-stripe-events";

fn env(pool: &PgPool, stripe: &str, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}

fn all_output(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The JSON summary the run prints on stdout (`RECONCILER_LOG_FORMAT=json`).
fn summary(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", all_output(o)))
}

/// `/v1/events` answering from `feed` after `delay` per page.
struct SlowFeed(Feed, Duration);

impl Respond for SlowFeed {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        self.0.respond(req).set_delay(self.1)
    }
}

/// A fake Stripe: `/v1/events` from `feed`, each page after `page_delay`;
/// every PaymentIntent `succeeded`.
async fn stripe(feed: &Feed, page_delay: Duration) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/events"))
        .respond_with(SlowFeed(feed.clone(), page_delay))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex("^/v1/payment_intents/pi_[A-Za-z0-9]+$"))
        .respond_with(|r: &Request| ok(r.url.path().rsplit('/').next().unwrap(), "succeeded"))
        .mount(&server)
        .await;
    server
}

/// `n` pending rows `pi_{i}`, one `payment_intent.succeeded` event each,
/// `apart` seconds apart, the newest 400 s old (past the grace window): `n`
/// missed webhooks.
async fn missed_webhooks(pool: &PgPool, feed: &Feed, n: i64, apart: i64) {
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         SELECT 'order-' || i, 'pi_' || i, 'pending', now() - interval '30 days', now() - interval '1 hour'
           FROM generate_series(1, $1) AS i",
    )
    .bind(n)
    .execute(pool)
    .await
    .unwrap();
    for i in 1..=n {
        feed.push(event(
            &format!("evt_{i}"),
            &format!("pi_{i}"),
            "succeeded",
            400 + apart * (n - i),
        ));
    }
}

async fn findings_count(pool: &PgPool) -> i64 {
    count(pool, "SELECT count(*) FROM reconciliation_findings").await
}

/// The events position's `covered_until` is set (some slice committed).
async fn position_moved(pool: &PgPool) -> bool {
    let mut conn = pool.acquire().await.unwrap();
    events_position::read(&mut conn, EVENTS_JOB)
        .await
        .unwrap()
        .and_then(|p| p.covered_until)
        .is_some()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_events_job_pushes_its_figures_to_a_real_pushgateway(pool: PgPool) {
    let feed = Feed::default();
    missed_webhooks(&pool, &feed, 3, 4).await;
    let stripe = stripe(&feed, Duration::ZERO).await;
    let gw = pushgateway::start().await;

    let out = reconciler_output(
        &["events"],
        &env(&pool, &stripe.uri(), &[("PUSHGATEWAY_URL", &gw.url)]),
    )
    .await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(findings_count(&pool).await, 3);
    let m = gw.scrape().await;
    let job = [("job", EVENTS_JOB)];
    assert_eq!(
        value(&m, "stripe_reconciler_events_read", &job),
        Some(3.0),
        "{m}"
    );
    assert_eq!(
        value(&m, "stripe_reconciler_events_findings_created", &job),
        Some(3.0),
        "{m}"
    );
    assert_eq!(
        value(
            &m,
            "stripe_reconciler_run_outcome",
            &[("job", EVENTS_JOB), ("outcome", "completed")]
        ),
        Some(1.0),
        "{m}"
    );
    assert!(
        value(
            &m,
            "stripe_reconciler_events_last_success_timestamp_seconds",
            &job
        )
        .is_some_and(|t| t > 0.0),
        "{m}"
    );
    assert!(
        value(
            &m,
            "stripe_reconciler_rows_scanned",
            &[("job", "payments-vs-stripe")]
        )
        .is_none(),
        "never pushed to the scan's group: {m}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn sigterm_stops_the_events_job_without_a_write_and_pushes_interrupted(pool: PgPool) {
    let feed = Feed::default();
    missed_webhooks(&pool, &feed, 3, 4).await;
    // Each page takes 3 s: the run is inside its first read when stopped.
    let stripe = stripe(&feed, Duration::from_secs(3)).await;
    let gw = pushgateway::start().await;
    let mut child = reconciler(
        &["events"],
        &env(&pool, &stripe.uri(), &[("PUSHGATEWAY_URL", &gw.url)]),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();

    wait::requests_seen(&stripe, 1).await;
    assert!(child.try_wait().unwrap().is_none(), "still reading");
    let started = std::time::Instant::now();
    wait::signal(&child, "-TERM");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();

    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    // The page in flight is finished (a slice is small), no new one is asked.
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(requests(&stripe).await, 1, "no read after the signal");
    assert_eq!(
        summary(&out)["outcome"],
        "interrupted",
        "{}",
        all_output(&out)
    );
    assert_eq!(findings_count(&pool).await, 0);
    assert!(!position_moved(&pool).await, "the position did not move");
    let m = gw.scrape().await;
    assert_eq!(
        value(
            &m,
            "stripe_reconciler_run_outcome",
            &[("job", EVENTS_JOB), ("outcome", "interrupted")]
        ),
        Some(1.0),
        "{m}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_events_job_past_its_deadline_starts_no_new_slice_and_keeps_what_it_did(pool: PgPool) {
    // 600 events spread over a new install's one-day window (one every 130
    // s): six
    // slices or more (a slice aims at one page of 100), each page 500 ms, and
    // a run deadline of two seconds. The first slice, the whole window, is
    // cut after its two pages (1 s); the slices started before the deadline
    // finish (at most about three).
    let feed = Feed::default();
    missed_webhooks(&pool, &feed, 600, 130).await;
    let stripe = stripe(&feed, Duration::from_millis(500)).await;

    let out = reconciler_output(
        &["events"],
        &env(
            &pool,
            &stripe.uri(),
            &[("RECONCILER_RUN_DEADLINE_SECONDS", "2")],
        ),
    )
    .await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let s = summary(&out);
    assert_eq!(s["deadline_reached"], true, "{s}");
    assert_eq!(s["outcome"], "completed", "{s}");
    let found = findings_count(&pool).await;
    assert!(
        (1..600).contains(&found),
        "some slices committed, not the whole backlog: {found}\n{}",
        all_output(&out)
    );
    assert_eq!(s["findings_created"], found, "{s}");
    assert!(position_moved(&pool).await, "the slices done are kept");

    // The next run continues from the position to the end.
    let out = reconciler_output(&["events"], &env(&pool, &stripe.uri(), &[])).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(findings_count(&pool).await, 600);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_bad_setting_stops_the_events_job_with_exit_78_before_any_read(pool: PgPool) {
    let feed = Feed::default();
    missed_webhooks(&pool, &feed, 3, 4).await;
    let stripe = stripe(&feed, Duration::ZERO).await;

    let out = reconciler_output(
        &["events"],
        &env(
            &pool,
            &stripe.uri(),
            &[("RECONCILER_RATE_LIMIT_RPS", "fast")],
        ),
    )
    .await;

    assert_eq!(out.status.code(), Some(78), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("RECONCILER_RATE_LIMIT_RPS"),
        "names the variable: {}",
        all_output(&out)
    );
    assert_eq!(requests(&stripe).await, 0);
    assert_eq!(findings_count(&pool).await, 0);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_key_stripe_rejects_stops_the_events_job_with_exit_78_and_writes_nothing(pool: PgPool) {
    let feed = Feed::default();
    missed_webhooks(&pool, &feed, 3, 4).await;
    let stripe = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(err(401, "invalid_request_error", "api_key_invalid"))
        .mount(&stripe)
        .await;

    let out = reconciler_output(&["events"], &env(&pool, &stripe.uri(), &[])).await;

    assert_eq!(out.status.code(), Some(78), "{}", all_output(&out));
    assert!(!all_output(&out).contains(API_KEY), "{}", all_output(&out));
    assert_eq!(findings_count(&pool).await, 0);
    assert!(!position_moved(&pool).await);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_events_run_while_another_holds_the_lease_exits_75_without_asking_stripe(pool: PgPool) {
    let feed = Feed::default();
    missed_webhooks(&pool, &feed, 3, 4).await;
    let stripe = stripe(&feed, Duration::ZERO).await;
    let mut conn = pool.acquire().await.unwrap();
    assert!(
        events_position::acquire_lease(&mut conn, EVENTS_JOB, "other-pod:1:abcd", 600.0)
            .await
            .unwrap()
    );
    drop(conn);

    let out = reconciler_output(&["events"], &env(&pool, &stripe.uri(), &[])).await;

    assert_eq!(out.status.code(), Some(75), "{}", all_output(&out));
    assert_eq!(summary(&out)["outcome"], "concurrent_run");
    assert_eq!(requests(&stripe).await, 0, "no Stripe read was spent");
    assert_eq!(findings_count(&pool).await, 0);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_events_list_that_repeats_its_page_exits_1_naming_the_feed_and_keeps_the_position(
    pool: PgPool,
) {
    let stripe = super::events_advance::events_answering(super::events_advance::SamePage).await;

    let out = reconciler_output(
        &["events"],
        &env(
            &pool,
            &stripe.uri(),
            &[("RECONCILER_EVENTS_MAX_PAGES", "50")],
        ),
    )
    .await;

    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("does not advance"),
        "{}",
        all_output(&out)
    );
    let s = summary(&out);
    assert_eq!(s["outcome"], "stripe_down", "{s}");
    assert_eq!(s["feeds_not_advancing"], 1, "{s}");
    assert_eq!(s["pages"], 2, "{s}");
    assert_eq!(requests(&stripe).await, 2);
    assert!(!position_moved(&pool).await, "the position did not move");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn sigterm_during_an_endless_events_list_ends_the_run_at_once_and_keeps_the_position(
    pool: PgPool,
) {
    use super::events_advance::{events_answering, set_position, Endless};
    // A position committed by an earlier run; a list of new ids for ever,
    // half a second a page, and a cap and deadline far away.
    let committed = chrono::Utc::now() - chrono::Duration::seconds(120);
    set_position(&pool, committed).await;
    let stripe = events_answering(Endless::slow(Duration::from_millis(500))).await;
    let child = reconciler(
        &["events"],
        &env(
            &pool,
            &stripe.uri(),
            &[("RECONCILER_EVENTS_MAX_PAGES", "10000")],
        ),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();

    wait::requests_seen(&stripe, 3).await;
    wait::signal(&child, "-TERM");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let asked = requests(&stripe).await;

    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert_eq!(
        summary(&out)["outcome"],
        "interrupted",
        "{}",
        all_output(&out)
    );
    assert!(asked <= 5, "no page asked after the signal: {asked}");
    let mut conn = pool.acquire().await.unwrap();
    let stored = events_position::read(&mut conn, EVENTS_JOB)
        .await
        .unwrap()
        .and_then(|p| p.covered_until)
        .unwrap();
    assert_eq!(
        stored.timestamp_micros(),
        committed.timestamp_micros(),
        "the committed position is kept, not moved past what was read"
    );
}
