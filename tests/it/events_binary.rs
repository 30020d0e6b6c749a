//! `stripe-reconciler events` through the real binary: its exit codes (78
//! for a bad setting or a key Stripe rejects, 75 while another run holds
//! the lease), SIGTERM, `RECONCILER_RUN_DEADLINE_SECONDS`, and its push to a
//! real Pushgateway. Stripe's `/v1/events` and PaymentIntents are faked by
//! the one fake (`support::stripe_fake`); the lists that do not advance are
//! bare wiremock (a broken proxy, not Stripe).

use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::pushgateway::{self, value};
use crate::support::stripe_fake::{event, StripeFake, EVENTS};
use crate::support::*;
use serde_json::Value;
use sqlx::PgPool;
use stripe_reconciler::store::events_position;

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

/// `n` pending rows `pi_{i}`, one `payment_intent.succeeded` event each,
/// `apart` seconds apart, the newest 400 s old (past the grace window): `n`
/// missed webhooks.
async fn missed_webhooks(pool: &PgPool, stripe: &StripeFake, n: i64, apart: i64) {
    missed_webhooks_aged(pool, stripe, (1..=n).map(|i| 400 + apart * (n - i))).await;
}

/// A pending row `pi_{i}` for each of `ages` (`i` from 1), its PaymentIntent
/// succeeded at Stripe and one `payment_intent.succeeded` event about it,
/// that many seconds old: missed webhooks. Returns each event's `created`
/// (Unix seconds), in the order of `ages`.
async fn missed_webhooks_aged(
    pool: &PgPool,
    stripe: &StripeFake,
    ages: impl Iterator<Item = i64>,
) -> Vec<i64> {
    let feed = stripe.feed();
    let mut created = Vec::new();
    let month_ago = chrono::Utc::now().timestamp() - 30 * 86_400;
    for (i, secs_ago) in (1_i64..).zip(ages) {
        let pi = format!("pi_{i}");
        sqlx::query(
            "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
             VALUES ($1, $2, 'pending', now() - interval '30 days', now() - interval '1 hour')",
        )
        .bind(format!("order-{i}"))
        .bind(&pi)
        .execute(pool)
        .await
        .unwrap();
        stripe.add(None, &pi, "succeeded", month_ago);
        let e = event(&format!("evt_{i}"), &pi, "succeeded", secs_ago);
        created.push(e["created"].as_i64().unwrap());
        feed.push(e);
    }
    created
}

async fn findings_count(pool: &PgPool) -> i64 {
    count(pool, "SELECT count(*) FROM reconciliation_findings").await
}

/// The events position's stored `covered_until` (`None`: no slice committed
/// yet).
async fn stored_position(pool: &PgPool) -> Option<chrono::DateTime<chrono::Utc>> {
    let mut conn = pool.acquire().await.unwrap();
    events_position::read(&mut conn, EVENTS_JOB)
        .await
        .unwrap()
        .and_then(|p| p.covered_until)
}

