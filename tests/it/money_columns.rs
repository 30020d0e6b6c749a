//! The configured amount and currency columns (`RECONCILER_AMOUNT_COLUMN`,
//! `RECONCILER_CURRENCY_COLUMN`): compared with the PaymentIntent when set,
//! never when not, and a column `payments` cannot provide exits 78.

use super::money::commands;
use crate::support::arrange::{self, clean};
use crate::support::stripe_fake::StripeFake;
use crate::support::*;
use serde_json::{json, Value};
use sqlx::PgPool;
use stripe_reconciler::config::{ColumnName, Settings};
use stripe_reconciler::reconcile::Verdict;

// (6) Amount and currency columns.

pub(super) async fn add_money_columns(pool: &PgPool) {
    sqlx::raw_sql("ALTER TABLE payments ADD COLUMN amount_cents bigint, ADD COLUMN currency text")
        .execute(pool)
        .await
        .unwrap();
}

pub(super) async fn set_money(
    pool: &PgPool,
    payment: i64,
    amount: Option<i64>,
    currency: Option<&str>,
) {
    sqlx::query("UPDATE payments SET amount_cents = $2, currency = $3 WHERE id = $1")
        .bind(payment)
        .bind(amount)
        .bind(currency)
        .execute(pool)
        .await
        .unwrap();
}

fn with_columns(amount: &str, currency: &str) -> Settings {
    let mut s = settings(200);
    s.schema.amount_column = Some(ColumnName::parse("RECONCILER_AMOUNT_COLUMN", amount).unwrap());
    s.schema.currency_column =
        Some(ColumnName::parse("RECONCILER_CURRENCY_COLUMN", currency).unwrap());
    s
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn configured_amount_and_currency_columns_are_compared(pool: PgPool) {
    add_money_columns(&pool).await;
    let stripe = StripeFake::start().await;
    let pending = |pi: &str, amount: Value, currency: Value| {
        arrange::payment(pi)
            .local("pending")
            .columns(json!({"amount_cents": amount, "currency": currency}))
    };
    let yen = pending("pi_Yen", json!(1000), json!("JPY"))
        .charged(100_000, "jpy")
        .insert(&pool, &stripe)
        .await
        .id;
    let euro = pending("pi_Euro", json!(1099), json!("eur"))
        .insert(&pool, &stripe)
        .await
        .id;
    let upper = pending("pi_Upper", json!(1099), json!("USD"))
        .insert(&pool, &stripe)
        .await
        .id;
    let unknown = pending("pi_NoAmount", Value::Null, Value::Null)
        .insert(&pool, &stripe)
        .await
        .id;

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
    let stripe = StripeFake::start().await;
    let p = arrange::payment("pi_Unchecked")
        .local("pending")
        .columns(json!({"amount_cents": 5, "currency": "eur"}))
        .insert(&pool, &stripe)
        .await;
    let payment = p.id;

    let report = p.scan(&pool, &stripe).await;

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
    // Stripe as it is (list pages included), holding the row's PaymentIntent.
    let stripe = crate::support::stripe_fake::StripeFake::start().await;
    let mut object = clean("pi_Configured");
    object["created"] = json!(chrono::Utc::now().timestamp() - 30 * 86_400);
    stripe.add_object(None, object);
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
    stripe.assert_read_by_list(0);
    assert_eq!(
        findings_of(&pool, payment)
            .await
            .iter()
            .map(|f| f.kind.as_str())
            .collect::<Vec<_>>(),
        ["missed_success"]
    );
}
