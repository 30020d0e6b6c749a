//! Settings a user sets, through the shipped binary and the command that
//! reads them (docs/testing.md, "Variables × commands"): Checkout Sessions
//! (`RECONCILER_CHECKOUT_SESSION_COLUMN`) with Connect
//! (`RECONCILER_ACCOUNT_COLUMN`) through `events`, `run` and `repair`; the
//! notifications (`RECONCILER_NOTIFY_URL`, `_FORMAT`, `_KINDS`) of a scan's
//! own findings. The library-level tests of these features build their own
//! options; these fail when a command's wiring of the variable breaks.

use serde_json::{json, Value};
use sqlx::PgPool;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::checkout_sessions::{add_session_columns, insert_session_row, now, pi_at, ACCT};
use crate::support::stripe_fake::checkout_session;
use crate::support::stripe_fake::{StripeFake, SESSION_LIST, SESSION_RETRIEVE};
use crate::support::*;

fn session_env(pool: &PgPool, stripe: &StripeFake) -> Vec<(&'static str, String)> {
    vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
        (
            "RECONCILER_CHECKOUT_SESSION_COLUMN",
            "checkout_session".to_owned(),
        ),
        ("RECONCILER_ACCOUNT_COLUMN", "stripe_account".to_owned()),
    ]
}

/// A `checkout.session.completed` event carrying `session`, 15 minutes old.
fn completed(id: &str, session: &Value) -> Value {
    json!({"id": id, "object": "event", "api_version": "2024-06-20",
           "created": now() - 900, "type": "checkout.session.completed",
           "data": {"object": session}, "livemode": false, "pending_webhooks": 1,
           "request": {"id": null, "idempotency_key": null}})
}

type Open = (i64, String, Option<String>, Option<String>);