/// The events position's `covered_until` is set (some slice committed).
async fn position_moved(pool: &PgPool) -> bool {
    stored_position(pool).await.is_some()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_events_job_pushes_its_figures_to_a_real_pushgateway(pool: PgPool) {
    let stripe = StripeFake::start().await;
    missed_webhooks(&pool, &stripe, 3, 4).await;
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
    let stripe = StripeFake::start().await;
    missed_webhooks(&pool, &stripe, 3, 4).await;
    // The fake holds the first page unanswered; the signal is sent while it
    // is held, and the page is answered only once the binary has logged
    // that it got the signal: the run is inside its first read when
    // stopped, however slowly the machine runs the test.
    let mut first_page = stripe.hold_request(EVENTS, 1);
    let gw = pushgateway::start().await;
    let log = std::env::temp_dir().join(format!("{}-events-sigterm.log", database_name(&pool)));
    let child = reconciler(
        &["events"],
        &env(&pool, &stripe.uri(), &[("PUSHGATEWAY_URL", &gw.url)]),
    )
    .stdout(Stdio::piped())
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .unwrap();
    first_page.arrived().await;
    wait::signal(&child, "-TERM");
    wait::until_logged(&log, "shutdown signal received").await;
    first_page.release();

    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let said = std::fs::read_to_string(&log).unwrap();
    std::fs::remove_file(&log).unwrap();

    assert_eq!(out.status.code(), Some(1), "{}{said}", all_output(&out));
    // The page in flight is finished (a slice is small), no new one is asked.
    assert_eq!(requests(&stripe).await, 1, "no read after the signal");
    assert_eq!(stripe.count(EVENTS), 1);
    assert_eq!(
        summary(&out)["outcome"],
        "interrupted",
        "{}{said}",
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
    // A new install reads the hour back (RECONCILER_EVENTS_LOOKBACK_SECONDS).
    // In it: 5 missed webhooks early in the hour (3450 to 3446 s old), and
    // a burst of 250 more a second apart, 649 to 400 s old.
    //
    // - Pages 1 and 2: the first slice, the whole hour, holds more than two
    //   pages (200 events of the burst, over its newest 600 s): crowded,
    //   cut to about 300 s (a page's worth at that density); nothing
    //   committed.
    // - Page 3: the slice [hour start, +300 s), the 5 early events, whole in
    //   one page. The fake answers it 12 s after it arrived, and the run's
    //   deadline is 10 s from its start (before that arrival): the deadline
    //   has passed when the page comes back, whatever the machine's speed.
    //   The slice is committed; no new slice (and no page) is started.
    //
    // The only time the test depends on is the 10 s the binary has to start
    // and ask its first three pages (local, unhurried), as a wait's timeout
    // turns a hang into a failure: a slower start fails the test (fewer
    // pages, nothing committed), it cannot pass it.
    let stripe = StripeFake::start().await;
    let early = 3450..3455;
    let burst = 400..650;
    let created = missed_webhooks_aged(&pool, &stripe, early.rev().chain(burst.rev())).await;
    let (early, burst) = created.split_at(5);
    stripe.answer_slowly(EVENTS, 3, Duration::from_secs(12));

    let out = reconciler_output(
        &["events"],
        &env(
            &pool,
            &stripe.uri(),
            &[
                ("RECONCILER_EVENTS_LOOKBACK_SECONDS", "3600"),
                ("RECONCILER_RUN_DEADLINE_SECONDS", "10"),
                ("RECONCILER_HTTP_TIMEOUT_SECONDS", "60"),
            ],
        ),
    )
    .await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let s = summary(&out);
    assert_eq!(s["deadline_reached"], true, "{s}");
    assert_eq!(s["outcome"], "completed", "{s}");
    assert_eq!(s["pages"], 3, "no page after the deadline: {s}");
    assert_eq!(stripe.count(EVENTS), 3, "{:#?}", stripe.seen());
    assert_eq!(
        s["slices"], 1,
        "one slice committed, none started after: {s}"
    );
    assert_eq!(s["findings_created"], 5, "{s}");
    let found: Vec<String> = sqlx::query_scalar(
        "SELECT p.stripe_payment_intent_id FROM reconciliation_findings f
           JOIN payments p ON p.id = f.payment_id ORDER BY p.id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        found,
        ["pi_1", "pi_2", "pi_3", "pi_4", "pi_5"],
        "exactly the committed slice's missed webhooks"
    );
    let kept = stored_position(&pool)
        .await
        .expect("the slice done is kept");
    let kept = kept.timestamp();
    assert!(
        early.iter().all(|&c| c < kept) && burst.iter().all(|&c| kept <= c),
        "the position is the committed slice's end, after the early events and before the burst: {kept} {early:?} {burst:?}"
    );

    // The next run continues from the position to the end.
    let out = reconciler_output(&["events"], &env(&pool, &stripe.uri(), &[])).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(summary(&out)["deadline_reached"], false);
    assert_eq!(findings_count(&pool).await, 255);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_bad_setting_stops_the_events_job_with_exit_78_before_any_read(pool: PgPool) {
    let stripe = StripeFake::start().await;
    missed_webhooks(&pool, &stripe, 3, 4).await;

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
    let stripe = StripeFake::start().await;
    missed_webhooks(&pool, &stripe, 3, 4).await;
    // A revoked key: Stripe's 401 on every endpoint.
    stripe.answer_every_request(&err(401, "invalid_request_error", "api_key_invalid"));

    let out = reconciler_output(&["events"], &env(&pool, &stripe.uri(), &[])).await;

    assert_eq!(out.status.code(), Some(78), "{}", all_output(&out));
    assert!(!all_output(&out).contains(API_KEY), "{}", all_output(&out));
    assert_eq!(findings_count(&pool).await, 0);
    assert!(!position_moved(&pool).await);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_events_run_while_another_holds_the_lease_exits_75_without_asking_stripe(pool: PgPool) {
    let stripe = StripeFake::start().await;
    missed_webhooks(&pool, &stripe, 3, 4).await;
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
    // two seconds a page, and a cap and deadline far away. The signal is
    // sent when the third page is asked, while it is in flight.
    let committed = chrono::Utc::now() - chrono::Duration::seconds(120);
    set_position(&pool, committed).await;
    let pid = Arc::new(AtomicU32::new(0));
    let to_stop = pid.clone();
    let stripe = events_answering(
        Endless::slow(Duration::from_secs(2))
            .on_page(3, move || wait::signal_pid(&to_stop, "-TERM")),
    )
    .await;
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
    pid.store(child.id(), Ordering::SeqCst);

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
    assert_eq!(
        asked, 3,
        "the page in flight is finished, no page asked after the signal"
    );
    let stored = stored_position(&pool).await.unwrap();
    assert_eq!(
        stored.timestamp_micros(),
        committed.timestamp_micros(),
        "the committed position is kept, not moved past what was read"
    );
}
