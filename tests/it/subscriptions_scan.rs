//! `run --object subscriptions` and `repair` through the binary on a
//! Pay-shaped table (`status`, `current_period_end`, `ends_at`, Rails
//! wall-clock timestamps): every kind in both read modes — the canceled
//! subscription only `status=all` lists included — one repair command per
//! repairable row, applied exactly once, nothing else touched; and a run
//! refused by another run's lease (exit 75, `concurrent_run`, no request).

use serde_json::Value;
use sqlx::PgPool;

use super::subscriptions_common::*;
use crate::support::object_summary;

const TABLE: &str = "CREATE TABLE pay_subscriptions (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer_id bigint NOT NULL DEFAULT 1,
    name text NOT NULL DEFAULT 'default',
    processor_id text,
    processor_plan text NOT NULL DEFAULT 'price_basic',
    quantity integer NOT NULL DEFAULT 1,
    status text NOT NULL,
    current_period_end timestamp(6) without time zone,
    ends_at timestamp(6) without time zone,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL)";

pub const VARS: [(&str, &str); 7] = [
    ("RECONCILER_SUBSCRIPTIONS_TABLE", "pay_subscriptions"),
    ("RECONCILER_SUBSCRIPTION_ID_COLUMN", "processor_id"),
    ("RECONCILER_SUBSCRIPTION_STATUS_COLUMN", "status"),
    (
        "RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN",
        "current_period_end",
    ),
    ("RECONCILER_SUBSCRIPTION_ENDS_AT_COLUMN", "ends_at"),
    ("RECONCILER_SUBSCRIPTION_PRICE_COLUMN", "processor_plan"),
    ("RECONCILER_SUBSCRIPTION_QUANTITY_COLUMN", "quantity"),
];

const DAY: i64 = 86_400;

/// One row: its subscription id, local status, plan, seats, period end and
/// ends-at offsets from now (days), and minutes since its last update.
struct Row(
    Option<&'static str>,
    &'static str,
    &'static str,
    i64,
    Option<i64>,
    Option<i64>,
    i64,
);

/// The rows (keys 1 to 12, created an hour apart) and what Stripe holds.
async fn arrange(pool: &PgPool, stripe: &SubsFake) {
    sqlx::raw_sql(TABLE).execute(pool).await.unwrap();
    let t = now();
    let ahead = t + 20 * DAY;
    let rows = [
        Row(
            Some("sub_InSync"),
            "active",
            "price_basic",
            1,
            Some(20),
            None,
            60,
        ),
        Row(
            Some("sub_Cancel"),
            "active",
            "price_basic",
            1,
            Some(-3),
            None,
            60,
        ),
        Row(
            Some("sub_Blocked"),
            "canceled",
            "price_basic",
            1,
            Some(20),
            Some(-1),
            60,
        ),
        Row(
            Some("sub_Unpaid"),
            "active",
            "price_basic",
            1,
            Some(20),
            None,
            60,
        ),
        Row(
            Some("sub_Trial"),
            "trialing",
            "price_basic",
            1,
            Some(20),
            None,
            60,
        ),
        Row(
            Some("sub_Stale"),
            "active",
            "price_basic",
            1,
            Some(-10),
            None,
            60,
        ),
        Row(
            Some("sub_Sched"),
            "active",
            "price_basic",
            1,
            Some(20),
            None,
            60,
        ),
        Row(
            Some("sub_Price"),
            "active",
            "price_gold",
            1,
            Some(20),
            None,
            60,
        ),
        Row(
            Some("sub_Seats"),
            "active",
            "price_basic",
            5,
            Some(20),
            None,
            60,
        ),
        Row(
            Some("sub_Gone"),
            "active",
            "price_basic",
            1,
            Some(20),
            None,
            60,
        ),
        Row(None, "active", "price_basic", 1, Some(20), None, 60),
        Row(
            Some("sub_Fresh"),
            "active",
            "price_basic",
            1,
            Some(20),
            None,
            1,
        ),
    ];
    for (i, Row(id, status, plan, seats, period, ends, updated)) in rows.iter().enumerate() {
        let created = t - 3600 * (12 - i as i64);
        let period_end = if *id == Some("sub_Stale") {
            Some(t - 10 * DAY)
        } else {
            period.map(|d| if d > 0 { ahead } else { t + d * DAY })
        };
        sqlx::query(
            "INSERT INTO pay_subscriptions (processor_id, processor_plan, quantity, status,
                 current_period_end, ends_at, created_at, updated_at)
             VALUES ($1, $2, $3, $4, to_timestamp($5) AT TIME ZONE 'UTC',
                     to_timestamp($6) AT TIME ZONE 'UTC', to_timestamp($7) AT TIME ZONE 'UTC',
                     now() AT TIME ZONE 'UTC' - make_interval(mins => $8))",
        )
        .bind(id)
        .bind(plan)
        .bind(*seats as i32)
        .bind(status)
        .bind(period_end.map(|p| p as f64))
        .bind(ends.map(|d| (t + d * DAY) as f64))
        .bind(created as f64)
        .bind(*updated as i32)
        .execute(pool)
        .await
        .unwrap();
        let Some(id) = id else { continue };
        let mut s = sub(id, "active", created, "price_basic", 1, ahead);
        match *id {
            "sub_Cancel" | "sub_Fresh" => {
                s["status"] = "canceled".into();
                s["ended_at"] = (t - 3 * DAY).into();
                s["items"]["data"][0]["current_period_end"] = (t - 3 * DAY).into();
            }
            "sub_Unpaid" => s["status"] = "unpaid".into(),
            "sub_Sched" => {
                s["cancel_at"] = ahead.into();
                s["cancel_at_period_end"] = true.into();
            }
            "sub_Price" => s["items"]["data"][0]["price"]["id"] = "price_silver".into(),
            "sub_Seats" => s["items"]["data"][0]["quantity"] = 3.into(),
            "sub_Gone" => continue,
            _ => {}
        }
        stripe.add(s);
    }
}

