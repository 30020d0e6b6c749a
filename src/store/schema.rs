//! `_sqlx_migrations`, the migration bookkeeping sqlx's migrator keeps, read
//! and written with unnamed statements so `migrate` works behind a
//! transaction pooler (sqlx's own bookkeeping queries are named statements).
//! The table's layout is sqlx's, so `sqlx migrate info` and `#[sqlx::test]`
//! keep working on the same database.

use std::time::Duration;

use sqlx::migrate::Migration;
use sqlx::PgConnection;

use super::{Context, StoreError};

/// One row of `_sqlx_migrations`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AppliedMigration {
    /// The migration's version (its file name's number).
    pub version: i64,
    /// SHA-384 of the migration's SQL when it was applied.
    pub checksum: Vec<u8>,
    /// `false` when it failed half-way (a `-- no-transaction` migration).
    pub success: bool,
}

/// Creates `_sqlx_migrations` if needed (sqlx's layout).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn ensure_table(conn: &mut PgConnection) -> Result<(), StoreError> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS _sqlx_migrations (
            version BIGINT PRIMARY KEY,
            description TEXT NOT NULL,
            installed_on TIMESTAMPTZ NOT NULL DEFAULT now(),
            success BOOLEAN NOT NULL,
            checksum BYTEA NOT NULL,
            execution_time BIGINT NOT NULL
        )",
    )
    .execute(conn)
    .await
    .context("creating _sqlx_migrations")
    .map(|_| ())
}

/// Every recorded migration, by version.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn applied(conn: &mut PgConnection) -> Result<Vec<AppliedMigration>, StoreError> {
    super::query_as("SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version")
        .fetch_all(conn)
        .await
        .context("reading _sqlx_migrations")
}

/// Runs a migration's SQL (simple protocol: several statements, no prepared
/// statement) on `conn`, which is a transaction unless the migration is
/// `-- no-transaction`.
///
/// # Errors
/// [`StoreError`] from the database (the migration's own error).
pub async fn execute(conn: &mut PgConnection, migration: &Migration) -> Result<(), StoreError> {
    sqlx::raw_sql(&migration.sql)
        .execute(conn)
        .await
        .context("applying a migration")
        .map(|_| ())
}

/// Runs `sql` (a migration's text as [`crate::db::migrate`] applies it) with
/// the simple protocol.
///
/// # Errors
/// [`StoreError`] from the database (the migration's own error).
pub async fn execute_sql(conn: &mut PgConnection, sql: &str) -> Result<(), StoreError> {
    sqlx::raw_sql(sql)
        .execute(conn)
        .await
        .context("applying a migration")
        .map(|_| ())
}

/// Records a migration as applied, taking `elapsed` to run.
///
/// # Errors
/// [`StoreError`] from the database, e.g. a unique violation when another
/// `migrate` recorded it first.
pub async fn record(
    conn: &mut PgConnection,
    migration: &Migration,
    elapsed: Duration,
) -> Result<(), StoreError> {
    super::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES ($1, $2, TRUE, $3, $4)",
    )
    .bind(migration.version)
    .bind(&*migration.description)
    .bind(&*migration.checksum)
    .bind(i64::try_from(elapsed.as_nanos()).unwrap_or(i64::MAX))
    .execute(conn)
    .await
    .context("recording a migration")
    .map(|_| ())
}
