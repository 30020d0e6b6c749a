//! Aging findings (docs/findings.md, "Finding kinds"): `authorization_expiring`,
//! `stuck_processing` and `abandoned`, counted from the PaymentIntent's
//! `created` (Stripe's clock), recorded with a deadline, resolved when the
//! PaymentIntent moves on; and their three variables.

use crate::support::arrange::{self, PaymentBuilder};
use crate::support::stripe_fake::StripeFake;
use crate::support::*;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::PgPool;
use stripe_reconciler::config::Settings;
use stripe_reconciler::reconcile::{Rules, Verdict};

const DAY: i64 = 24 * 3600;

/// A payment `local` here whose PaymentIntent is in `stripe`, created `days` ago.
fn aged(pi: &str, local: &str, stripe: &str, days: i64) -> PaymentBuilder {
    arrange::payment(pi)
        .local(local)
        .stripe(stripe)
        .created_secs_ago(days * DAY)
}

/// A succeeded PaymentIntent with its captured, untouched charge.
fn captured(id: &str, created: i64) -> Value {
    let mut pi = payment_intent(id, "succeeded");
    pi["created"] = json!(created);
    pi["amount_received"] = json!(1099);
    pi["latest_charge"] = json!({
        "id": "ch_3Captured", "object": "charge", "amount": 1099, "amount_captured": 1099,
        "amount_refunded": 0, "captured": true, "currency": "usd", "disputed": false,
        "paid": true, "payment_intent": id, "refunded": false, "status": "succeeded",
        "balance_transaction": "txn_3Captured", "created": created + 60, "livemode": false,
        "metadata": {}, "outcome": {"network_status": "approved_by_network", "type": "authorized"}
    });
    pi
}

fn rfc3339(ts: i64) -> String {
    DateTime::<Utc>::from_timestamp(ts, 0).unwrap().to_rfc3339()
}

fn with_abandoned_after(days: i64) -> Settings {
    Settings {
        rules: Rules {
            abandoned_after_seconds: Some(days * DAY),
            ..Rules::default()
        },
        ..settings(200)
    }
}

