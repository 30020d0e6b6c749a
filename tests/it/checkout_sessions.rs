//! Checkout Sessions (docs/checkout-sessions.md): rows with no PaymentIntent id and a `cs_`
//! id in `RECONCILER_CHECKOUT_SESSION_COLUMN`, judged by their session and
//! then by its PaymentIntent, in both read modes, against the shared fake
//! Stripe; the repair that fills the PaymentIntent id.

use crate::support::connected::connect_settings;
use crate::support::keyed::run;
use crate::support::stripe_fake::checkout_session;
use crate::support::stripe_fake::{StripeFake, LIST, RETRIEVE, SESSION_LIST, SESSION_RETRIEVE};
use crate::support::*;
use serde_json::{json, Value};
use sqlx::PgPool;
use stripe_reconciler::config::{ColumnName, ReadMode, Settings};
use stripe_reconciler::repair::{drain_with, RepairOptions, RepairReport};
use tokio_util::sync::CancellationToken;

pub(super) const ACCT: &str = "acct_1SessionsConnect";

pub(super) fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// `payments` gains the application's session column (and Connect's).
pub(super) async fn add_session_columns(pool: &PgPool) {
    sqlx::raw_sql(
        "ALTER TABLE payments ADD COLUMN checkout_session text;
         ALTER TABLE payments ADD COLUMN stripe_account text;
         ALTER TABLE payments ALTER COLUMN stripe_payment_intent_id DROP NOT NULL",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// A row waiting for its PaymentIntent (`pi` NULL) with `session`, created
/// at `created` (Unix seconds, as its session), last updated an hour ago.
pub(super) async fn insert_session_row(
    pool: &PgPool,
    session: &str,
    status: &str,
    created: i64,
    account: Option<&str>,
) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, checkout_session, stripe_account,
                               status, created_at, updated_at)
         VALUES ('order-' || $1, NULL, $1, $4, $2, to_timestamp($3), now() - interval '1 hour')
         RETURNING id",
    )
    .bind(session)
    .bind(status)
    .bind(created as f64)
    .bind(account)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// The Connect test settings ([`connect_settings`]) with
/// `RECONCILER_CHECKOUT_SESSION_COLUMN=checkout_session`.
pub(super) fn session_settings(mode: ReadMode) -> Settings {
    let mut s = connect_settings(mode);
    s.schema.checkout_session_column =
        Some(ColumnName::parse("RECONCILER_CHECKOUT_SESSION_COLUMN", "checkout_session").unwrap());
    s
}

pub(super) async fn repair(pool: &PgPool, s: &Settings) -> RepairReport {
    let options = RepairOptions {
        checkout_session_column: s.schema.checkout_session_column.clone(),
        ..RepairOptions::default()
    };
    drain_with(pool, options, &s.schema.statuses, &CancellationToken::new())
        .await
        .unwrap()
}

