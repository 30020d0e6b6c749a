//! The arrangement of the Connect tests (docs/connect.md): the account column on
//! `payments`, rows of connected accounts, the settings that read it, and a
//! run that ends the cycle.

use sqlx::PgPool;
use stripe_reconciler::config::{ColumnName, ReadMode, ScanSettings, Settings, Sizing};
use stripe_reconciler::scan::{RunSummary, ScanJob};
use wiremock::MockServer;

use super::insert_at;
use super::{gateway, run_job, settings};

/// Now minus an hour, in Unix seconds.
pub fn an_hour_ago() -> i64 {
    chrono::Utc::now().timestamp() - 3600
}

/// Adds the `stripe_account` column (`RECONCILER_ACCOUNT_COLUMN`) to `payments`.
pub async fn add_account_column(pool: &PgPool) {
    sqlx::query("ALTER TABLE payments ADD COLUMN stripe_account text")
        .execute(pool)
        .await
        .unwrap();
}

/// A payment of `account` (`None`: the platform's) whose PaymentIntent was
/// created at `created`.
pub async fn insert_on(
    pool: &PgPool,
    account: Option<&str>,
    pi: &str,
    status: &str,
    created: i64,
) -> i64 {
    let id = insert_at(pool, pi, status, created).await;
    sqlx::query("UPDATE payments SET stripe_account = $2 WHERE id = $1")
        .bind(id)
        .bind(account)
        .execute(pool)
        .await
        .unwrap();
    id
}

/// The test settings in `mode` with `RECONCILER_ACCOUNT_COLUMN=stripe_account`.
pub fn connect_settings(mode: ReadMode) -> Settings {
    let mut s = Settings {
        scan: ScanSettings {
            read_mode: mode,
            batches_per_run: Sizing::Fixed(20),
            ..settings(100).scan
        },
        ..settings(100)
    };
    s.schema.account_column =
        Some(ColumnName::parse("RECONCILER_ACCOUNT_COLUMN", "stripe_account").unwrap());
    s
}

/// One `run` of the scan, expected to succeed and to end the cycle.
pub async fn run(pool: &PgPool, stripe: &MockServer, s: &Settings) -> RunSummary {
    let (summary, result) = run_job(pool, &gateway(stripe), s, ScanJob::default()).await;
    result.unwrap();
    assert!(summary.wrapped, "{summary:?}");
    summary
}

/// (payment, kind, account) of every finding.
pub async fn findings_with_accounts(pool: &PgPool) -> Vec<(i64, String, Option<String>)> {
    sqlx::query_as(
        "SELECT payment_id, kind, stripe_account_id FROM reconciliation_findings ORDER BY payment_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}
