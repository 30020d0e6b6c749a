//! A backlog of events larger than one run may read (docs/events.md): worked off
//! in slices over several runs, each slice committed with its position, on a
//! real PostgreSQL with Stripe's `/v1/events` faked in Stripe's shape.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::arrange;
use crate::support::stripe_fake::{event, StripeFake, RETRIEVE};
use crate::support::*;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use stripe_reconciler::events::{EventsError, EventsJob, EventsSummary};
use stripe_reconciler::metrics::{EventsMetrics, EventsState};
use stripe_reconciler::scan::RunError;
use stripe_reconciler::store::events_position;
use tokio_util::sync::CancellationToken;
use wiremock::MockServer;

const JOB: &str = "payments-vs-stripe-events";

/// `n` pending rows `pi_{i}`, each PaymentIntent succeeded at Stripe, and
/// one `payment_intent.succeeded` event each, 4 s apart, the newest 400 s
/// old: missed webhooks, `n` findings to record.
async fn backlog(pool: &PgPool, stripe: &StripeFake, n: i64) {
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         SELECT 'order-' || i, 'pi_' || i, 'pending', now() - interval '30 days', now() - interval '1 hour'
           FROM generate_series(1, $1) AS i",
    )
    .bind(n)
    .execute(pool)
    .await
    .unwrap();
    let feed = stripe.feed();
    for i in 1..=n {
        let pi = format!("pi_{i}");
        stripe.add_object(None, payment_intent(&pi, "succeeded"));
        let secs_ago = 400 + 4 * (n - i);
        feed.push(event(&format!("evt_{i}"), &pi, "succeeded", secs_ago));
    }
}

/// Retrieves per PaymentIntent the fake received.
fn reads(stripe: &StripeFake) -> HashMap<String, usize> {
    let mut reads = HashMap::new();
    for pi in stripe.retrieved() {
        *reads.entry(pi).or_default() += 1;
    }
    reads
}

fn events_settings(max_pages: u32) -> Settings {
    let mut s = settings(200);
    s.events.max_pages = max_pages;
    // The window starts a little before the burst, as a position would.
    s.events.lookback = Duration::from_secs(2000);
    s
}

async fn covered_until(pool: &PgPool) -> Option<DateTime<Utc>> {
    let mut conn = pool.acquire().await.unwrap();
    events_position::read(&mut conn, JOB)
        .await
        .unwrap()
        .and_then(|p| p.covered_until)
}

/// `(findings, distinct payments with a finding, outbox commands)`.
async fn recorded(pool: &PgPool) -> (i64, i64, i64) {
    let findings = count(pool, "SELECT count(*) FROM reconciliation_findings").await;
    let payments = count(
        pool,
        "SELECT count(DISTINCT payment_id) FROM reconciliation_findings WHERE kind = 'missed_success'",
    )
    .await;
    (
        findings,
        payments,
        count(pool, "SELECT count(*) FROM outbox").await,
    )
}

