//! All SQL of the reconciler, by table. Functions take a `&mut PgConnection`
//! (a pooled connection or an open transaction) so the caller decides the
//! transaction boundaries.
//!
//! - [`app_table`]: what `payments` is (a table on the `search_path`, its
//!   required columns and their types), checked before anything is created.
//! - [`cursor`]: `reconciliation_cursor`, the scan's position and cycle.
//! - [`events_position`]: `reconciliation_events_position`, the feed's position.
//! - [`events_retry`]: `reconciliation_events_retry`, PaymentIntents the feed
//!   reads again.
//! - [`events_seen`]: `reconciliation_events_seen`, events a feed handled
//!   within its overlap's reach.
//! - [`findings`]: `reconciliation_findings`, by job (scan writes, repair
//!   guards, review queue, PaymentIntent-only findings).
//! - [`lease`]: the run lease on either position row.
//! - [`legacy`]: what earlier releases added to `payments`, removed by `migrate`.
//! - [`outbox`]: the repair commands in `RECONCILER_OUTBOX_TABLE`.
//! - [`outbox_shape`]: which shape that table has, and creating ours.
//! - [`payment_index`]: the lookup index on `payments.stripe_payment_intent_id`.
//! - [`payment_state`]: `reconciliation_payment_state`, what the scan observed.
//! - [`payments`]: the application's `payments` (reads, locks, the canonical
//!   writer's UPDATE).
//! - [`refusal`]: which database errors are a row's and which the database's.
//! - [`retry`]: running a transaction again after a deadlock or a
//!   serialization failure (40P01, 40001).
//! - [`runs`]: `reconciliation_runs`, the run history.
//! - [`schema`]: the migration runner's bookkeeping.
//! - [`stats`]: the figures of `status` and the metrics.
//! - [`subscriptions`]: the application's subscriptions table and our rows about it.
//! - [`text`]: the application's text columns read as bytes, so a stray
//!   byte (a `SQL_ASCII` database) never fails a statement.
//! - [`unverifiable`]: `reconciliation_unverifiable`, streaks per cycle.
//!
//! Every transaction of the job starts with [`begin`], which bounds it with
//! `SET LOCAL statement_timeout` and `lock_timeout`. Transaction-local settings
//! are the only ones a transaction pooler (PgBouncer in `pool_mode =
//! transaction`) keeps: a session `SET` or the startup `options` parameter is
//! refused, dropped, or leaks onto another client's server connection.
//!
//! Every statement goes through [`query`], [`query_as`] or [`query_scalar`]:
//! unnamed prepared statements. sqlx names its statements (`sqlx_s_1`, ...)
//! even with `statement-cache-capacity=0`, and a named statement outlives the
//! transaction on a pooled server connection, so the next client that lands
//! there fails with `prepared statement "sqlx_s_1" already exists`. An
//! unnamed statement is replaced by the next one and, inside a transaction,
//! stays on the transaction's server connection. The price is one more round
//! trip per statement, nothing next to a Stripe read.

pub mod app_table;
pub mod cursor;
pub mod duplicates;
pub mod events_position;
pub mod events_retry;
pub mod events_seen;
pub mod findings;
pub mod keys;
pub mod lease;
pub mod legacy;
pub mod outbox;
pub mod outbox_shape;
pub mod payment_index;
pub mod payment_state;
pub mod payments;
pub mod refusal;
pub mod retry;
pub mod runs;
pub mod schema;
pub mod stats;
pub mod subscriptions;
pub mod text;
pub mod unverifiable;

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::{Query, QueryAs, QueryScalar};
use sqlx::{Acquire, FromRow, PgConnection, Postgres, Transaction};

/// `sqlx::query` as an unnamed prepared statement (pooler-safe).
pub(crate) fn query(sql: &str) -> Query<'_, Postgres, PgArguments> {
    sqlx::query(sql).persistent(false)
}

/// `sqlx::query_as` as an unnamed prepared statement (pooler-safe).
pub(crate) fn query_as<'q, O>(sql: &'q str) -> QueryAs<'q, Postgres, O, PgArguments>
where
    O: for<'r> FromRow<'r, PgRow>,
{
    sqlx::query_as(sql).persistent(false)
}

/// `sqlx::query_scalar` as an unnamed prepared statement (pooler-safe).
pub(crate) fn query_scalar<'q, O>(sql: &'q str) -> QueryScalar<'q, Postgres, O, PgArguments>
where
    (O,): for<'r> FromRow<'r, PgRow>,
{
    sqlx::query_scalar(sql).persistent(false)
}

