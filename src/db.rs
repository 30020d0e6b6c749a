//! The PostgreSQL pool and the embedded migrations.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use crate::MIGRATOR;

/// Longest any single statement may run, so a stuck lock fails the run
/// instead of hanging it until `activeDeadlineSeconds`.
pub const STATEMENT_TIMEOUT: &str = "60s";

/// Could not reach or migrate the database.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// Connecting failed (host, credentials, TLS).
    #[error("cannot connect to PostgreSQL (DATABASE_URL)")]
    Connect(#[source] sqlx::Error),
    /// A migration failed.
    #[error("migration failed")]
    Migrate(#[source] sqlx::migrate::MigrateError),
}

/// Opens a small pool (the job needs one connection at a time, plus one spare)
/// with a statement timeout. The first connection is made now, so a wrong
/// URL fails here.
///
/// # Errors
/// [`DbError::Connect`].
pub async fn connect(options: PgConnectOptions) -> Result<PgPool, DbError> {
    PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options.options([("statement_timeout", STATEMENT_TIMEOUT)]))
        .await
        .map_err(DbError::Connect)
}

/// A pool for `migrate`: no statement timeout, since building an index on a
/// large `payments` table takes as long as it takes (the migrations bound
/// their lock waits themselves).
///
/// # Errors
/// [`DbError::Connect`].
pub async fn connect_for_migrations(options: PgConnectOptions) -> Result<PgPool, DbError> {
    PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await
        .map_err(DbError::Connect)
}

/// Applies the embedded migrations.
///
/// # Errors
/// [`DbError::Migrate`].
pub async fn migrate(pool: &PgPool) -> Result<(), DbError> {
    MIGRATOR.run(pool).await.map_err(DbError::Migrate)
}
