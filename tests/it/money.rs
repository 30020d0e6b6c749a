//! Money beats status (DESIGN.md "Beyond status"): the latest charge read in
//! the same request, refunds, disputes, duplicates and amount/currency
//! mismatches recorded as findings that block every repair of their payment,
//! on a real PostgreSQL with Stripe faked by wiremock.

use crate::support::*;
use serde_json::{json, Value};
use sqlx::PgPool;
use stripe_reconciler::config::{ColumnName, JobSettings};
use stripe_reconciler::reconcile::{Charge, ChargeFacts, Verdict};
use stripe_reconciler::repair::RepairReport;
use stripe_reconciler::scan::{run_batch, Mode};
use stripe_reconciler::stripe::PaymentIntentId;
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// A Stripe Charge object as `expand[]=latest_charge` returns it (API version
/// 2024-06-20), captured in full, `amount_refunded` of it refunded.
fn charge(id: &str, pi: &str, amount: i64, amount_refunded: i64, disputed: bool) -> Value {
    json!({
        "id": id,
        "object": "charge",
        "amount": amount,
        "amount_captured": amount,
        "amount_refunded": amount_refunded,
        "application": null,
        "application_fee": null,
        "application_fee_amount": null,
        "balance_transaction": "txn_3MmlLrLkdIwHu7ix0uke3Ezy",
        "billing_details": {
            "address": {"city": null, "country": null, "line1": null, "line2": null,
                        "postal_code": null, "state": null},
            "email": null, "name": null, "phone": null
        },
        "calculated_statement_descriptor": "Stripe",
        "captured": true,
        "created": chrono::Utc::now().timestamp() - 3500,
        "currency": "usd",
        "customer": null,
        "description": null,
        "disputed": disputed,
        "failure_balance_transaction": null,
        "failure_code": null,
        "failure_message": null,
        "fraud_details": {},
        "livemode": false,
        "metadata": {},
        "on_behalf_of": null,
        "outcome": {
            "network_status": "approved_by_network", "reason": null, "risk_level": "normal",
            "risk_score": 32, "seller_message": "Payment complete.", "type": "authorized"
        },
        "paid": true,
        "payment_intent": pi,
        "payment_method": "pm_1MmlLrLkdIwHu7ixIJwEWSNR",
        "payment_method_details": {
            "card": {"brand": "visa", "country": "US", "exp_month": 3, "exp_year": 2030,
                     "funding": "credit", "last4": "4242", "network": "visa"},
            "type": "card"
        },
        "receipt_email": null,
        "receipt_url": "https://pay.stripe.com/receipts/payment/CAcaFwoVYWNjdF8xTTJKVGtMa2RJd0h1N2l4KOvG06AGMgZfBXyr1aw6LBa9vaaSRWU96d8qBwz9z2J_CObiV_H2-e8RezSK_sw0KISesp4czsOUlVKY",
        "refunded": amount_refunded >= amount,
        "review": null,
        "shipping": null,
        "source_transfer": null,
        "statement_descriptor": null,
        "statement_descriptor_suffix": null,
        "status": "succeeded",
        "transfer_data": null,
        "transfer_group": null
    })
}

/// The fixture PaymentIntent ($10.99, usd) with `latest_charge` set.
fn intent(id: &str, status: &str, latest_charge: Value) -> Value {
    let mut pi = payment_intent(id, status);
    if status == "succeeded" {
        pi["amount_received"] = pi["amount"].clone();
    }
    pi["latest_charge"] = latest_charge;
    pi
}

/// A succeeded PaymentIntent whose charge nothing happened to.
fn clean(id: &str) -> Value {
    intent(id, "succeeded", charge("ch_3Clean", id, 1099, 0, false))
}

fn answer(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("Request-Id", "req_money")
        .set_body_json(body)
}

/// `payment_id` of every `PaymentStatusChanged` event, in order.
async fn status_events(pool: &PgPool) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT (payload->>'payment_id')::bigint FROM outbox
          WHERE event_type = 'PaymentStatusChanged' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// `(payment_id, event_type, processed, last_error)` of every repair command.
