//! Connect (docs/connect.md): the events feed of each active connected account,
//! read with its `Stripe-Account` header from its own position, in turn with
//! the platform's feed. The shared fake Stripe (`support::stripe_fake`)
//! answers a feed or a PaymentIntent only when the header matches (no
//! header: the platform's).

use crate::support::connected::add_account_column;
use crate::support::stripe_fake::event;
use crate::support::stripe_fake::{no_access, StripeFake, EVENTS};
use crate::support::*;
use sqlx::PgPool;
use stripe_reconciler::config::ColumnName;
use stripe_reconciler::events::{EventsError, EventsJob, EventsSummary};
use wiremock::MockServer;

const JOB: &str = "payments-vs-stripe-events";

/// Adds PaymentIntent `pi` in `status` on `account` (`None`: the
/// platform's), created an hour ago: Stripe's 404 on any other account.
fn add_on(stripe: &StripeFake, account: Option<&str>, pi: &str, status: &str) {
    stripe.add(account, pi, status, chrono::Utc::now().timestamp() - 3600);
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

/// `(payment_id, kind, account)` of every finding.
async fn kinds(pool: &PgPool) -> Vec<(Option<i64>, String, Option<String>)> {
    findings(pool)
        .await
        .into_iter()
        .map(|(p, _, k, a)| (p, k, a))
        .collect()
}

fn connect_settings() -> Settings {
    let mut s = settings(200);
    s.schema.account_column =
        Some(ColumnName::parse("RECONCILER_ACCOUNT_COLUMN", "stripe_account").unwrap());
    s
}

async fn events_once(
    pool: &PgPool,
    stripe: &MockServer,
    s: &Settings,
) -> (EventsSummary, Result<(), EventsError>) {
    run_job(pool, &gateway(stripe), s, EventsJob).await
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
    let stripe = StripeFake::start().await;

    // The platform and acct_One each miss a webhook; acct_Two took money for
    // an order that was never written, and has one ordinary row.
    let p = insert_payment(&pool, "pi_Plat", "pending", 3600).await;
    let o = insert_on(&pool, "acct_One", "pi_One", "pending", 3600).await;
    insert_on(&pool, "acct_Two", "pi_TwoPaid", "paid", 3600).await;
    stripe.push_event(None, event("evt_p", "pi_Plat", "succeeded", 120));
    stripe.push_event(Some("acct_One"), event("evt_o", "pi_One", "succeeded", 110));
    stripe.push_event(
        Some("acct_Two"),
        event("evt_t", "pi_TwoOrphan", "succeeded", 900),
    );
    add_on(&stripe, None, "pi_Plat", "succeeded");
    add_on(&stripe, Some("acct_One"), "pi_One", "succeeded");
    add_on(&stripe, Some("acct_Two"), "pi_TwoOrphan", "succeeded");

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
    // Each feed was read with its own header (none: the platform's).
    for account in [None, Some("acct_One"), Some("acct_Two")] {
        assert!(stripe.count_on(account, EVENTS) > 0, "{account:?}");
    }
    assert_eq!(
        stripe.count(EVENTS),
        [None, Some("acct_One"), Some("acct_Two")]
            .into_iter()
            .map(|a| stripe.count_on(a, EVENTS))
            .sum::<usize>(),
        "no feed asked as another account: {:#?}",
        stripe.seen()
    );

    // The next run starts each feed from its own position: nothing new.
    let (again, result) = events_once(&pool, &stripe, &connect_settings()).await;
    result.unwrap();
    assert_eq!(again.findings_created, 0);
    assert_eq!(findings(&pool).await.len(), 3);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_busy_account_cannot_starve_a_quiet_one_and_a_revoked_one_is_skipped(pool: PgPool) {
    add_account_column(&pool).await;
    let stripe = StripeFake::start().await;
    stripe.answer_on(Some("acct_Gone"), EVENTS, no_access("acct_Gone"));

    // acct_Busy: a burst of 900 events about paid rows; acct_Quiet: one missed webhook.
    for (pi, acct) in [("pi_BusyRow", "acct_Busy"), ("pi_GoneRow", "acct_Gone")] {
        insert_on(&pool, acct, pi, "paid", 3600).await;
    }
    for i in 0..900 {
        stripe.push_event(
            Some("acct_Busy"),
            event(
                &format!("evt_b{i}"),
                &format!("pi_Foreign{i}"),
                "processing",
                3000 - i,
            ),
        );
    }
    let q = insert_on(&pool, "acct_Quiet", "pi_Quiet", "pending", 3600).await;
    stripe.push_event(
        Some("acct_Quiet"),
        event("evt_q", "pi_Quiet", "succeeded", 60),
    );
    add_on(&stripe, Some("acct_Quiet"), "pi_Quiet", "succeeded");

    // Four pages for the whole run: the busy feed alone needs nine.
    let mut s = connect_settings();
    s.events.max_pages = 4;
    let (summary, result) = events_once(&pool, &stripe, &s).await;
    result.unwrap();

    assert_eq!((summary.accounts, summary.accounts_unreachable), (3, 1));
    // The events push carries the count, with no per-account label.
    let mut metrics = stripe_reconciler::metrics::EventsMetrics::new().unwrap();
    metrics.observe_events(
        &stripe_reconciler::events::figures(&summary, gateway(&stripe).request_counts()),
        None,
        0.0,
    );
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
    // Stripe answers everything (the platform's list probe too) but
    // acct_Broken's feed.
    let stripe = StripeFake::start().await;
    stripe.answer_on(
        Some("acct_Broken"),
        EVENTS,
        err(500, "api_error", "internal"),
    );
    insert_on(&pool, "acct_Broken", "pi_BrokenRow", "paid", 3600).await;
    let f = insert_on(&pool, "acct_Fine", "pi_Fine", "pending", 3600).await;
    stripe.push_event(
        Some("acct_Fine"),
        event("evt_f", "pi_Fine", "succeeded", 60),
    );
    add_on(&stripe, Some("acct_Fine"), "pi_Fine", "succeeded");

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
