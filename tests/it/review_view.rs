//! The view `reconciliation_review`, the stable interface for BI tools: its
//! columns, its `differs` (the same as the binary's), and the read-only BI
//! role of `sql/least_privilege.sql`.

use serde_json::{json, Value};
use sqlx::PgPool;

use crate::support::*;
use stripe_reconciler::reconcile::differs;

/// The columns, in order: added to, never renamed or removed (docs/review.md).
const COLUMNS: [&str; 22] = [
    "finding_id",
    "kind",
    "severity",
    "money_at_risk",
    "payment_key",
    "order_id",
    "payment_intent_id",
    "stripe_account_id",
    "local_status",
    "stripe_status",
    "differs",
    "details",
    "detected_at",
    "last_seen_at",
    "resolved_at",
    "resolution",
    "resolved_by",
    "resolution_note",
    "dashboard_url",
    // Checkout Sessions (docs/checkout-sessions.md), added at the end.
    "checkout_session_id",
    // Subscriptions (docs/subscriptions.md), added at the end.
    "subscription_key",
    "stripe_subscription_id",
];

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_view_has_its_columns_and_one_row_per_finding(pool: PgPool) {
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns
          WHERE table_name = 'reconciliation_review' ORDER BY ordinal_position",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(columns, COLUMNS);

    let p = insert_payment(&pool, "pi_View", "paid", 3600).await;
    sqlx::query(
        "INSERT INTO reconciliation_findings
                (payment_id, kind, local_status, external_status, details, stripe_account_id)
         VALUES ($1, 'amount_mismatch', 'paid', 'succeeded',
                 '{\"local_amount\": 2000, \"stripe_amount\": 1999, \"currency\": \"usd\"}', 'acct_1Abc'),
                ($1, 'missed_success', 'paid', 'succeeded', NULL, NULL)",
    )
    .bind(p)
    .execute(&pool)
    .await
    .unwrap();
    type Row = (
        String,
        String,
        bool,
        Option<String>,
        Option<String>,
        Option<String>,
        Value,
        Option<String>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT kind, severity, money_at_risk, payment_key, order_id, payment_intent_id, differs, dashboard_url
           FROM reconciliation_review ORDER BY finding_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let key = Some(p.to_string());
    assert_eq!(
        rows,
        [
            (
                "amount_mismatch".into(),
                "money_at_risk".into(),
                true,
                key.clone(),
                Some("order-pi_View".into()),
                Some("pi_View".into()),
                json!({"field": "amount", "local": "20.00 USD", "stripe": "19.99 USD"}),
                Some("https://dashboard.stripe.com/acct_1Abc/payments/pi_View".into()),
            ),
            (
                "missed_success".into(),
                "repairable".into(),
                false,
                key,
                Some("order-pi_View".into()),
                Some("pi_View".into()),
                json!({"field": "status", "local": "paid", "stripe": "succeeded"}),
                Some("https://dashboard.stripe.com/payments/pi_View".into()),
            ),
        ]
    );
    // The view's money kinds are the binary's, kind by kind.
    let q = insert_payment(&pool, "pi_Kinds", "paid", 3600).await;
    // Subscription kinds reach the view with the subscriptions migration.
    let payment_kinds = stripe_reconciler::reconcile::FindingKind::ALL
        .into_iter()
        .filter(|k| !k.is_subscription());
    for kind in payment_kinds {
        sqlx::query("INSERT INTO reconciliation_findings (payment_id, kind, local_status) VALUES ($1, $2, 'paid')")
            .bind(q)
            .bind(kind.as_str().as_ref())
            .execute(&pool)
            .await
            .unwrap();
        let money: bool = sqlx::query_scalar(
            "SELECT money_at_risk FROM reconciliation_review WHERE payment_key = $1 AND kind = $2",
        )
        .bind(q.to_string())
        .bind(kind.as_str().as_ref())
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(money, kind.is_money(), "{kind}");
    }
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_views_differs_is_the_binarys_for_every_kind(pool: PgPool) {
    let cases: Vec<(&str, &str, Option<&str>, Value)> = vec![
        (
            "amount_mismatch",
            "paid",
            Some("succeeded"),
            json!({"local_amount": 2000, "stripe_amount": 1999, "currency": "usd"}),
        ),
        (
            "amount_mismatch",
            "paid",
            Some("succeeded"),
            json!({"local_amount": -310, "stripe_amount": 5, "currency": " EUR "}),
        ),
        (
            "amount_mismatch",
            "paid",
            Some("succeeded"),
            json!({"local_amount_major": "12.345", "stripe_amount": 12345, "currency": "usd"}),
        ),
        (
            "amount_mismatch",
            "paid",
            Some("succeeded"),
            json!({"local_amount": 1000, "stripe_amount": 100000, "currency": "jpy"}),
        ),
        (
            "amount_mismatch",
            "paid",
            None,
            json!({"local_amount": 1000, "stripe_amount": 1000}),
        ),
        ("amount_mismatch", "paid", None, Value::Null),
        (
            "currency_mismatch",
            "paid",
            Some("succeeded"),
            json!({"local_currency": "eur", "stripe_currency": "usd"}),
        ),
        (
            "refunded",
            "paid",
            Some("succeeded"),
            json!({"amount": 500, "amount_refunded": 500, "currency": "usd"}),
        ),
        (
            "refunded",
            "paid",
            Some("succeeded"),
            json!({"amount_refunded": 1, "refund": "partial"}),
        ),
        (
            "refunded",
            "paid",
            Some("succeeded"),
            json!({"amount": 500, "amount_refunded": 1}),
        ),
        (
            "refunded",
            "paid",
            Some("succeeded"),
            json!({"amount_refunded": 7, "currency": "kwd"}),
        ),
        (
            "refunded_locally_not_externally",
            "refunded",
            Some("succeeded"),
            json!({"amount": 1099, "amount_refunded": 0, "currency": "usd"}),
        ),
        (
            "disputed",
            "paid",
            Some("succeeded"),
            json!({"amount": 1099, "currency": "usd"}),
        ),
        (
            "disputed",
            "paid",
            Some("succeeded"),
            json!({"currency": "usd"}),
        ),
        (
            "duplicate_payment_intent",
            "paid",
            Some("succeeded"),
            Value::Null,
        ),
        (
            "missing_locally",
            "none",
            Some("succeeded"),
            json!({"amount": 1099, "amount_received": 1000, "currency": "eur"}),
        ),
        ("missing_externally", "pending", None, json!({"hint": "x"})),
        ("invalid_payment_intent_id", "pending", None, Value::Null),
        (
            "persistently_unverifiable",
            "pending",
            None,
            json!({"last_error": "timeout", "cycles": 3}),
        ),
        (
            "write_refused",
            "pending",
            None,
            json!({"sqlstate": "23514", "message": "no", "observed_external_status": "succeeded"}),
        ),
        ("write_refused", "pending", None, json!({"message": "no"})),
        ("missed_success", "pending", Some("succeeded"), Value::Null),
        (
            "unexpected:failed->succeeded",
            "failed",
            Some("succeeded"),
            Value::Null,
        ),
        (
            "abandoned",
            "pending",
            Some("requires_payment_method"),
            json!({"deadline": "2026-01-01T00:00:00Z"}),
        ),
    ];
    for (kind, local, external, details) in cases {
        let details = (!details.is_null()).then_some(details);
        let sql: Value = sqlx::query_scalar("SELECT reconciliation_differs($1, $2, $3, $4)")
            .bind(kind)
            .bind(local)
            .bind(external)
            .bind(&details)
            .fetch_one(&pool)
            .await
            .unwrap();
        let rust = serde_json::to_value(differs(kind, local, external, details.as_ref())).unwrap();
        assert_eq!(sql, rust, "{kind} {details:?}");
    }
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_bi_role_reads_the_view_and_nothing_else(pool: PgPool) {
    let db = pool.connect_options().get_database().unwrap().to_owned();
    let suffix: String = db
        .chars()
        .rev()
        .take(20)
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let (job, bi) = (
        format!("reconciler_job_{suffix}"),
        format!("reconciler_bi_{suffix}"),
    );
    let grants = include_str!("../../sql/least_privilege.sql")
        .replace("stripe_reconciler_job", &job)
        .replace("stripe_reconciler_bi", &bi);
    sqlx::raw_sql(&grants).execute(&pool).await.unwrap();
    let p = insert_payment(&pool, "pi_Bi", "paid", 3600).await;
    sqlx::query("INSERT INTO reconciliation_findings (payment_id, kind, local_status) VALUES ($1, 'disputed', 'paid')")
        .bind(p)
        .execute(&pool)
        .await
        .unwrap();
    let mut url = url::Url::parse(&database_url(&pool)).unwrap();
    url.set_username(&bi).unwrap();
    let as_bi = sqlx::PgPool::connect(url.as_str()).await.unwrap();
    let seen: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT kind, order_id FROM reconciliation_review")
            .fetch_all(&as_bi)
            .await
            .unwrap();
    assert_eq!(
        seen,
        [("disputed".to_owned(), Some("order-pi_Bi".to_owned()))]
    );
    for table in [
        "payments",
        "reconciliation_findings",
        "reconciliation_findings_history",
        "outbox",
    ] {
        let refused = sqlx::query(&format!("SELECT 1 FROM {table} LIMIT 1"))
            .execute(&as_bi)
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains("permission denied"),
            "{table}: {refused}"
        );
    }
    as_bi.close().await;
    for role in [&job, &bi] {
        sqlx::raw_sql(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
            .execute(&pool)
            .await
            .unwrap();
    }
}