async fn commands(pool: &PgPool) -> Vec<(i64, String, bool, Option<String>)> {
    sqlx::query_as(
        "SELECT (payload->>'payment_id')::bigint, event_type, processed_at IS NOT NULL, last_error
           FROM outbox WHERE event_type LIKE 'Apply%' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

// (1) Every shape of `latest_charge`, through the real gateway.

#[tokio::test]
async fn latest_charge_is_read_in_every_shape_stripe_sends() {
    let stripe = MockServer::start().await;
    let known = |amount_refunded, refunded, disputed| {
        ChargeFacts::Known(Charge {
            amount: Some(1099),
            amount_captured: Some(1099),
            amount_refunded: Some(amount_refunded),
            refunded: Some(refunded),
            disputed: Some(disputed),
        })
    };
    let mut legacy = intent("pi_Legacy", "succeeded", Value::Null);
    legacy.as_object_mut().unwrap().remove("latest_charge");
    legacy["charges"] = json!({
        "object": "list",
        "data": [charge("ch_3Legacy", "pi_Legacy", 1099, 0, true)],
        "has_more": false,
        "total_count": 1,
        "url": "/v1/charges?payment_intent=pi_Legacy"
    });
    let mut legacy_empty = intent("pi_LegacyEmpty", "requires_payment_method", Value::Null);
    legacy_empty
        .as_object_mut()
        .unwrap()
        .remove("latest_charge");
    legacy_empty["charges"] = json!({
        "object": "list", "data": [], "has_more": false, "total_count": 0,
        "url": "/v1/charges?payment_intent=pi_LegacyEmpty"
    });
    let mut absent = intent("pi_Absent", "succeeded", Value::Null);
    absent.as_object_mut().unwrap().remove("latest_charge");
    let cases = [
        (
            intent("pi_NoCharge", "requires_payment_method", Value::Null),
            ChargeFacts::None,
        ),
        (
            intent("pi_BareId", "succeeded", json!("ch_123")),
            ChargeFacts::NotExpanded,
        ),
        (
            intent(
                "pi_Expanded",
                "succeeded",
                charge("ch_3Expanded", "pi_Expanded", 1099, 500, false),
            ),
            known(500, false, false),
        ),
        (legacy, known(0, false, true)),
        (legacy_empty, ChargeFacts::None),
        (absent, ChargeFacts::NotExpanded),
    ];
    for (body, _) in &cases {
        let id = body["id"].as_str().unwrap();
        // Answers only a request that asks for the charge: a read without
        // `expand[]=latest_charge` gets wiremock's bare 404 and fails.
        Mock::given(method("GET"))
            .and(path(format!("/v1/payment_intents/{id}")))
            .and(query_param("expand[]", "latest_charge"))
            .respond_with(answer(body.clone()))
            .expect(1)
            .mount(&stripe)
            .await;
    }
    let gateway = gateway(&stripe);

    for (body, expected) in &cases {
        let id = body["id"].as_str().unwrap();
        let facts = gateway
            .payment_intent(&PaymentIntentId::parse(id).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(&facts.charge, expected, "{id}");
        assert_eq!(facts.amount, Some(1099), "{id}");
        assert_eq!(facts.currency.as_deref(), Some("usd"), "{id}");
        assert_eq!(
            facts.created.map(|c| c.timestamp()),
            body["created"].as_i64(),
            "{id}"
        );
    }
    let received = stripe.received_requests().await.unwrap();
    assert_eq!(received.len(), cases.len());
    for r in &received {
        let expand: Vec<String> = r
            .url
            .query_pairs()
            .filter(|(k, _)| k == "expand[]")
            .map(|(_, v)| v.into_owned())
            .collect();
        assert_eq!(expand, ["latest_charge"], "{}", r.url);
    }
}

// (2) Scan, then repair, end to end.

#[sqlx::test(migrations = false)]
async fn refunds_disputes_and_duplicates_are_reported_and_never_repaired(pool: PgPool) {
    payments_without_unique(&pool).await;
    let stripe = MockServer::start().await;
    let refunded = insert_payment(&pool, "pi_Refunded", "pending", 3600).await;
    let disputed = insert_payment(&pool, "pi_Disputed", "pending", 3600).await;
    let dup_a = insert_payment(&pool, "pi_Shared", "pending", 3600).await;
    let dup_b = insert_payment(&pool, "pi_Shared", "pending", 3600).await;
    let clean_id = insert_payment(&pool, "pi_Clean", "pending", 3600).await;
    mount_pi(
        &stripe,
        &intent(
            "pi_Refunded",
            "succeeded",
            charge("ch_3Refunded", "pi_Refunded", 1099, 1099, false),
        ),
    )
    .await;
    mount_pi(
        &stripe,
        &intent(
            "pi_Disputed",
            "succeeded",
            charge("ch_3Disputed", "pi_Disputed", 1099, 0, true),
        ),
    )
    .await;
    mount_pi(&stripe, &clean("pi_Shared")).await;
    mount_pi(&stripe, &clean("pi_Clean")).await;

    let report = scan(&pool, &stripe, &settings(200)).await;

    assert_eq!(report.verdicts.get(Verdict::NeedsReview), 4);
    assert_eq!(report.verdicts.get(Verdict::Repairable), 1);
    assert_eq!((report.findings_created, report.commands_enqueued), (5, 1));
    let queued = commands(&pool).await;
    assert_eq!(
        queued,
        vec![(clean_id, "ApplyPaymentSucceeded".into(), false, None)],
        "a command only for the clean missed success"
    );

    let repaired = drain_all(&pool).await;

    assert_eq!(
        (repaired.applied, repaired.skipped, repaired.failed),
        (1, 0, 0)
    );
    for blocked in [refunded, disputed, dup_a, dup_b] {
        assert_eq!(status_of(&pool, blocked).await, ("pending".into(), 0));
    }
    assert_eq!(status_of(&pool, clean_id).await, ("paid".into(), 1));
    assert_eq!(
        status_events(&pool).await,
        vec![clean_id],
        "exactly one event"
    );

    let f = findings_of(&pool, refunded).await;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].kind.as_str(), f[0].open), ("refunded", true));
    let d = f[0].details.clone().unwrap();
    assert_eq!(
        (
            &d["amount"],
            &d["amount_refunded"],
            &d["currency"],
            &d["refund"]
        ),
        (&json!(1099), &json!(1099), &json!("usd"), &json!("full")),
        "{d}"
    );
    let f = findings_of(&pool, disputed).await;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].kind.as_str(), f[0].open), ("disputed", true));
    assert_eq!(f[0].details.as_ref().unwrap()["amount"], 1099);
    for dup in [dup_a, dup_b] {
        let f = findings_of(&pool, dup).await;
        assert_eq!(f.len(), 1, "one finding per row sharing the id: {f:?}");
        assert_eq!(
            (f[0].kind.as_str(), f[0].open),
            ("duplicate_payment_intent", true)
        );
    }
    let f = findings_of(&pool, clean_id).await;
    assert_eq!(
        (f[0].kind.as_str(), f[0].resolution.as_deref()),
        ("missed_success", Some("repaired"))
    );

    // The next cycle sees the same money findings: nothing new, no command.
    sqlx::query("UPDATE payments SET updated_at = now() - interval '1 hour'")
        .execute(&pool)
        .await
        .unwrap();
    let again = rescan(&pool, &stripe, &settings(200)).await;
    assert_eq!((again.findings_created, again.commands_enqueued), (0, 0));
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE resolved_at IS NULL"
        )
        .await,
        4
    );
    assert_eq!(drain_all(&pool).await.applied, 0);
    assert_eq!(status_events(&pool).await, vec![clean_id]);
}

