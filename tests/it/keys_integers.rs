//! Integer keys (docs/keys.md): `integer` and `smallint` ids and versions go
//! through `migrate`, `run` and `status`; ids ≤ 0 and near ±2^63 are read.

use std::collections::BTreeSet;

use crate::support::keyed::*;
use crate::support::stripe_fake::StripeFake;
use crate::support::*;
use serde_json::Value;
use sqlx::PgPool;
use stripe_reconciler::config::ReadMode;
/// `integer` or `smallint` ids and versions: migrate, run, status.
async fn small_integer_table(pool: &PgPool, int_type: &str) {
    app_table(pool, int_type, int_type, false).await;
    migrate(pool, &[]).await;
    let stripe = StripeFake::start().await;
    let mut drift = BTreeSet::new();
    for i in -3..4 {
        let status = if i == -2 { "pending" } else { "paid" };
        let id = insert(pool, &i.to_string(), &format!("pi_I{}", i + 3), status, 60).await;
        if status == "pending" {
            drift.insert((id, "missed_success".to_owned()));
        }
    }
    stripe.mirror(pool, "succeeded").await;
    let s = job(pool, ReadMode::Retrieve, 3).await;
    let summary = run(pool, &stripe, &s).await;
    assert_eq!(summary.rows_scanned, 7);
    assert_eq!(open_findings(pool).await, drift);
    assert_eq!(unconfirmed(pool).await, 0);
    let env = [
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", "sk_test_keys".to_owned()),
    ];
    let out = reconciler_output(&["status", "--json"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
}

#[sqlx::test(migrations = false)]
async fn integer_ids_and_versions(pool: PgPool) {
    small_integer_table(&pool, "integer").await;
}

#[sqlx::test(migrations = false)]
async fn smallint_ids_and_versions(pool: PgPool) {
    small_integer_table(&pool, "smallint").await;
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn ids_at_and_below_zero_and_near_2_63_are_read(pool: PgPool) {
    let ids = [i64::MIN, -5, -1, 0, 1, 2, 1_000_000_000_000, i64::MAX];
    let stripe = StripeFake::start().await;
    for (n, id) in ids.iter().enumerate() {
        let status = if *id == i64::MIN { "pending" } else { "paid" };
        sqlx::query(
            "INSERT INTO payments (id, order_id, stripe_payment_intent_id, status, created_at, updated_at)
             OVERRIDING SYSTEM VALUE
             VALUES ($1, 'o', $2, $3, now() - interval '1 day', now() - interval '1 hour')",
        )
        .bind(id)
        .bind(format!("pi_N{n}"))
        .bind(status)
        .execute(&pool)
        .await
        .unwrap();
    }
    stripe.mirror(&pool, "succeeded").await;
    let s = job(&pool, ReadMode::Retrieve, 3).await;
    let summary = run(&pool, &stripe, &s).await;
    assert!(summary.wrapped);
    assert_eq!(summary.rows_scanned, 8);
    assert_eq!(unconfirmed(&pool).await, 0, "every id was read");
    assert_eq!(
        open_findings(&pool).await,
        BTreeSet::from([(i64::MIN.to_string(), "missed_success".to_owned())])
    );
    let payload: Value = sqlx::query_scalar("SELECT payload FROM outbox")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        payload["payment_id"],
        Value::from(i64::MIN),
        "a number, as before"
    );
    // The next cycle starts before every row again (no sentinel 0).
    let mut conn = pool.acquire().await.unwrap();
    let c = stripe_reconciler::store::cursor::read(&mut conn, &s.run.job)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.position, None);
}