/// Longest any single statement of the job may run, so a stuck query fails
/// the run instead of hanging it until `activeDeadlineSeconds`.
pub const STATEMENT_TIMEOUT: &str = "60s";

/// Longest a statement of the job waits for a row or table lock (a webhook
/// holding a payment row, a migration holding a table). Shorter than
/// [`STATEMENT_TIMEOUT`], so a lock wait fails with its own message.
pub const LOCK_TIMEOUT: &str = "10s";

/// The bounds of one transaction, as PostgreSQL durations (`"60s"`, `"250ms"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// `statement_timeout`: longest any one statement may run.
    pub statement: &'static str,
    /// `lock_timeout`: longest a statement may wait for a lock.
    pub lock: &'static str,
}

impl Timeouts {
    /// The job's bounds: [`STATEMENT_TIMEOUT`] and [`LOCK_TIMEOUT`].
    pub const JOB: Timeouts = Timeouts {
        statement: STATEMENT_TIMEOUT,
        lock: LOCK_TIMEOUT,
    };
}

/// Opens a transaction (a savepoint when `conn` is already in one) bounded by
/// [`Timeouts::JOB`] with `SET LOCAL` semantics, so the bound holds behind a
/// transaction pooler and ends with the transaction. Use it instead of
/// `begin()` everywhere; a read outside any transaction uses it too (dropped
/// without commit, it rolls back, which is harmless for a read).
///
/// # Errors
/// The driver's error when the connection fails or the settings are refused.
pub async fn begin<'c, A>(conn: A) -> Result<Transaction<'c, Postgres>, sqlx::Error>
where
    A: Acquire<'c, Database = Postgres>,
{
    begin_with(conn, Timeouts::JOB).await
}

/// [`begin`] with other bounds (tests use short ones).
///
/// # Errors
/// The driver's error when the connection fails or a duration is malformed.
pub async fn begin_with<'c, A>(
    conn: A,
    timeouts: Timeouts,
) -> Result<Transaction<'c, Postgres>, sqlx::Error>
where
    A: Acquire<'c, Database = Postgres>,
{
    let mut tx = conn.begin().await?;
    // set_config(.., true) is SET LOCAL with bind parameters.
    query("SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $2, true)")
        .bind(timeouts.statement)
        .bind(timeouts.lock)
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// Sets the transaction's `TimeZone` to `zone` (`SET LOCAL`, so it holds
/// behind a transaction pooler and ends with the transaction): a `timestamp
/// without time zone` column assigned an instant (`updated_at = now()`)
/// then stores the wall-clock time in `RECONCILER_TIMESTAMP_ZONE`, and
/// migration 0010's copy of `payments.created_at` reads it in that zone.
/// Instants (`timestamptz`) are unaffected.
///
/// # Errors
/// [`StoreError`] from the database (a zone it does not know).
pub async fn set_local_time_zone(
    tx: &mut PgConnection,
    zone: &crate::config::TimestampZone,
) -> Result<(), StoreError> {
    query("SELECT set_config('TimeZone', $1, true)")
        .bind(zone.as_str())
        .execute(tx)
        .await
        .context("setting the transaction's time zone (RECONCILER_TIMESTAMP_ZONE)")
        .map(|_| ())
}

/// Serialises `migrate` runs for the rest of the transaction `tx`
/// (`pg_advisory_xact_lock`): released at commit or rollback, so a pooler
/// cannot strand it on a server connection the way sqlx's session lock can.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn lock_migrations(tx: &mut PgConnection) -> Result<(), StoreError> {
    query("SELECT pg_advisory_xact_lock(hashtextextended('stripe-reconciler migrate', 0))")
        .execute(tx)
        .await
        .context("waiting for the migration lock")
        .map(|_| ())
}

/// A database operation failed. `action` says which, for the log line.
#[derive(Debug, thiserror::Error)]
#[error("database error while {action}")]
pub struct StoreError {
    /// What was being done, e.g. "reading the batch".
    pub action: &'static str,
    /// The driver's error.
    #[source]
    pub source: sqlx::Error,
}

/// Attaches an action to a sqlx error.
pub(crate) trait Context<T> {
    fn context(self, action: &'static str) -> Result<T, StoreError>;
}

impl<T> Context<T> for Result<T, sqlx::Error> {
    fn context(self, action: &'static str) -> Result<T, StoreError> {
        self.map_err(|source| StoreError { action, source })
    }
}
