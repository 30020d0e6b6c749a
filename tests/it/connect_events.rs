//! Connect (issue 24): the events feed of each active connected account,
//! read with its `Stripe-Account` header from its own position, in turn with
//! the platform's feed. Wiremock answers a feed or a PaymentIntent only when
//! the header matches (no header: the platform's).

use crate::support::events_feed::*;
use crate::support::*;
use serde_json::json;
use sqlx::PgPool;
use stripe_reconciler::config::ColumnName;
use stripe_reconciler::events::{run_events, EventsError, EventsSummary};
use tokio_util::sync::CancellationToken;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const JOB: &str = "payments-vs-stripe-events";

/// No `Stripe-Account` header: the platform's own account.
fn platform(req: &Request) -> bool {
    !req.headers.contains_key("stripe-account")
}

/// Mounts `feed` as `account`'s events (`None`: the platform's).
async fn mount_feed(server: &MockServer, account: Option<&str>, feed: &Feed) {
    let m = Mock::given(method("GET")).and(path("/v1/events"));
    match account {
        Some(a) => m
            .and(header("Stripe-Account", a))
            .respond_with(feed.clone()),
        None => m.and(platform).respond_with(feed.clone()),
    }
    .mount(server)
    .await;
}

/// Mounts a PaymentIntent answered only on `account` (else Stripe's 404).
async fn mount_on(server: &MockServer, account: Option<&str>, pi: &str, status: &str) {
    let m = Mock::given(method("GET")).and(path(format!("/v1/payment_intents/{pi}")));
    match account {
        Some(a) => m
            .and(header("Stripe-Account", a))
            .respond_with(ok(pi, status)),
        None => m.and(platform).respond_with(ok(pi, status)),
    }
    .mount(server)
    .await;
}

/// Every other request: Stripe's 404 for an object of another account.
async fn mount_missing(server: &MockServer) {
    Mock::given(method("GET"))
        .respond_with(err(404, "invalid_request_error", "resource_missing"))
        .with_priority(10)
        .mount(server)
        .await;
}

async fn add_account_column(pool: &PgPool) {
    sqlx::query("ALTER TABLE payments ADD COLUMN stripe_account text")
        .execute(pool)
        .await
        .unwrap();
}

/// A payment of `account` (in the `stripe_account` column), `updated_secs_ago`.
async fn insert_on(
    pool: &PgPool,
    account: &str,
    pi: &str,
    status: &str,
    updated_secs_ago: i64,
) -> i64 {
    let id = insert_payment(pool, pi, status, updated_secs_ago).await;
    sqlx::query("UPDATE payments SET stripe_account = $2 WHERE id = $1")
        .bind(id)
        .bind(account)
        .execute(pool)
        .await
        .unwrap();
    id
}

/// Mounts `response` as `account`'s events feed (a refused or failing feed).
async fn mount_feed_answer(server: &MockServer, account: &str, response: ResponseTemplate) {
    Mock::given(method("GET"))
        .and(path("/v1/events"))
        .and(header("Stripe-Account", account))
        .respond_with(response)
        .mount(server)
        .await;
}

/// `(payment_id, kind, account)` of every finding.
async fn kinds(pool: &PgPool) -> Vec<(Option<i64>, String, Option<String>)> {
    findings(pool)
        .await
        .into_iter()
        .map(|(p, _, k, a)| (p, k, a))
        .collect()
}

fn connect_settings() -> JobSettings {
    let mut s = settings(200);
    s.account_column =
        Some(ColumnName::parse("RECONCILER_ACCOUNT_COLUMN", "stripe_account").unwrap());
    s
}

async fn events_once(
    pool: &PgPool,
    stripe: &MockServer,
    s: &JobSettings,
) -> (EventsSummary, Result<(), EventsError>) {
    run_events(pool, &gateway(stripe), s, CancellationToken::new()).await
}