async fn open(pool: &PgPool) -> Vec<Open> {
    sqlx::query_as(
        "SELECT payment_id, kind, checkout_session_id, stripe_payment_intent_id
           FROM reconciliation_findings WHERE resolved_at IS NULL ORDER BY payment_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Two rows waiting for their PaymentIntent, each with a paid Checkout
/// Session: one of a connected account, whose `checkout.session.completed`
/// the application missed (`events` finds it, read as that account), one of
/// the platform (`run` finds it, listing sessions). `repair` then fills both
/// rows' PaymentIntent ids and books them paid.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn checkout_sessions_and_connect_through_events_run_and_repair(pool: PgPool) {
    add_session_columns(&pool).await;
    let stripe = StripeFake::start().await;
    let t0 = now() - 3 * 3600;
    let connected = insert_session_row(&pool, "cs_test_BinConn", "pending", t0, Some(ACCT)).await;
    let platform = insert_session_row(&pool, "cs_test_BinPlat", "pending", t0 + 60, None).await;
    for (account, cs, pi, created) in [
        (Some(ACCT), "cs_test_BinConn", "pi_BinConn", t0),
        (None, "cs_test_BinPlat", "pi_BinPlat", t0 + 60),
    ] {
        stripe.add_object(account, pi_at(pi, "succeeded", created));
        let session = checkout_session(cs, "complete", "paid", Some(pi), created);
        stripe.add_session(account, session.clone());
        if account.is_some() {
            stripe.push_event(account, completed("evt_BinConn", &session));
        }
    }
    // Two rows in sync beside each, so each account's sessions are listed
    // (beside others, a single row is retrieved: docs/scan.md).
    for (n, account) in [None, None, Some(ACCT), Some(ACCT)].into_iter().enumerate() {
        let (cs, pi, created) = (
            format!("cs_test_BinSync{n}"),
            format!("pi_BinSync{n}"),
            t0 + 120 + n as i64,
        );
        insert_session_row(&pool, &cs, "paid", created, account).await;
        stripe.add_object(account, pi_at(&pi, "succeeded", created));
        stripe.add_session(
            account,
            checkout_session(&cs, "complete", "paid", Some(&pi), created),
        );
    }
    let env = session_env(&pool, &stripe);

    let out = reconciler_output(&["events"], &env).await;
    assert_eq!(out.status.code(), Some(0), "events: {}", all_output(&out));
    let conn_finding: Open = (
        connected,
        "missed_success".into(),
        Some("cs_test_BinConn".into()),
        Some("pi_BinConn".into()),
    );
    assert_eq!(open(&pool).await, std::slice::from_ref(&conn_finding));
    let events_accounts = stripe.accounts_asked();
    assert!(
        events_accounts.contains(&Some(ACCT.into())),
        "the connected account's feed was read as that account: {events_accounts:?}"
    );

    let before = stripe.seen().len();
    let out = reconciler_output(&["run"], &env).await;
    assert_eq!(out.status.code(), Some(0), "run: {}", all_output(&out));
    assert_eq!(
        open(&pool).await,
        [
            conn_finding,
            (
                platform,
                "missed_success".into(),
                Some("cs_test_BinPlat".into()),
                Some("pi_BinPlat".into())
            )
        ]
    );
    // The run read the sessions (listed: the default read mode), each on
    // its own account.
    let sessions: Vec<(&'static str, Option<String>)> = stripe.seen()[before..]
        .iter()
        .filter(|x| [SESSION_LIST, SESSION_RETRIEVE].contains(&x.endpoint))
        .map(|x| (x.endpoint, x.account.clone()))
        .collect();
    assert!(
        sessions.contains(&(SESSION_LIST, None))
            && sessions.contains(&(SESSION_LIST, Some(ACCT.into()))),
        "{sessions:?}"
    );

    let out = reconciler_output(&["repair"], &env).await;
    assert_eq!(out.status.code(), Some(0), "repair: {}", all_output(&out));
    let report: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(
        (&report["applied"], &report["failed"]),
        (&json!(2), &json!(0)),
        "{report}"
    );
    let rows: Vec<(i64, String, Option<String>)> = sqlx::query_as(
        "SELECT id, status, stripe_payment_intent_id FROM payments
          WHERE id = ANY($1) ORDER BY id",
    )
    .bind([connected, platform])
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            (connected, "paid".into(), Some("pi_BinConn".into())),
            (platform, "paid".into(), Some("pi_BinPlat".into())),
        ]
    );
}

const HOOK: &str = "/hooks/scan-findings";

/// What the receiver got, as JSON.
async fn posted(receiver: &MockServer) -> Vec<Value> {
    receiver
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path() == HOOK)
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