/// `(payment, kind, checkout_session_id, stripe_payment_intent_id)` of every open finding.
pub(super) async fn open_findings(
    pool: &PgPool,
) -> Vec<(i64, String, Option<String>, Option<String>)> {
    sqlx::query_as(
        "SELECT payment_id, kind, checkout_session_id, stripe_payment_intent_id
           FROM reconciliation_findings WHERE resolved_at IS NULL ORDER BY payment_id, kind",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// A PaymentIntent of the fake in `status`, created `created`.
pub(super) fn pi_at(id: &str, status: &str, created: i64) -> Value {
    let mut pi = payment_intent(id, status);
    pi["created"] = json!(created);
    pi
}

/// The table of the issue: one row per session state, and one PaymentIntent
/// row beside them. Returns `(payment id, expected open finding kind)`.
async fn arrange_every_state(
    pool: &PgPool,
    stripe: &StripeFake,
) -> Vec<(i64, Option<&'static str>)> {
    let t0 = now() - 6 * 3600;
    let month_ago = now() - 30 * 86_400;
    // (session, local, session status, payment_status, PaymentIntent status and created, expected)
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        Option<(&'static str, i64)>,
        Option<&'static str>,
    );
    let cases: [Case; 8] = [
        (
            "cs_test_Paid",
            "pending",
            "complete",
            "paid",
            Some(("succeeded", t0)),
            Some("missed_success"),
        ),
        (
            "cs_test_Expired",
            "pending",
            "expired",
            "unpaid",
            None,
            Some("missed_cancel"),
        ),
        (
            "cs_test_Sepa",
            "pending",
            "complete",
            "unpaid",
            Some(("processing", t0)),
            None,
        ),
        (
            "cs_test_SepaStuck",
            "pending",
            "complete",
            "unpaid",
            Some(("processing", month_ago)),
            Some("stuck_processing"),
        ),
        (
            "cs_test_Shipped",
            "paid",
            "complete",
            "unpaid",
            Some(("processing", t0)),
            Some("paid_locally_not_externally"),
        ),
        ("cs_test_Open", "pending", "open", "unpaid", None, None),
        (
            "cs_test_Gone",
            "pending",
            "",
            "",
            None,
            Some("missing_externally"),
        ),
        (
            "cs_test_Setup",
            "pending",
            "complete",
            "no_payment_required",
            None,
            Some("invalid_checkout_session_id"),
        ),
    ];
    let mut expected = Vec::new();
    for (n, (cs, local, status, paid, pi, kind)) in cases.into_iter().enumerate() {
        let created = t0 + n as i64 * 60;
        let id = insert_session_row(pool, cs, local, created, None).await;
        expected.push((id, kind));
        if status.is_empty() {
            continue;
        }
        let pi_id = pi.map(|(pi_status, pi_created)| {
            let pi_id = format!("pi_{}", cs.trim_start_matches("cs_test_"));
            stripe.add_object(None, pi_at(&pi_id, pi_status, pi_created));
            pi_id
        });
        let mut session = checkout_session(cs, status, paid, pi_id.as_deref(), created);
        if cs == "cs_test_Setup" {
            session["mode"] = json!("setup");
        }
        stripe.add_session(None, session);
    }
    let bad = insert_session_row(
        pool,
        "cs_test_x/../../v1/customers",
        "pending",
        t0 + 900,
        None,
    )
    .await;
    expected.push((bad, Some("invalid_checkout_session_id")));
    // A PaymentIntent row beside them, judged as before.
    let row = insert_payment(pool, "pi_PlainRow", "pending", 3600).await;
    sqlx::query("UPDATE payments SET created_at = to_timestamp($2) WHERE id = $1")
        .bind(row)
        .bind((t0 + 960) as f64)
        .execute(pool)
        .await
        .unwrap();
    stripe.add_object(None, pi_at("pi_PlainRow", "succeeded", t0 + 960));
    expected.push((row, Some("missed_success")));
    expected
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn every_session_state_gets_its_verdict_in_both_read_modes_with_the_right_requests(
    pool: PgPool,
) {
    add_session_columns(&pool).await;
    let stripe = StripeFake::start().await;
    let expected = arrange_every_state(&pool, &stripe).await;
    for mode in [ReadMode::Retrieve, ReadMode::List] {
        forget_scan_state(&pool).await;
        let before = stripe.seen().len();
        let summary = run(&pool, &stripe, &session_settings(mode)).await;
        assert!(summary.wrapped, "{mode:?}: {summary:?}");
        let found = open_findings(&pool).await;
        for (id, kind) in &expected {
            let kinds: Vec<&str> = found
                .iter()
                .filter(|f| f.0 == *id)
                .map(|f| f.1.as_str())
                .collect();
            assert_eq!(
                kinds,
                kind.iter().copied().collect::<Vec<_>>(),
                "{mode:?}, payment {id}: {found:?}"
            );
        }
        // The finding names the session, and its PaymentIntent once it has one.
        let paid = found
            .iter()
            .find(|f| f.1 == "missed_success" && f.2.is_some())
            .unwrap();
        assert_eq!(
            (paid.2.as_deref(), paid.3.as_deref()),
            (Some("cs_test_Paid"), Some("pi_Paid"))
        );
        let plain = found
            .iter()
            .find(|f| f.1 == "missed_success" && f.2.is_none())
            .unwrap();
        assert_eq!(plain.3, None, "a PaymentIntent row's finding is as before");
        let seen = &stripe.seen()[before..];
        let count = |e: &str| seen.iter().filter(|s| s.endpoint == e).count();
        let retrieved = |e: &str| -> Vec<String> {
            seen.iter()
                .filter(|s| s.endpoint == e)
                .filter_map(|s| s.id.clone())
                .collect()
        };
        assert!(
            seen.iter()
                .all(|s| !s.id.as_deref().unwrap_or("").contains('/')),
            "the malformed id was never sent: {seen:#?}"
        );
        match mode {
            ReadMode::Retrieve => {
                assert_eq!(count(SESSION_RETRIEVE), 8, "{seen:#?}");
                assert_eq!(retrieved(RETRIEVE), ["pi_PlainRow"]);
                assert_eq!(count(LIST) + count(SESSION_LIST), 0);
                assert!(seen
                    .iter()
                    .filter(|s| s.endpoint == SESSION_RETRIEVE)
                    .all(|s| s.expand == ["payment_intent.latest_charge"]));
            }
            ReadMode::List => {
                // The sessions by list pages (the core window, and the slack
                // rings for the one session they did not hold); only that
                // session is retrieved (its 404 is the finding). The lone
                // PaymentIntent row beside them is retrieved: one request,
                // cheaper than a page.
                assert!((1..=3).contains(&count(SESSION_LIST)), "{seen:#?}");
                assert_eq!(retrieved(SESSION_RETRIEVE), ["cs_test_Gone"]);
                assert_eq!(retrieved(RETRIEVE), ["pi_PlainRow"]);
                assert_eq!(count(LIST), 0, "{seen:#?}");
                assert!(seen
                    .iter()
                    .filter(|s| s.endpoint == SESSION_LIST)
                    .all(|s| s.expand == ["data.payment_intent.latest_charge"]));
            }
        }
    }
    // The repair commands name the session and the PaymentIntent to fill in.
    let commands = outbox(&pool).await;
    let payloads: Vec<&Value> = commands.iter().map(|c| &c.payload).collect();
    assert!(
        payloads
            .iter()
            .any(|p| p["checkout_session_id"] == "cs_test_Paid"
                && p["stripe_payment_intent_id"] == "pi_Paid"),
        "{payloads:#?}"
    );
    assert!(
        payloads
            .iter()
            .any(|p| p["checkout_session_id"] == "cs_test_Expired"
                && p["stripe_payment_intent_id"].is_null()),
        "{payloads:#?}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_repair_fills_the_payment_intent_id_exactly_once(pool: PgPool) {
    add_session_columns(&pool).await;
    let stripe = StripeFake::start().await;
    let t0 = now() - 3 * 3600;
    let paid = insert_session_row(&pool, "cs_test_Fill", "pending", t0, None).await;
    let raced = insert_session_row(&pool, "cs_test_Raced", "pending", t0 + 1, None).await;
    let expired = insert_session_row(&pool, "cs_test_Late", "pending", t0 + 2, None).await;
    for (cs, pi, created) in [
        ("cs_test_Fill", "pi_Fill", t0),
        ("cs_test_Raced", "pi_Raced", t0 + 1),
    ] {
        stripe.add_object(None, pi_at(pi, "succeeded", created));
        stripe.add_session(
            None,
            checkout_session(cs, "complete", "paid", Some(pi), created),
        );
    }
    stripe.add_session(
        None,
        checkout_session("cs_test_Late", "expired", "unpaid", None, t0 + 2),
    );
    let s = session_settings(ReadMode::Retrieve);
    run(&pool, &stripe, &s).await;
    // The application's webhook filled the raced row's PaymentIntent meanwhile
    // with another id: never overwritten, the command is superseded.
    sqlx::query("UPDATE payments SET stripe_payment_intent_id = 'pi_FromWebhook' WHERE id = $1")
        .bind(raced)
        .execute(&pool)
        .await
        .unwrap();
    let report = repair(&pool, &s).await;
    assert_eq!(
        (report.applied, report.skipped, report.failed),
        (2, 1, 0),
        "{report:?}"
    );
    let row = |id: i64| {
        sqlx::query_as::<_, (String, Option<String>, i64)>(
            "SELECT status, stripe_payment_intent_id, version FROM payments WHERE id = $1",
        )
        .bind(id)
        .fetch_one(&pool)
    };
    let (status, pi, version) = row(paid).await.unwrap();
    assert_eq!((status.as_str(), pi.as_deref()), ("paid", Some("pi_Fill")));
    assert_eq!(
        row(raced).await.unwrap().1.as_deref(),
        Some("pi_FromWebhook")
    );
    assert_eq!(row(raced).await.unwrap().0, "pending");
    let (status, pi, _) = row(expired).await.unwrap();
    assert_eq!((status.as_str(), pi), ("failed", None));
    // A second command for the same payment (a replay) changes nothing.
    sqlx::query(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
         SELECT aggregate_type, aggregate_id, event_type, payload FROM outbox
          WHERE payload->>'checkout_session_id' = 'cs_test_Fill'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let again = repair(&pool, &s).await;
    assert_eq!((again.applied, again.failed), (0, 0), "{again:?}");
    assert_eq!(
        row(paid).await.unwrap(),
        ("paid".into(), Some("pi_Fill".into()), version)
    );
    // Out of the grace window, the next scan reads it as a PaymentIntent
    // row: in sync, nothing open.
    sqlx::query("UPDATE payments SET updated_at = now() - interval '1 hour'")
        .execute(&pool)
        .await
        .unwrap();
    let before = stripe.seen().len();
    run(&pool, &stripe, &s).await;
    let asked: Vec<_> = stripe.seen()[before..]
        .iter()
        .filter(|x| x.id.as_deref() == Some("pi_Fill") || x.id.as_deref() == Some("cs_test_Fill"))
        .map(|x| x.endpoint)
        .collect();
    assert_eq!(asked, [RETRIEVE]);
    let open: Vec<_> = open_findings(&pool)
        .await
        .into_iter()
        .filter(|f| f.0 == paid)
        .collect();
    assert!(open.is_empty(), "{open:?}");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_connected_accounts_session_is_read_with_its_account_in_both_modes(pool: PgPool) {
    add_session_columns(&pool).await;
    let stripe = StripeFake::start().await;
    let t0 = now() - 3 * 3600;
    let id = insert_session_row(&pool, "cs_test_Conn", "pending", t0, Some(ACCT)).await;
    stripe.add_object(Some(ACCT), pi_at("pi_Conn", "succeeded", t0));
    stripe.add_session(
        Some(ACCT),
        checkout_session("cs_test_Conn", "complete", "paid", Some("pi_Conn"), t0),
    );
    for mode in [ReadMode::Retrieve, ReadMode::List] {
        forget_scan_state(&pool).await;
        let before = stripe.seen().len();
        run(&pool, &stripe, &session_settings(mode)).await;
        assert_eq!(
            open_findings(&pool).await,
            [(
                id,
                "missed_success".into(),
                Some("cs_test_Conn".into()),
                Some("pi_Conn".into())
            )],
            "{mode:?}"
        );
        let seen = &stripe.seen()[before..];
        assert!(!seen.is_empty());
        assert!(
            seen.iter().all(|s| s.account.as_deref() == Some(ACCT)),
            "{mode:?}: {seen:#?}"
        );
        let account: Option<String> = sqlx::query_scalar(
            "SELECT payload->>'stripe_account_id' FROM outbox ORDER BY id DESC LIMIT 1",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(account.as_deref(), Some(ACCT));
    }
}