fn expected_findings() -> std::collections::BTreeSet<(String, String)> {
    pairs(&[
        ("2", "subscription_missed_cancel"),
        ("3", "subscription_paid_but_blocked"),
        ("4", "subscription_access_without_payment"),
        ("5", "subscription_status_mismatch"),
        ("6", "subscription_period_stale"),
        ("7", "subscription_cancel_scheduled"),
        ("8", "subscription_price_mismatch"),
        ("9", "subscription_quantity_mismatch"),
        ("10", "subscription_missing_externally"),
    ])
}

/// Scans in `mode` through the binary; returns the summary.
async fn scan(pool: &PgPool, stripe: &SubsFake, mode: &str) -> Value {
    let env = env(pool, stripe, mode, &VARS);
    migrate(pool, &env).await;
    let out = binary(&["run", "--object", "subscriptions"], &env, 0).await;
    let summary: Value =
        object_summary(&out, "subscriptions").unwrap_or_else(|| panic!("no summary: {out}"));
    assert_eq!(open(pool).await, expected_findings(), "{mode}");
    assert_eq!(
        commanded(pool).await,
        ["2", "3", "5", "6", "7"],
        "one command per repairable row"
    );
    assert_eq!(summary["rows_scanned"], 12, "{summary}");
    assert_eq!(summary["rows_without_subscription"], 1, "{summary}");
    assert_eq!(summary["job"], "subscriptions-vs-stripe");
    summary
}

#[sqlx::test(migrations = false)]
async fn every_kind_by_list_with_status_all(pool: PgPool) {
    let stripe = SubsFake::start().await;
    arrange(&pool, &stripe).await;
    scan(&pool, &stripe, "list").await;
    assert!(stripe.lists() > 0);
    // Only the subscription Stripe does not hold is retrieved: the canceled
    // one came from a list, which shows it only with `status=all`.
    assert_eq!(stripe.retrieves(), 1);
}

#[sqlx::test(migrations = false)]
async fn every_kind_by_retrieve(pool: PgPool) {
    let stripe = SubsFake::start().await;
    arrange(&pool, &stripe).await;
    scan(&pool, &stripe, "retrieve").await;
    assert_eq!(stripe.lists(), 0);
    assert_eq!(
        stripe.retrieves(),
        10,
        "every row with a sub_ id, past the grace window"
    );
}

#[sqlx::test(migrations = false)]
async fn a_refused_list_parameter_falls_back_to_retrieve(pool: PgPool) {
    let stripe = SubsFake::start().await;
    arrange(&pool, &stripe).await;
    stripe.refuse_list();
    let summary = scan(&pool, &stripe, "list").await;
    assert_eq!(summary["list_fallbacks"], 10, "{summary}");
    assert_eq!(stripe.retrieves(), 10);
}