/// `(payment_id, PaymentIntent, kind, account)` of every finding.
async fn findings(pool: &PgPool) -> Vec<(Option<i64>, Option<String>, String, Option<String>)> {
    sqlx::query_as(
        "SELECT payment_id, stripe_payment_intent_id, kind, stripe_account_id
           FROM reconciliation_findings ORDER BY kind, payment_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The stored positions, by row name.
async fn positions(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar("SELECT job FROM reconciliation_events_position ORDER BY job")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn each_connected_accounts_feed_is_read_with_its_header_and_its_own_position(pool: PgPool) {
    add_account_column(&pool).await;
    let stripe = MockServer::start().await;
    let (plat, one, two) = (Feed::default(), Feed::default(), Feed::default());
    mount_feed(&stripe, None, &plat).await;
    mount_feed(&stripe, Some("acct_One"), &one).await;
    mount_feed(&stripe, Some("acct_Two"), &two).await;
    mount_missing(&stripe).await;

    // The platform and acct_One each miss a webhook; acct_Two took money for
    // an order that was never written, and has one ordinary row.
    let p = insert_payment(&pool, "pi_Plat", "pending", 3600).await;
    let o = insert_on(&pool, "acct_One", "pi_One", "pending", 3600).await;
    insert_on(&pool, "acct_Two", "pi_TwoPaid", "paid", 3600).await;
    plat.push(event("evt_p", "pi_Plat", "succeeded", 120));
    one.push(event("evt_o", "pi_One", "succeeded", 110));
    two.push(event("evt_t", "pi_TwoOrphan", "succeeded", 900));
    mount_on(&stripe, None, "pi_Plat", "succeeded").await;
    mount_on(&stripe, Some("acct_One"), "pi_One", "succeeded").await;
    mount_on(&stripe, Some("acct_Two"), "pi_TwoOrphan", "succeeded").await;

    let (summary, result) = events_once(&pool, &stripe, &connect_settings()).await;
    result.unwrap();

    assert_eq!(summary.accounts, 2);
    assert_eq!(
        findings(&pool).await,
        [
            (Some(p), None, "missed_success".into(), None),
            (
                Some(o),
                None,
                "missed_success".into(),
                Some("acct_One".into())
            ),
            (
                None,
                Some("pi_TwoOrphan".into()),
                "missing_locally".into(),
                Some("acct_Two".into())
            ),
        ]
    );
    assert_eq!(
        positions(&pool).await,
        [
            JOB.to_owned(),
            format!("{JOB}:acct_One"),
            format!("{JOB}:acct_Two"),
        ]
    );
    // The platform's feed was never asked with a header, nor an account's without.
    for r in stripe.received_requests().await.unwrap() {
        if r.url.path() == "/v1/events" {
            assert!(r
                .headers
                .get("stripe-account")
                .is_none_or(|a| a == "acct_One" || a == "acct_Two"));
        }
    }

    // The next run starts each feed from its own position: nothing new.
    let (again, result) = events_once(&pool, &stripe, &connect_settings()).await;
    result.unwrap();
    assert_eq!(again.findings_created, 0);
    assert_eq!(findings(&pool).await.len(), 3);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_busy_account_cannot_starve_a_quiet_one_and_a_revoked_one_is_skipped(pool: PgPool) {
    add_account_column(&pool).await;
    let stripe = MockServer::start().await;
    let (plat, busy, quiet) = (Feed::default(), Feed::default(), Feed::default());
    mount_feed(&stripe, None, &plat).await;
    mount_feed(&stripe, Some("acct_Busy"), &busy).await;
    mount_feed(&stripe, Some("acct_Quiet"), &quiet).await;
    mount_feed_answer(
        &stripe,
        "acct_Gone",
        ResponseTemplate::new(403).set_body_json(json!({"error": {
            "type": "invalid_request_error",
            "message": "The provided key 'sk_test_***' does not have access to account 'acct_Gone' (or that account does not exist). Application access may have been revoked."
        }})),
    )
    .await;
    mount_missing(&stripe).await;

    // acct_Busy: a burst of 900 events about paid rows; acct_Quiet: one missed webhook.
    for (pi, acct) in [("pi_BusyRow", "acct_Busy"), ("pi_GoneRow", "acct_Gone")] {
        insert_on(&pool, acct, pi, "paid", 3600).await;
    }
    for i in 0..900 {
        busy.push(event(
            &format!("evt_b{i}"),
            &format!("pi_Foreign{i}"),
            "processing",
            3000 - i,
        ));
    }
    let q = insert_on(&pool, "acct_Quiet", "pi_Quiet", "pending", 3600).await;
    quiet.push(event("evt_q", "pi_Quiet", "succeeded", 60));
    mount_on(&stripe, Some("acct_Quiet"), "pi_Quiet", "succeeded").await;

    // Four pages for the whole run: the busy feed alone needs nine.
    let mut s = connect_settings();
    s.events.max_pages = 4;
    let (summary, result) = events_once(&pool, &stripe, &s).await;
    result.unwrap();

    assert_eq!((summary.accounts, summary.accounts_unreachable), (3, 1));
    // The events push carries the count, with no per-account label.
    let mut metrics = stripe_reconciler::metrics::EventsMetrics::new().unwrap();
    metrics.observe_events(&summary, &gateway(&stripe).request_counts(), None, 0.0);
    let text = metrics.figures().encode().unwrap();
    assert!(
        text.lines()
            .any(|l| l == "stripe_reconciler_stripe_accounts_unreachable 1"),
        "{text}"
    );
    assert!(
        summary.truncated,
        "the busy feed's backlog is left to the next runs"
    );
    let found = kinds(&pool).await;
    assert_eq!(
        found,
        [(Some(q), "missed_success".into(), Some("acct_Quiet".into()))],
        "the quiet account's missed webhook is caught in the same run"
    );
    assert!(
        !positions(&pool).await.contains(&format!("{JOB}:acct_Gone")),
        "no position for an account that could not be read"
    );
}

/// A connected account whose feed Stripe keeps failing for (a 500 on that
/// account alone, Stripe answering everything else) must not stop the feeds
/// after it: it was first in line every run (never read, so least recently
/// read), and every run ended there.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn one_accounts_failing_feed_does_not_stop_the_other_accounts_feeds(pool: PgPool) {
    add_account_column(&pool).await;
    let stripe = MockServer::start().await;
    let (plat, fine) = (Feed::default(), Feed::default());
    mount_feed(&stripe, None, &plat).await;
    mount_feed(&stripe, Some("acct_Fine"), &fine).await;
    mount_feed_answer(&stripe, "acct_Broken", err(500, "api_error", "internal")).await;
    Mock::given(method("GET"))
        .and(path("/v1/payment_intents"))
        .and(platform)
        .respond_with(ResponseTemplate::new(200).set_body_json(
            json!({"object": "list", "url": "/v1/payment_intents", "has_more": false, "data": []}),
        ))
        .mount(&stripe)
        .await;
    mount_missing(&stripe).await;
    insert_on(&pool, "acct_Broken", "pi_BrokenRow", "paid", 3600).await;
    let f = insert_on(&pool, "acct_Fine", "pi_Fine", "pending", 3600).await;
    fine.push(event("evt_f", "pi_Fine", "succeeded", 60));
    mount_on(&stripe, Some("acct_Fine"), "pi_Fine", "succeeded").await;

    for _ in 0..2 {
        let (summary, result) = events_once(&pool, &stripe, &connect_settings()).await;
        assert_eq!(summary.accounts, 2);
        assert!(
            matches!(result, Err(EventsError::FeedUnavailable(_))),
            "the failing feed still fails the run: {result:?}"
        );
    }
    let found = kinds(&pool).await;
    assert_eq!(
        found,
        [(Some(f), "missed_success".into(), Some("acct_Fine".into()))],
        "the other account's missed webhook is caught"
    );
    assert!(positions(&pool).await.contains(&format!("{JOB}:acct_Fine")));
}
