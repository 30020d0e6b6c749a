//! The arrangement of the key tests (docs/keys.md): the
//! application's own `payments` with a primary key of any type, its rows,
//! `migrate` through the binary, the settings with the key detected, a run,
//! and what a user checks afterwards.

use std::collections::BTreeSet;

use sqlx::PgPool;
use stripe_reconciler::config::{ReadMode, Settings, Sizing};
use stripe_reconciler::scan::{self, RunOptions, RunSummary, ScanGroups};
use stripe_reconciler::store::keys;
use tokio_util::sync::CancellationToken;

use super::stripe_fake::StripeFake;
use super::{all_output, count, database_url, gateway, reconciler_output, settings};

/// The application's own `payments`, keyed by `id_type`, with a `version`
/// of `version_type`, a `legal_entity` and a connected account column, and
/// an index on `created_at` when `created_index`.
pub async fn app_table(pool: &PgPool, id_type: &str, version_type: &str, created_index: bool) {
    sqlx::raw_sql(&format!(
        "CREATE TABLE payments (
             id {id_type} PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text NOT NULL,
             status text NOT NULL,
             version {version_type} NOT NULL DEFAULT 0,
             legal_entity text NOT NULL DEFAULT 'eu',
             stripe_account text,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now());
         {}",
        if created_index {
            "CREATE INDEX payments_created_at ON payments (created_at);"
        } else {
            ""
        }
    ))
    .execute(pool)
    .await
    .unwrap();
}

/// `migrate` through the binary, as a user runs it; returns what it printed.
pub async fn migrate(pool: &PgPool, extra: &[(&str, String)]) -> String {
    let mut env = vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", "sk_test_keys".to_owned()),
    ];
    env.extend(extra.iter().cloned());
    let out = reconciler_output(&["migrate"], &env).await;
    let text = all_output(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    text
}

/// Inserts a row keyed `id` (an SQL expression), created `created_secs_ago`,
/// last updated an hour ago; returns its key as text.
pub async fn insert(
    pool: &PgPool,
    id: &str,
    pi: &str,
    status: &str,
    created_secs_ago: i64,
) -> String {
    sqlx::query_scalar(&format!(
        "INSERT INTO payments (id, order_id, stripe_payment_intent_id, status, created_at, updated_at)
         VALUES ({id}, 'order-' || $1, $1, $2, now() - make_interval(secs => $3),
                 now() - interval '1 hour')
         RETURNING id::text"
    ))
    .bind(pi)
    .bind(status)
    .bind(created_secs_ago as f64)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// The job's settings with `payments.id`'s type detected, as `run` does.
pub async fn job(pool: &PgPool, mode: ReadMode, batch_size: u32) -> Settings {
    let mut conn = pool.acquire().await.unwrap();
    let key = keys::detect(&mut conn).await.unwrap().unwrap();
    let mut s = settings(batch_size);
    s.scan.read_mode = mode;
    s.scan.batches_per_run = Sizing::Fixed(100);
    s.schema.key = key;
    s
}

/// One `run` of the scan through `stripe`, expected to succeed.
pub async fn run(pool: &PgPool, stripe: &StripeFake, s: &Settings) -> RunSummary {
    let (summary, result) = scan::run(
        pool,
        &gateway(stripe),
        &ScanGroups::of(s),
        RunOptions::default(),
        CancellationToken::new(),
    )
    .await;
    result.unwrap();
    summary
}

/// `(payment key, kind)` of every open finding.
pub async fn open_findings(pool: &PgPool) -> BTreeSet<(String, String)> {
    sqlx::query_as(
        "SELECT payment_id::text, kind FROM reconciliation_findings WHERE resolved_at IS NULL",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

/// Rows never confirmed with Stripe.
pub async fn unconfirmed(pool: &PgPool) -> i64 {
    count(
        pool,
        "SELECT count(*) FROM payments p
          WHERE NOT EXISTS (SELECT 1 FROM reconciliation_payment_state s
                             WHERE s.payment_id = p.id AND s.last_reconciled_at IS NOT NULL)",
    )
    .await
}

/// 60 rows on a random-uuid table (one a minute), two of them `pending`
/// while Stripe says succeeded: exactly two `missed_success` findings.
pub async fn uuid_rows(pool: &PgPool, stripe: &StripeFake) -> BTreeSet<(String, String)> {
    let mut drift = BTreeSet::new();
    for i in 0..60 {
        let status = if i % 29 == 7 { "pending" } else { "paid" };
        let id = insert(
            pool,
            "gen_random_uuid()",
            &format!("pi_U{i:03}"),
            status,
            60 * (60 - i),
        )
        .await;
        if status == "pending" {
            drift.insert((id, "missed_success".to_owned()));
        }
    }
    stripe.mirror(pool, "succeeded").await;
    drift
}