/// Unprocessed repair commands of the payment.
async fn live_commands(pool: &PgPool, payment: i64) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT event_type FROM outbox
          WHERE event_type LIKE 'Apply%' AND processed_at IS NULL
            AND (payload->>'payment_id')::bigint = $1
          ORDER BY id",
    )
    .bind(payment)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn aging_findings_carry_a_deadline_and_clear_when_the_payment_intent_moves_on(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let manual = json!("manual");
    let sepa_debit = json!(["sepa_debit"]);
    let held = aged("pi_HeldSixDays", "pending", "requires_capture", 6)
        .field("capture_method", manual.clone())
        .field("amount_capturable", json!(1099))
        .insert(&pool, &stripe)
        .await;
    // The row is 30 days old (insert_payment) but its PaymentIntent is an
    // hour old: the clock is Stripe's `created`, not the row's.
    let held_fresh = arrange::payment("pi_HeldOneHour")
        .local("pending")
        .stripe("requires_capture")
        .field("capture_method", manual)
        .insert(&pool, &stripe)
        .await;
    let debit = aged("pi_SepaDebit", "pending", "processing", 15)
        .field("payment_method_types", sepa_debit.clone())
        .field("processing", json!({"type": "sepa_debit"}))
        .insert(&pool, &stripe)
        .await;
    let left = aged("pi_CartLeft", "pending", "requires_payment_method", 20)
        .insert(&pool, &stripe)
        .await;
    let early = aged("pi_ShippedEarly", "paid", "processing", 15)
        .field("payment_method_types", sepa_debit)
        .insert(&pool, &stripe)
        .await;
    let (auth, fresh, sepa, gone, shipped) = (held.id, held_fresh.id, debit.id, left.id, early.id);
    let (held, held_fresh, debit, left, early) = (
        held.object,
        held_fresh.object,
        debit.object,
        left.object,
        early.object,
    );
    let settings = with_abandoned_after(7);

    let report = scan(&pool, &stripe, &settings).await;

    assert_eq!(report.verdicts.get(Verdict::NeedsReview), 4);
    assert_eq!(report.verdicts.get(Verdict::InFlight), 1, "the fresh hold");
    assert_eq!((report.findings_created, report.commands_enqueued), (4, 0));
    let created = |pi: &Value| pi["created"].as_i64().unwrap();

    let f = findings_of(&pool, auth).await;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        (f[0].kind.as_str(), f[0].open),
        ("authorization_expiring", true)
    );
    let d = f[0].details.clone().unwrap();
    assert_eq!(d["created"], json!(rfc3339(created(&held))), "{d}");
    assert_eq!(
        d["deadline"],
        json!(rfc3339(created(&held) + 7 * DAY)),
        "the authorisation lapses 7 days after created: {d}"
    );
    assert_eq!(d["capture_method"], "manual", "{d}");

    assert!(findings_of(&pool, fresh).await.is_empty());

    let f = findings_of(&pool, sepa).await;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, "stuck_processing");
    let d = f[0].details.clone().unwrap();
    assert_eq!(
        d["deadline"],
        json!(rfc3339(created(&debit) + 14 * DAY)),
        "{d}"
    );
    assert_eq!(d["payment_method_types"], json!(["sepa_debit"]), "{d}");

    let f = findings_of(&pool, gone).await;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, "abandoned");
    let d = f[0].details.clone().unwrap();
    assert_eq!(
        d["deadline"],
        json!(rfc3339(created(&left) + 7 * DAY)),
        "{d}"
    );

    let f = findings_of(&pool, shipped).await;
    assert_eq!(
        f.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(),
        ["paid_locally_not_externally"],
        "a paid row in processing gets no aging finding beside it"
    );

    // Each PaymentIntent leaves its state: the hold was captured, the debit
    // went through, the cart's PaymentIntent was canceled and the webhook
    // marked the row failed meanwhile.
    mount_pi(&stripe, &captured("pi_HeldSixDays", created(&held))).await;
    mount_pi(&stripe, &held_fresh).await;
    mount_pi(&stripe, &captured("pi_SepaDebit", created(&debit))).await;
    let mut canceled = left.clone();
    canceled["status"] = json!("canceled");
    canceled["cancellation_reason"] = json!("abandoned");
    mount_pi(&stripe, &canceled).await;
    mount_pi(&stripe, &early).await;
    sqlx::query(
        "UPDATE payments SET status = 'failed', version = version + 1,
                updated_at = now() - interval '1 hour' WHERE id = $1",
    )
    .bind(gone)
    .execute(&pool)
    .await
    .unwrap();

    let report = rescan(&pool, &stripe, &settings).await;

    assert_eq!(report.findings_cleared, 3, "{report:?}");
    let outcome = |f: &[Finding]| -> Vec<(String, bool, Option<String>)> {
        f.iter()
            .map(|f| (f.kind.clone(), f.open, f.resolution.clone()))
            .collect()
    };
    assert_eq!(
        outcome(&findings_of(&pool, auth).await),
        [
            (
                "authorization_expiring".into(),
                false,
                Some("superseded".into())
            ),
            ("missed_success".into(), true, None)
        ]
    );
    assert_eq!(
        live_commands(&pool, auth).await,
        ["ApplyPaymentSucceeded"],
        "the captured one is repaired now that nothing blocks it"
    );
    assert_eq!(
        outcome(&findings_of(&pool, sepa).await),
        [
            ("stuck_processing".into(), false, Some("superseded".into())),
            ("missed_success".into(), true, None)
        ]
    );
    assert_eq!(live_commands(&pool, sepa).await, ["ApplyPaymentSucceeded"]);
    assert_eq!(
        outcome(&findings_of(&pool, gone).await),
        [("abandoned".into(), false, Some("cleared".into()))]
    );
    assert!(live_commands(&pool, gone).await.is_empty());
    assert_eq!(
        findings_of(&pool, shipped).await.len(),
        1,
        "unchanged drift, same open finding"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn abandoned_is_off_by_default(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let p = aged(
        "pi_LongForgotten",
        "pending",
        "requires_payment_method",
        200,
    )
    .insert(&pool, &stripe)
    .await;
    let payment = p.id;

    let report = p.scan(&pool, &stripe).await;

    assert_eq!(report.verdicts.get(Verdict::InSync), 1);
    assert!(findings_of(&pool, payment).await.is_empty());
    // The same row with the rule on.
    let report = rescan(&pool, &stripe, &with_abandoned_after(7)).await;
    assert_eq!(report.findings_created, 1);
    assert_eq!(findings_of(&pool, payment).await[0].kind, "abandoned");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_aging_finding_resolved_by_hand_stays_resolved_while_nothing_changes(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let p = aged("pi_SlowDebit", "pending", "processing", 15)
        .field("payment_method_types", json!(["sepa_debit"]))
        .insert(&pool, &stripe)
        .await;
    let payment = p.id;
    p.scan(&pool, &stripe).await;
    let f = findings_of(&pool, payment).await;
    assert_eq!(f[0].kind, "stuck_processing");
    let mut conn = pool.acquire().await.unwrap();
    assert!(stripe_reconciler::store::findings::resolve_manually(
        &mut conn,
        f[0].id,
        "alice",
        "the customer's bank is slow; checked with them"
    )
    .await
    .unwrap());
    drop(conn);
    // The next scan is later (hourly in production): the same PaymentIntent,
    // the same state, the same deadline.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;

    rescan(&pool, &stripe, &settings(200)).await;

    let f = findings_of(&pool, payment).await;
    assert!(
        !f.iter().any(|f| f.open),
        "an acknowledged aging finding is reopened although nothing changed: {f:#?}"
    );
}

/// The three aging variables and the unverifiable streak, through the real
/// binary: a negative or non-numeric value exits 78 naming the variable; a
/// valid one gets past configuration (to a database that is not there: 1).
#[test]
fn aging_variables_are_validated_naming_the_variable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = [
        (
            "DATABASE_URL",
            format!("postgres://app@127.0.0.1:{port}/payments"),
        ),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
    ];
    let run = |vars: &[(&'static str, &str)]| {
        let mut env = base.to_vec();
        env.extend(vars.iter().map(|(k, v)| (*k, (*v).to_owned())));
        reconciler(&["run"], &env).output().unwrap()
    };
    let vars = [
        "RECONCILER_AUTH_EXPIRY_WARN_SECONDS",
        "RECONCILER_PROCESSING_MAX_SECONDS",
        "RECONCILER_ABANDONED_AFTER_SECONDS",
        "RECONCILER_UNVERIFIABLE_CYCLES",
    ];
    for var in vars {
        for bad in ["-1", "five days", "1.5"] {
            let out = run(&[(var, bad)]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(78), "{var}={bad}: {stderr}");
            assert!(stderr.contains(var), "{var}={bad}: {stderr}");
        }
    }
    // Valid values (0 turns `abandoned` off) get past the configuration, to
    // a database that is not there (exit 1 after the pool's 10 s timeout).
    let out = run(&[
        (vars[0], "432000"),
        (vars[1], "1209600"),
        (vars[2], "0"),
        (vars[3], "3"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot connect to PostgreSQL"), "{stderr}");
}