/// Every row as JSON, by key, for comparing before and after.
async fn snapshot(pool: &PgPool) -> Vec<(i64, Value)> {
    sqlx::query_as("SELECT id, to_jsonb(s) FROM pay_subscriptions s ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn repairs_are_applied_once_and_touch_nothing_else(pool: PgPool) {
    let stripe = SubsFake::start().await;
    arrange(&pool, &stripe).await;
    scan(&pool, &stripe, "list").await;
    let before = snapshot(&pool).await;
    let env = env(&pool, &stripe, "list", &VARS);
    binary(&["repair"], &env, 0).await;
    let after = snapshot(&pool).await;
    binary(&["repair"], &env, 0).await;
    assert_eq!(
        snapshot(&pool).await,
        after,
        "a second repair writes nothing"
    );
    let t = now();
    let day = |v: &Value| {
        v.as_str().map(|s| {
            chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
                .unwrap()
                .and_utc()
                .timestamp()
        })
    };
    let near = |v: &Value, want: i64| day(v).is_some_and(|got| (got - want).abs() < 5);
    for ((key, old), (_, new)) in before.iter().zip(&after) {
        let mut old_rest = old.clone();
        let mut new_rest = new.clone();
        for c in ["status", "current_period_end", "ends_at", "updated_at"] {
            old_rest[c] = Value::Null;
            new_rest[c] = Value::Null;
        }
        assert_eq!(
            old_rest, new_rest,
            "row {key}: only the configured columns change"
        );
        match key {
            2 => {
                assert_eq!(new["status"], "canceled");
                assert!(near(&new["ends_at"], t - 3 * DAY), "{new}");
                assert!(near(&new["current_period_end"], t - 3 * DAY), "{new}");
            }
            3 => {
                assert_eq!(new["status"], "active");
                assert_eq!(new["ends_at"], Value::Null);
            }
            5 => assert_eq!(new["status"], "active"),
            6 => assert!(near(&new["current_period_end"], t + 20 * DAY), "{new}"),
            7 => assert!(near(&new["ends_at"], t + 20 * DAY), "{new}"),
            _ => assert_eq!(old, new, "row {key} untouched"),
        }
    }
    let repaired: Vec<String> = sqlx::query_scalar(
        "SELECT subscription_id FROM reconciliation_findings WHERE resolution = 'repaired' ORDER BY subscription_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(repaired, ["2", "3", "5", "6", "7"]);
    let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE processed_at IS NULL")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(pending, 0);
}

/// A `run --object subscriptions` while another run holds the scan's lease
/// (job `subscriptions-vs-stripe`, held by another pod for 10 minutes):
/// exit 75, its summary's outcome `concurrent_run` with the run's duration,
/// and no request to Stripe although a row waits to be read.
#[sqlx::test(migrations = false)]
async fn a_run_while_another_holds_the_lease_exits_75_without_asking_stripe(pool: PgPool) {
    let stripe = SubsFake::start().await;
    sqlx::raw_sql(TABLE).execute(&pool).await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO pay_subscriptions (processor_id, status, created_at, updated_at)
         VALUES ('sub_Waiting', 'active', now() - interval '2 hours', now() - interval '1 hour')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let env = env(&pool, &stripe, "list", &VARS);
    migrate(&pool, &env).await;
    sqlx::query(
        "INSERT INTO reconciliation_cursor (job, last_id, lease_owner, lease_expires_at)
         VALUES ('subscriptions-vs-stripe', 0, 'other-pod:42:cafe', now() + interval '10 minutes')
         ON CONFLICT (job) DO UPDATE
            SET lease_owner = excluded.lease_owner, lease_expires_at = excluded.lease_expires_at",
    )
    .execute(&pool)
    .await
    .unwrap();

    let out = binary(&["run", "--object", "subscriptions"], &env, 75).await;

    let summary: Value =
        object_summary(&out, "subscriptions").unwrap_or_else(|| panic!("no summary: {out}"));
    assert_eq!(summary["outcome"], "concurrent_run", "{summary}");
    assert!(summary["duration_seconds"].is_number(), "{summary}");
    assert_eq!(stripe.requests(), 0, "no Stripe read was spent: {out}");
}