/// Payments whose event was created before `t` without a finding, plus
/// payments with a finding whose event was created at or after `t`.
async fn out_of_step_with(pool: &PgPool, feed_created: &HashMap<String, i64>, t: i64) -> usize {
    let with: Vec<String> = sqlx::query_scalar(
        "SELECT p.stripe_payment_intent_id FROM reconciliation_findings f JOIN payments p ON p.id = f.payment_id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let missing = feed_created
        .iter()
        .filter(|(pi, c)| **c < t && !with.contains(pi))
        .count();
    let early = with.iter().filter(|pi| feed_created[*pi] >= t).count();
    missing + early
}

async fn run(
    pool: &PgPool,
    server: &MockServer,
    s: &Settings,
    token: CancellationToken,
) -> (EventsSummary, Result<(), EventsError>) {
    run_job_until(pool, &gateway(server), s, EventsJob, token).await
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_backlog_interrupted_mid_run_drains_in_later_runs_with_every_finding_once(pool: PgPool) {
    let server = StripeFake::start().await;
    let token = CancellationToken::new();
    // A SIGTERM in the middle of a slice's reads: the 120th retrieve.
    let cancel = token.clone();
    server.on_request(RETRIEVE, 120, move || cancel.cancel());
    backlog(&pool, &server, 350).await;
    let created: HashMap<String, i64> = (1..=350)
        .map(|i| {
            (
                format!("pi_{i}"),
                Utc::now().timestamp() - 400 - 4 * (350 - i),
            )
        })
        .collect();

    // 1. SIGTERM during the reads of the run's second slice.
    let (first, result) = run(&pool, &server, &events_settings(10), token).await;
    assert!(
        matches!(result, Err(EventsError::Scan(RunError::Interrupted))),
        "{result:?}"
    );
    let position = covered_until(&pool).await.expect("the first slice is kept");
    assert_eq!(first.covered_until, Some(position));
    let (findings, _, _) = recorded(&pool).await;
    assert!(
        findings > 0 && findings < 120,
        "only the finished slice is committed: {findings}"
    );
    assert_eq!(
        out_of_step_with(&pool, &created, position.timestamp()).await,
        0,
        "every event before the position has its finding, none after it"
    );

    // 2. Later runs, four pages each, continue from the position.
    let mut positions = vec![position];
    let mut last_started = Utc::now();
    for _ in 0..10 {
        last_started = Utc::now();
        let (summary, result) = run(
            &pool,
            &server,
            &events_settings(4),
            CancellationToken::new(),
        )
        .await;
        result.unwrap();
        assert_eq!(summary.gap_seconds, None, "a backlog is not a gap");
        positions.push(covered_until(&pool).await.unwrap());
        if !summary.truncated {
            break;
        }
    }
    assert!(positions.len() > 2, "the backlog needed several runs");
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "the position only advances: {positions:?}"
    );
    assert!(
        *positions.last().unwrap() >= last_started,
        "the last run covered the feed up to its own start"
    );
    assert_eq!(recorded(&pool).await, (350, 350, 350), "each finding once");
    let reads = reads(&server);
    assert_eq!(reads.len(), 350);
    let twice = reads.values().filter(|n| **n > 1).count();
    assert!(
        twice <= 30,
        "only the abandoned slice's reads are repeated: {twice}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_page_cap_smaller_than_the_backlog_records_no_gap_and_the_next_run_continues(
    pool: PgPool,
) {
    let server = StripeFake::start().await;
    let feed = server.feed();
    backlog(&pool, &server, 250).await;
    let newest = Utc::now().timestamp() - 400;
    // Four pages a run, from the run's first page: two to find
    // the first slice crowded, then slices of about a page.
    let cap = 4;

    let (first, result) = run(
        &pool,
        &server,
        &events_settings(cap),
        CancellationToken::new(),
    )
    .await;
    result.unwrap();
    assert!(first.truncated, "the cap stopped the run");
    assert_eq!(first.gap_seconds, None);
    let position = covered_until(&pool).await.unwrap();
    assert!(
        position.timestamp() < newest,
        "{position} is behind the burst"
    );
    // The lag is how far behind now the position is, now being some
    // instant of the measure (bracketed, so no speed of the machine matters).
    let before = (Utc::now() - position).num_milliseconds() as f64 / 1000.0;
    let lag = lag_seconds(&pool, &server, &first).await;
    let after = (Utc::now() - position).num_milliseconds() as f64 / 1000.0;
    assert!(
        before - 1.0 <= lag && lag <= after + 1.0,
        "lag {lag} s, behind {before} to {after} s"
    );
    assert!(lag > 400.0, "the lag shows the backlog: {lag}");
    let asked_before = feed.pages_asked();

    let mut last_started = Utc::now();
    let (second, result) = run(
        &pool,
        &server,
        &events_settings(cap),
        CancellationToken::new(),
    )
    .await;
    result.unwrap();
    assert_eq!(
        feed.created_gte()[asked_before],
        position.timestamp() - 60,
        "the next run continues from the position, with a minute of overlap"
    );
    assert_eq!(second.gap_seconds, None);
    assert!(covered_until(&pool).await.unwrap() > position);
    let mut last = second;
    for _ in 0..10 {
        if !last.truncated {
            break;
        }
        last_started = Utc::now();
        let (summary, result) = run(
            &pool,
            &server,
            &events_settings(cap),
            CancellationToken::new(),
        )
        .await;
        result.unwrap();
        assert_eq!(summary.gap_seconds, None);
        last = summary;
    }
    assert!(!last.truncated, "the backlog drained");
    assert_eq!(recorded(&pool).await, (250, 250, 250));
    // Caught up: the last run covered the feed up to its own start, so the
    // lag is no more than the time since (however long the run took).
    let since = (Utc::now() - last_started).num_milliseconds() as f64 / 1000.0;
    let lag = lag_seconds(&pool, &server, &last).await;
    assert!(
        lag <= since + 1.0,
        "caught up: lag {lag} s, {since} s since the last run started"
    );
}

/// `events_lag_seconds` as the run's push would carry it, from the committed
/// position.
async fn lag_seconds(pool: &PgPool, server: &MockServer, s: &EventsSummary) -> f64 {
    let mut conn = pool.acquire().await.unwrap();
    let p = events_position::read(&mut conn, JOB)
        .await
        .unwrap()
        .unwrap();
    let state = EventsState {
        covered_until: p.covered_until,
        last_success: p.last_success_at,
        ..EventsState::default()
    };
    let mut metrics = EventsMetrics::new().unwrap();
    let now = Utc::now().timestamp_millis() as f64 / 1000.0;
    metrics.observe_events(
        &stripe_reconciler::events::figures(s, gateway(server).request_counts()),
        Some(&state),
        now,
    );
    let text = metrics.figures().encode().unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("stripe_reconciler_events_lag_seconds "))
        .unwrap_or_else(|| panic!("no events_lag_seconds in {text}"))
        .parse()
        .unwrap()
}

/// A PaymentIntent an earlier slice of the run decided without a Stripe read
/// (no row and not succeeded yet; a row confirmed after that event) must be
/// planned again when a later slice of the same run holds a newer event
/// about it: the earlier decision said nothing about the newer event.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_later_slices_event_about_a_payment_intent_not_read_earlier_is_not_skipped(pool: PgPool) {
    let server = StripeFake::start().await;
    let feed = server.feed();
    // 300 events of other PaymentIntents (no rows, not succeeded: no reads)
    // between the two events of each PaymentIntent below, so that the
    // window is cut into several slices.
    for i in 0..300 {
        feed.push(event(
            &format!("evt_f{i}"),
            &format!("pi_f{i}"),
            "processing",
            1900 - 4 * i,
        ));
    }
    // An order's payment that succeeded, its row never written: first
    // processing (no row, nothing to say), then succeeded.
    feed.push(event("evt_o1", "pi_Orphan", "processing", 1950));
    feed.push(event("evt_o2", "pi_Orphan", "succeeded", 650));
    let mut orphan = payment_intent("pi_Orphan", "succeeded");
    orphan["metadata"] = serde_json::json!({"shop_order": "order-9"});
    server.add_object(None, orphan);
    // A pending row confirmed processing after its first event; its
    // success webhook is missed.
    let row = arrange::payment("pi_Row")
        .local("pending")
        .insert(&pool, &server)
        .await
        .id;
    sqlx::query(
        "INSERT INTO reconciliation_payment_state
                (payment_id, created_at, observed_external_status, last_reconciled_at)
         VALUES ($1, now() - interval '30 days', 'processing', now() - interval '1800 seconds')",
    )
    .bind(row)
    .execute(&pool)
    .await
    .unwrap();
    feed.push(event("evt_r1", "pi_Row", "processing", 1950));
    feed.push(event("evt_r2", "pi_Row", "succeeded", 650));

    let (summary, result) = run(
        &pool,
        &server,
        &events_settings(100),
        CancellationToken::new(),
    )
    .await;
    result.unwrap();
    assert!(summary.slices > 1, "several slices: {summary:?}");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings
              WHERE kind = 'missing_locally' AND stripe_payment_intent_id = 'pi_Orphan'"
        )
        .await,
        1,
        "the succeeded PaymentIntent without a row is money with no order"
    );
    let kinds: Vec<String> =
        sqlx::query_scalar("SELECT kind FROM reconciliation_findings WHERE payment_id = $1")
            .bind(row)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        kinds,
        ["missed_success"],
        "the missed success webhook of the confirmed row is found"
    );
}