// (3) A command enqueued before the refund was seen.

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_worker_skips_a_command_whose_payment_got_a_refund_finding(pool: PgPool) {
    let stripe = MockServer::start().await;
    let payment = insert_payment(&pool, "pi_LateRefund", "pending", 3600).await;
    mount_pi(&stripe, &clean("pi_LateRefund")).await;
    let report = scan(&pool, &stripe, &settings(200)).await;
    assert_eq!(report.commands_enqueued, 1);
    // Seen by another path (a person, a webhook handler) before the worker ran.
    sqlx::query(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status, details)
         VALUES ($1, 'refunded', 'pending', 'succeeded', '{\"amount\": 1099, \"amount_refunded\": 1099}')",
    )
    .bind(payment)
    .execute(&pool)
    .await
    .unwrap();

    let repaired = drain_all(&pool).await;

    assert_eq!(
        (repaired.applied, repaired.skipped, repaired.failed),
        (0, 1, 0)
    );
    assert_eq!(status_of(&pool, payment).await, ("pending".into(), 0));
    assert!(status_events(&pool).await.is_empty());
    let queued = commands(&pool).await;
    assert_eq!(queued.len(), 1);
    let (_, _, processed, last_error) = &queued[0];
    assert!(processed, "closed, not left for a retry: {queued:?}");
    assert!(
        last_error
            .as_deref()
            .unwrap_or("")
            .contains("blocks repairs"),
        "{queued:?}"
    );
    assert_eq!(drain_all(&pool).await, RepairReport::default());
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_rescan_that_sees_the_refund_closes_the_earlier_command(pool: PgPool) {
    let stripe = MockServer::start().await;
    let payment = insert_payment(&pool, "pi_LateRefund", "pending", 3600).await;
    mount_pi(&stripe, &clean("pi_LateRefund")).await;
    assert_eq!(
        scan(&pool, &stripe, &settings(200)).await.commands_enqueued,
        1
    );
    // Refunded in full before the worker ran.
    stripe.reset().await;
    mount_pi(
        &stripe,
        &intent(
            "pi_LateRefund",
            "succeeded",
            charge("ch_3Late", "pi_LateRefund", 1099, 1099, false),
        ),
    )
    .await;

    let report = rescan(&pool, &stripe, &settings(200)).await;

    assert_eq!(
        (
            report.findings_created,
            report.findings_cleared,
            report.commands_enqueued
        ),
        (1, 1, 0)
    );
    let f = findings_of(&pool, payment).await;
    let kinds: Vec<(&str, bool, Option<&str>)> = f
        .iter()
        .map(|f| (f.kind.as_str(), f.open, f.resolution.as_deref()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("missed_success", false, Some("superseded")),
            ("refunded", true, None)
        ]
    );
    let queued = commands(&pool).await;
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert!(queued[0].2, "the superseded finding's command is closed");
    assert!(queued[0].3.is_some(), "with a reason: {queued:?}");

    let repaired = drain_all(&pool).await;
    assert_eq!(repaired.applied, 0);
    assert_eq!(status_of(&pool, payment).await, ("pending".into(), 0));
    assert!(status_events(&pool).await.is_empty());
}