/// `(kind, order_id)` of every finding in the posted messages.
fn kinds_and_orders(messages: &[Value]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = messages
        .iter()
        .flat_map(|m| m["findings"].as_array().cloned().unwrap_or_default())
        .map(|f| {
            (
                f["kind"].as_str().unwrap_or_default().to_owned(),
                f["order_id"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// The findings a `run` makes itself (no finding inserted by hand) are
/// posted as `RECONCILER_NOTIFY_FORMAT=json`, filtered by
/// `RECONCILER_NOTIFY_KINDS`: with `refunded,missed_success` the refund and
/// the missed success of this scan are posted, the dispute is not; a second
/// run posts nothing new.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_scans_own_findings_are_notified_as_configured(pool: PgPool) {
    let receiver = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(HOOK))
        .respond_with(ResponseTemplate::new(200))
        .mount(&receiver)
        .await;
    let stripe = StripeFake::start().await;
    let created = now() - 7200;
    for (pi, local) in [
        ("pi_NoteSync", "paid"),
        ("pi_NoteMissed", "pending"),
        ("pi_NoteRefund", "paid"),
        ("pi_NoteDispute", "paid"),
    ] {
        let b = arrange::payment(pi).local(local);
        let b = match pi {
            "pi_NoteRefund" => b.refunded(1099),
            "pi_NoteDispute" => b.disputed(),
            _ => b,
        };
        let mut object = b.clone().stripe_object();
        object["created"] = json!(created);
        stripe.add_object(None, object);
        insert_payment(&pool, pi, local, 3600).await;
    }
    sqlx::query("UPDATE payments SET created_at = to_timestamp($1)")
        .bind(created as f64)
        .execute(&pool)
        .await
        .unwrap();
    let env = vec![
        ("DATABASE_URL", database_url(&pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_NOTIFY_URL", format!("{}{HOOK}", receiver.uri())),
        ("RECONCILER_NOTIFY_FORMAT", "json".to_owned()),
        (
            "RECONCILER_NOTIFY_KINDS",
            "refunded,missed_success".to_owned(),
        ),
    ];
    let out = reconciler_output(&["run"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let kinds: Vec<String> = sqlx::query_scalar(
        "SELECT kind FROM reconciliation_findings WHERE resolved_at IS NULL ORDER BY kind",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(kinds, ["disputed", "missed_success", "refunded"]);
    let messages = posted(&receiver).await;
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert_eq!(
        kinds_and_orders(&messages),
        [
            ("missed_success".into(), "order-pi_NoteMissed".into()),
            ("refunded".into(), "order-pi_NoteRefund".into()),
        ],
        "{messages:#?}"
    );

    let out = reconciler_output(&["run"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(posted(&receiver).await.len(), 1, "nothing new to post");
}

/// `RECONCILER_GRACE_SECONDS` through `run`: a row updated 20 minutes ago
/// is left alone (in flight, not read) with an hour of grace, and found
/// with a minute of grace.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn run_reads_the_grace_window_from_the_environment(pool: PgPool) {
    let row = insert_payment(&pool, "pi_Grace", "pending", 1200).await;
    let stripe = StripeFake::start().await;
    stripe.mirror(&pool, "succeeded").await;
    let env = |grace: &str| {
        vec![
            ("DATABASE_URL", database_url(&pool)),
            ("STRIPE_API_KEY", API_KEY.to_owned()),
            ("STRIPE_API_BASE", stripe.uri()),
            ("RECONCILER_GRACE_SECONDS", grace.to_owned()),
        ]
    };
    let out = reconciler_output(&["run"], &env("3600")).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert!(findings_of(&pool, row).await.is_empty());
    assert!(stripe.seen().is_empty(), "{:?}", stripe.seen());
    let out = reconciler_output(&["run"], &env("60")).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let kinds: Vec<String> = findings_of(&pool, row)
        .await
        .into_iter()
        .map(|f| f.kind)
        .collect();
    assert_eq!(kinds, ["missed_success"]);
}

/// `RECONCILER_EVENTS_LOOKBACK_SECONDS` and `RECONCILER_ORPHAN_METADATA_KEY`
/// through `events`: of three succeeded PaymentIntents no row names, only
/// the one inside the hour looked back over whose metadata has the key is
/// `missing_locally`.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn events_reads_its_lookback_and_orphan_key_from_the_environment(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let mut no_key = crate::support::stripe_fake::event("evt_NoKey", "pi_NoKey", "succeeded", 900);
    no_key["data"]["object"]["metadata"] = json!({});
    for e in [
        crate::support::stripe_fake::event("evt_Keyed", "pi_Keyed", "succeeded", 900),
        no_key,
        crate::support::stripe_fake::event("evt_Old", "pi_Old", "succeeded", 2 * 3600),
    ] {
        stripe.add_object(None, e["data"]["object"].clone());
        stripe.push_event(None, e);
    }
    let env = vec![
        ("DATABASE_URL", database_url(&pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_EVENTS_LOOKBACK_SECONDS", "3600".to_owned()),
        ("RECONCILER_ORPHAN_METADATA_KEY", "shop_order".to_owned()),
    ];
    let out = reconciler_output(&["events"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let orphans: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT kind, stripe_payment_intent_id FROM reconciliation_findings ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        orphans,
        [("missing_locally".to_owned(), Some("pi_Keyed".to_owned()))]
    );
}
