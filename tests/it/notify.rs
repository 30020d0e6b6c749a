//! Notifications (docs/review.md, "Notifications") through the real binary, with a local
//! receiver:
//! one message per run listing each new money finding once, a retry after a
//! failing receiver, Slack's escaping of a hostile order id, and a URL that
//! never reaches the output.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::PgPool;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

const HOOK: &str = "/services/T000/B000/sekret-hook-token";

async fn env(pool: &PgPool, receiver: &MockServer, format: &str) -> Vec<(&'static str, String)> {
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;
    let uri = stripe.uri();
    // The mock must outlive the run: leak it into the test's lifetime.
    std::mem::forget(stripe);
    vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", uri),
        ("RECONCILER_BATCHES_PER_RUN", "1".to_owned()),
        ("RECONCILER_NOTIFY_URL", format!("{}{HOOK}", receiver.uri())),
        ("RECONCILER_NOTIFY_FORMAT", format.to_owned()),
    ]
}

/// A finding on a payment the scan leaves alone (updated just now: in grace).
async fn finding(pool: &PgPool, pi: &str, kind: &str, details: Value) -> i64 {
    let p = insert_payment(pool, pi, "paid", 0).await;
    sqlx::query_scalar(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status, details)
         VALUES ($1, $2, 'paid', 'succeeded', $3) RETURNING id",
    )
    .bind(p)
    .bind(kind)
    .bind(details)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn bodies(receiver: &MockServer) -> Vec<Value> {
    receiver
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path() == HOOK)
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

fn assert_quiet(out: &std::process::Output) {
    assert!(out.status.success(), "{out:?}");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !all.contains("sekret-hook-token"),
        "the URL was printed: {all}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn each_new_money_finding_is_posted_once_across_two_runs(pool: PgPool) {
    let receiver = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(HOOK))
        .respond_with(ResponseTemplate::new(200))
        .mount(&receiver)
        .await;
    let env = env(&pool, &receiver, "json").await;
    let first = finding(
        &pool,
        "pi_First",
        "amount_mismatch",
        json!({"local_amount": 2000, "stripe_amount": 1999, "currency": "usd"}),
    )
    .await;
    assert_quiet(&reconciler_output(&["run"], &env).await);
    let second = finding(
        &pool,
        "pi_Second",
        "disputed",
        json!({"amount": 500, "currency": "eur"}),
    )
    .await;
    finding(&pool, "pi_Status", "missed_success", Value::Null).await;
    assert_quiet(&reconciler_output(&["run"], &env).await);
    // Nothing new: no message at all.
    assert_quiet(&reconciler_output(&["run"], &env).await);

    let got = bodies(&receiver).await;
    assert_eq!(got.len(), 2, "{got:?}");
    let ids: Vec<Vec<i64>> = got
        .iter()
        .map(|b| {
            b["findings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["id"].as_i64().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(ids, [vec![first], vec![second]]);
    let f = &got[0]["findings"][0];
    assert_eq!(f["order_id"], "order-pi_First");
    assert_eq!(f["amount"], "19.99 USD");
    assert_eq!(f["kind"], "amount_mismatch");
    assert_eq!(
        f["differs"],
        json!({"field": "amount", "local": "20.00 USD", "stripe": "19.99 USD"})
    );
    assert_eq!(
        f["dashboard_url"],
        "https://dashboard.stripe.com/test/payments/pi_First"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_failed_post_is_retried_by_the_next_run_and_never_fails_or_holds_it(pool: PgPool) {
    /// How long the slow receiver takes to answer: far beyond the post's
    /// timeout and the notifications' budget.
    const RECEIVER_DELAY: Duration = Duration::from_secs(120);
    let receiver = MockServer::start().await;
    let env = env(&pool, &receiver, "slack").await;
    let id = finding(
        &pool,
        "pi_Retry",
        "refunded",
        json!({"amount": 500, "amount_refunded": 500, "currency": "usd"}),
    )
    .await;
    // A 5xx, then a receiver that does not answer in time.
    let failing = Mock::given(method("POST"))
        .and(path(HOOK))
        .respond_with(ResponseTemplate::new(503))
        .mount_as_scoped(&receiver)
        .await;
    assert_quiet(&reconciler_output(&["run"], &env).await);
    drop(failing);
    let slow = Mock::given(method("POST"))
        .and(path(HOOK))
        .respond_with(ResponseTemplate::new(200).set_delay(RECEIVER_DELAY))
        .mount_as_scoped(&receiver)
        .await;
    let started = Instant::now();
    assert_quiet(&reconciler_output(&["run"], &env).await);
    // The run ended before the receiver could have answered: it gave up on
    // the post (its own 5 s timeout) instead of waiting. No speed of the
    // machine makes a run that waited end sooner than the answer.
    assert!(
        started.elapsed() < RECEIVER_DELAY,
        "the run waited for the receiver: {:?}",
        started.elapsed()
    );
    drop(slow);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_notified").await,
        0
    );

    Mock::given(method("POST"))
        .and(path(HOOK))
        .respond_with(ResponseTemplate::new(200))
        .mount(&receiver)
        .await;
    // The events job notifies too.
    let events_stripe = crate::support::stripe_fake::StripeFake::start().await;
    let mut events_env = env.clone();
    events_env[2].1 = events_stripe.uri();
    assert_quiet(&reconciler_output(&["events"], &events_env).await);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_notified").await,
        1
    );
    let got = bodies(&receiver).await;
    assert_eq!(got.len(), 3, "{got:?}");
    let text = got[2]["text"].as_str().unwrap();
    assert!(
        text.contains("refunded 5.00 of 5.00 USD") && text.contains("order order-pi_Retry"),
        "{text}"
    );
    assert_eq!(count(&pool, &format!("SELECT count(*) FROM reconciliation_findings WHERE id = {id} AND resolved_at IS NULL")).await, 1);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_hostile_order_id_cannot_mention_or_forge_a_link_in_slack(pool: PgPool) {
    let receiver = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(HOOK))
        .respond_with(ResponseTemplate::new(200))
        .mount(&receiver)
        .await;
    let env = env(&pool, &receiver, "slack").await;
    finding(
        &pool,
        "pi_Hostile",
        "disputed",
        json!({"amount": 1099, "currency": "usd"}),
    )
    .await;
    sqlx::query("UPDATE payments SET order_id = '<!channel> & <https://evil.example|refund here>' || chr(10) || 'forged line'")
        .execute(&pool)
        .await
        .unwrap();
    assert_quiet(&reconciler_output(&["run"], &env).await);
    let got = bodies(&receiver).await;
    assert_eq!(got.len(), 1);
    let text = got[0]["text"].as_str().unwrap();
    assert!(
        text.contains(
            "order &lt;!channel&gt; &amp; &lt;https://evil.example|refund here&gt;\\nforged line"
        ),
        "{text}"
    );
    assert!(
        !text.contains("<!channel>") && !text.contains("<https://evil"),
        "{text}"
    );
    assert_eq!(
        text.lines().count(),
        2,
        "one title line and one line per finding: {text}"
    );
    assert!(
        text.contains("<https://dashboard.stripe.com/test/payments/pi_Hostile|Dashboard>"),
        "{text}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_plain_http_url_off_loopback_stops_the_run_without_showing_it(pool: PgPool) {
    let receiver = MockServer::start().await;
    let mut env = env(&pool, &receiver, "slack").await;
    env[4].1 = "http://hooks.example.com/services/sekret-hook-token".to_owned();
    let out = reconciler_output(&["run"], &env).await;
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("RECONCILER_NOTIFY_URL") && !err.contains("sekret"),
        "{err}"
    );
}