// (4) A stale command: the payment now holds another PaymentIntent.

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_command_for_a_payment_intent_the_payment_no_longer_holds_is_skipped(pool: PgPool) {
    let stripe = MockServer::start().await;
    let payment = insert_payment(&pool, "pi_FirstAttempt", "pending", 3600).await;
    mount_pi(&stripe, &clean("pi_FirstAttempt")).await;
    assert_eq!(
        scan(&pool, &stripe, &settings(200)).await.commands_enqueued,
        1
    );
    // The application retried the checkout with a new PaymentIntent.
    sqlx::query("UPDATE payments SET stripe_payment_intent_id = 'pi_SecondAttempt' WHERE id = $1")
        .bind(payment)
        .execute(&pool)
        .await
        .unwrap();

    let repaired = drain_all(&pool).await;

    assert_eq!(
        (repaired.applied, repaired.skipped, repaired.failed),
        (0, 1, 0)
    );
    let (status, version, intent): (String, i64, String) = sqlx::query_as(
        "SELECT status, version, stripe_payment_intent_id FROM payments WHERE id = $1",
    )
    .bind(payment)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (status.as_str(), version, intent.as_str()),
        ("pending", 0, "pi_SecondAttempt"),
        "payment untouched"
    );
    assert!(status_events(&pool).await.is_empty());
    let queued = commands(&pool).await;
    assert!(queued[0].2, "{queued:?}");
    assert!(
        queued[0]
            .3
            .as_deref()
            .unwrap_or("")
            .contains("pi_FirstAttempt"),
        "{queued:?}"
    );
    let f = findings_of(&pool, payment).await;
    assert!(
        !f[0].open,
        "the finding about the old PaymentIntent is closed"
    );
}

// (6) Amount and currency columns.

async fn add_money_columns(pool: &PgPool) {
    sqlx::raw_sql("ALTER TABLE payments ADD COLUMN amount_cents bigint, ADD COLUMN currency text")
        .execute(pool)
        .await
        .unwrap();
}

async fn set_money(pool: &PgPool, payment: i64, amount: Option<i64>, currency: Option<&str>) {
    sqlx::query("UPDATE payments SET amount_cents = $2, currency = $3 WHERE id = $1")
        .bind(payment)
        .bind(amount)
        .bind(currency)
        .execute(pool)
        .await
        .unwrap();
}

fn with_columns(amount: &str, currency: &str) -> JobSettings {
    JobSettings {
        amount_column: Some(ColumnName::parse("RECONCILER_AMOUNT_COLUMN", amount).unwrap()),
        currency_column: Some(ColumnName::parse("RECONCILER_CURRENCY_COLUMN", currency).unwrap()),
        ..settings(200)
    }
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn configured_amount_and_currency_columns_are_compared(pool: PgPool) {
    add_money_columns(&pool).await;
    let stripe = MockServer::start().await;
    let yen = insert_payment(&pool, "pi_Yen", "pending", 3600).await;
    let euro = insert_payment(&pool, "pi_Euro", "pending", 3600).await;
    let upper = insert_payment(&pool, "pi_Upper", "pending", 3600).await;
    let unknown = insert_payment(&pool, "pi_NoAmount", "pending", 3600).await;
    set_money(&pool, yen, Some(1000), Some("JPY")).await;
    set_money(&pool, euro, Some(1099), Some("eur")).await;
    set_money(&pool, upper, Some(1099), Some("USD")).await;
    set_money(&pool, unknown, None, None).await;
    let mut jpy = intent("pi_Yen", "succeeded", Value::Null);
    jpy["amount"] = json!(100_000);
    jpy["amount_received"] = json!(100_000);
    jpy["currency"] = json!("jpy");
    let mut jpy_charge = charge("ch_3Yen", "pi_Yen", 100_000, 0, false);
    jpy_charge["currency"] = json!("jpy");
    jpy["latest_charge"] = jpy_charge;
    mount_pi(&stripe, &jpy).await;
    mount_pi(&stripe, &clean("pi_Euro")).await;
    mount_pi(&stripe, &clean("pi_Upper")).await;
    mount_pi(&stripe, &clean("pi_NoAmount")).await;

    let report = scan(&pool, &stripe, &with_columns("amount_cents", "currency")).await;

    assert_eq!(report.verdicts.get(Verdict::NeedsReview), 2);
    assert_eq!(report.verdicts.get(Verdict::Repairable), 2);
    let f = findings_of(&pool, yen).await;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, "amount_mismatch");
    let d = f[0].details.clone().unwrap();
    assert_eq!(
        (&d["local_amount"], &d["stripe_amount"], &d["currency"]),
        (&json!(1000), &json!(100_000), &json!("jpy")),
        "{d}"
    );
    let f = findings_of(&pool, euro).await;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, "currency_mismatch");
    let d = f[0].details.clone().unwrap();
    assert_eq!(
        (&d["local_currency"], &d["stripe_currency"]),
        (&json!("eur"), &json!("usd")),
        "{d}"
    );
    for in_step in [upper, unknown] {
        let f = findings_of(&pool, in_step).await;
        assert_eq!(
            f.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(),
            ["missed_success"],
            "USD is usd, NULL is not compared"
        );
    }
    let queued: Vec<i64> = commands(&pool).await.into_iter().map(|c| c.0).collect();
    assert_eq!(queued, vec![upper, unknown], "no command for a mismatch");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn without_configured_columns_amounts_are_not_compared(pool: PgPool) {
    add_money_columns(&pool).await;
    let stripe = MockServer::start().await;
    let payment = insert_payment(&pool, "pi_Unchecked", "pending", 3600).await;
    set_money(&pool, payment, Some(5), Some("eur")).await;
    mount_pi(&stripe, &clean("pi_Unchecked")).await;

    let report = scan(&pool, &stripe, &settings(200)).await;

    assert_eq!(report.commands_enqueued, 1);
    let f = findings_of(&pool, payment).await;
    assert_eq!(
        f.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(),
        ["missed_success"]
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_money_column_payments_cannot_provide_exits_78_naming_the_variable(pool: PgPool) {
    add_money_columns(&pool).await;
    let payment = insert_payment(&pool, "pi_Configured", "pending", 3600).await;
    set_money(&pool, payment, Some(1099), Some("usd")).await;
    let stripe = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(|r: &Request| answer(clean(r.url.path().rsplit('/').next().unwrap())))
        .mount(&stripe)
        .await;
    let env = |var: &'static str, value: &str| {
        vec![
            ("DATABASE_URL", database_url(&pool)),
            ("STRIPE_API_KEY", API_KEY.to_owned()),
            ("STRIPE_API_BASE", stripe.uri()),
            (var, value.to_owned()),
        ]
    };

    for (var, value) in [
        ("RECONCILER_AMOUNT_COLUMN", "nonexistent"),
        ("RECONCILER_AMOUNT_COLUMN", "currency"),
        ("RECONCILER_CURRENCY_COLUMN", "amount_cents"),
        ("RECONCILER_CURRENCY_COLUMN", "Currency"),
    ] {
        let out = reconciler_output(&["run"], &env(var, value)).await;
        assert_eq!(
            out.status.code(),
            Some(78),
            "{var}={value}: {}",
            all_output(&out)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(var),
            "{var}={value}: {}",
            all_output(&out)
        );
    }
    assert_eq!(requests(&stripe).await, 0, "no read before the check");
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );

    // The same run with usable columns goes through.
    let mut ok_env = env("RECONCILER_AMOUNT_COLUMN", "amount_cents");
    ok_env.push(("RECONCILER_CURRENCY_COLUMN", "currency".to_owned()));
    let out = reconciler_output(&["run"], &ok_env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(
        findings_of(&pool, payment)
            .await
            .iter()
            .map(|f| f.kind.as_str())
            .collect::<Vec<_>>(),
        ["missed_success"]
    );
}

// Beyond the brief: an unexpanded charge, and an acknowledged refund.

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_unexpanded_charge_is_unverifiable_never_repaired(pool: PgPool) {
    let stripe = MockServer::start().await;
    let payment = insert_payment(&pool, "pi_Stripped", "pending", 3600).await;
    // A proxy that drops `expand[]`: the charge comes back as a bare id.
    mount_pi(
        &stripe,
        &intent("pi_Stripped", "succeeded", json!("ch_3Stripped")),
    )
    .await;
    let settings = JobSettings {
        unverifiable_cycles: 1,
        ..settings(200)
    };

    let report = scan(&pool, &stripe, &settings).await;

    assert_eq!(report.verdicts.get(Verdict::Unverifiable), 1);
    assert_eq!(report.commands_enqueued, 0);
    assert_eq!(
        verified(&pool, payment).await,
        (None, false),
        "not stamped as confirmed with Stripe"
    );
    let f = findings_of(&pool, payment).await;
    let mut kinds: Vec<&str> = f.iter().map(|f| f.kind.as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        ["missed_success", "persistently_unverifiable"],
        "the missed success is shown while the money is unproven"
    );
    let stuck = f
        .iter()
        .find(|f| f.kind == "persistently_unverifiable")
        .unwrap();
    let last_error = stuck.details.as_ref().unwrap()["last_error"].to_string();
    assert!(last_error.contains("expanded"), "{last_error}");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_refunded_charge_without_disputed_is_refunded(pool: PgPool) {
    let stripe = MockServer::start().await;
    let payment = insert_payment(&pool, "pi_Trimmed", "paid", 3600).await;
    let mut trimmed = charge("ch_3Trimmed", "pi_Trimmed", 1099, 300, false);
    trimmed.as_object_mut().unwrap().remove("disputed");
    mount_pi(&stripe, &intent("pi_Trimmed", "succeeded", trimmed)).await;

    let report = scan(&pool, &stripe, &settings(200)).await;

    assert_eq!(report.verdicts.get(Verdict::NeedsReview), 1);
    let f = findings_of(&pool, payment).await;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].kind.as_str(), f[0].open), ("refunded", true));
    assert_eq!(f[0].details.as_ref().unwrap()["amount_refunded"], 300);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_missed_success_waits_for_its_money_then_gets_its_repair(pool: PgPool) {
    let stripe = MockServer::start().await;
    let payment = insert_payment(&pool, "pi_Unproven", "pending", 3600).await;
    let mut trimmed = charge("ch_3Unproven", "pi_Unproven", 1099, 0, false);
    trimmed.as_object_mut().unwrap().remove("disputed");
    mount_pi(&stripe, &intent("pi_Unproven", "succeeded", trimmed)).await;

    let report = scan(&pool, &stripe, &settings(200)).await;

    assert_eq!(report.commands_enqueued, 0);
    assert!(commands(&pool).await.is_empty(), "no repair while unproven");
    assert_eq!(verified(&pool, payment).await, (None, false), "not stamped");
    let f = findings_of(&pool, payment).await;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].kind.as_str(), f[0].open), ("missed_success", true));
    let why = f[0].details.as_ref().unwrap()["money_unproven"].clone();
    assert!(
        why.as_str().is_some_and(|w| w.contains("disputed")),
        "{why}"
    );

    // A later read shows the whole charge: the money is proven kept.
    stripe.reset().await;
    mount_pi(&stripe, &clean("pi_Unproven")).await;
    let report = rescan(&pool, &stripe, &settings(200)).await;

    assert_eq!(report.commands_enqueued, 1);
    assert_eq!(
        commands(&pool).await,
        [(payment, "ApplyPaymentSucceeded".to_owned(), false, None)]
    );
    let f = findings_of(&pool, payment).await;
    assert_eq!(f.len(), 1, "the same finding, now repairable: {f:?}");
    assert!(f[0].open);
    assert!(f[0]
        .details
        .as_ref()
        .map_or(true, |d| d.get("money_unproven").is_none()));
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_acknowledged_partial_refund_does_not_hide_the_payment_from_review(pool: PgPool) {
    let stripe = MockServer::start().await;
    let payment = insert_payment(&pool, "pi_Goodwill", "pending", 3600).await;
    mount_pi(
        &stripe,
        &intent(
            "pi_Goodwill",
            "succeeded",
            charge("ch_3Goodwill", "pi_Goodwill", 1099, 200, false),
        ),
    )
    .await;
    scan(&pool, &stripe, &settings(200)).await;
    let refund = findings_of(&pool, payment).await;
    assert_eq!(refund[0].kind, "refunded");
    // A person acknowledges the $2 goodwill refund.
    let mut conn = pool.acquire().await.unwrap();
    assert!(stripe_reconciler::store::findings::resolve_manually(
        &mut conn,
        refund[0].id,
        "alice",
        "goodwill refund agreed with the customer"
    )
    .await
    .unwrap());
    drop(conn);

    rescan(&pool, &stripe, &settings(200)).await;

    let f = findings_of(&pool, payment).await;
    // The payment is still pending here while Stripe kept the money: an
    // acknowledgement cannot hide that (it holds only for rows whose status
    // is in sync), so the refund finding opens again; it is never repaired.
    assert!(
        f.iter().any(|f| f.kind == "refunded" && f.open),
        "the refund of a pending payment stays in the queue: {f:?}"
    );
    assert!(
        !f.iter().any(|f| f.kind == "missed_success"),
        "no automatic repair after an acknowledged refund: {f:?}"
    );
    // Stripe kept $8.99 for a payment still pending here: that must stay
    // visible in the review queue (or be repaired), not vanish.
    assert!(
        f.iter().any(|f| f.open),
        "payment {payment} is pending while its PaymentIntent succeeded, and no finding is open: {f:?}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_partial_capture_is_not_a_refund(pool: PgPool) {
    let stripe = MockServer::start().await;
    let payment = insert_payment(&pool, "pi_PartCaptured", "pending", 3600).await;
    // Authorised $10.99 with manual capture, captured $8.00: Stripe releases
    // the other $2.99 as a refund of the uncaptured remainder (PaymentIntent
    // capture, `amount_to_capture`: "any additional amount is automatically
    // refunded"). The customer paid $8.00 and got nothing back.
    let mut pi = intent(
        "pi_PartCaptured",
        "succeeded",
        charge("ch_3Part", "pi_PartCaptured", 1099, 299, false),
    );
    pi["capture_method"] = json!("manual");
    pi["amount_received"] = json!(800);
    pi["latest_charge"]["amount_captured"] = json!(800);
    mount_pi(&stripe, &pi).await;

    scan(&pool, &stripe, &settings(200)).await;

    let f = findings_of(&pool, payment).await;
    assert_eq!(
        f.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(),
        ["missed_success"],
        "a partial capture is reported as a refund and blocks the repair: {f:?}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_dry_run_counts_only_the_findings_a_real_run_would_create(pool: PgPool) {
    let stripe = MockServer::start().await;
    let payment = insert_payment(&pool, "pi_Acknowledged", "paid", 3600).await;
    mount_pi(
        &stripe,
        &intent(
            "pi_Acknowledged",
            "succeeded",
            charge("ch_3Ack", "pi_Acknowledged", 1099, 100, false),
        ),
    )
    .await;
    scan(&pool, &stripe, &settings(200)).await;
    let refund = findings_of(&pool, payment).await;
    let mut conn = pool.acquire().await.unwrap();
    assert!(stripe_reconciler::store::findings::resolve_manually(
        &mut conn,
        refund[0].id,
        "alice",
        "$1 goodwill refund"
    )
    .await
    .unwrap());
    drop(conn);

    let dry = run_batch(
        &pool,
        &gateway(&stripe),
        &settings(200),
        Mode::DryRun { after_id: 0 },
        None,
    )
    .await
    .unwrap();
    let real = rescan(&pool, &stripe, &settings(200)).await;

    assert_eq!(real.findings_created, 0, "the acknowledgement holds");
    assert_eq!(
        dry.findings_created, real.findings_created,
        "a dry run predicts what the run writes"
    );
}

/// A 404 says nothing about the money: a dispute found earlier stays open
/// (and keeps blocking repairs) when Stripe later answers 404 for the row;
/// only an answer that shows the charge can clear it.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_404_never_clears_a_money_finding(pool: PgPool) {
    let stripe = MockServer::start().await;
    let payment = insert_payment(&pool, "pi_Disputed", "paid", 3600).await;
    let mut disputed = payment_intent("pi_Disputed", "succeeded");
    disputed["latest_charge"]["disputed"] = json!(true);
    mount(
        &stripe,
        "pi_Disputed",
        ResponseTemplate::new(200).set_body_json(disputed),
    )
    .await;
    let gw = gateway(&stripe);
    scan_with(&pool, &gw, &settings(200)).await.unwrap();
    let open_disputes = "SELECT count(*) FROM reconciliation_findings
                          WHERE payment_id = $1 AND kind = 'disputed' AND resolved_at IS NULL";
    assert_eq!(count_for(&pool, open_disputes, payment).await, 1);

    stripe.reset().await;
    mount(
        &stripe,
        "pi_Disputed",
        err(404, "invalid_request_error", "resource_missing"),
    )
    .await;
    rewind_cursor(&pool).await;
    scan_with(&pool, &gw, &settings(200)).await.unwrap();

    assert_eq!(
        count_for(&pool, open_disputes, payment).await,
        1,
        "the dispute stays open beside missing_externally"
    );
    assert_eq!(
        count_for(
            &pool,
            "SELECT count(*) FROM reconciliation_findings
              WHERE payment_id = $1 AND kind = 'missing_externally' AND resolved_at IS NULL",
            payment
        )
        .await,
        1
    );
}
