//! `reconciliation_cursor`: the persistent position of a job's walk over
//! `payments` by primary key. Every move is a compare-and-set on `last_id`.
//! Its lease is [`super::lease`] on [`super::lease::LeaseTable::Cursor`].

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{Context, StoreError};

/// One job's cursor row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CursorRow {
    /// The job name (`RECONCILER_JOB`).
    pub job: String,
    /// Highest `payments.id` already scanned in the current cycle (0 = start).
    pub last_id: i64,
    /// When the current cycle began.
    pub cycle_started_at: DateTime<Utc>,
    /// When the previous cycle reached the end of the table.
    pub last_cycle_completed_at: Option<DateTime<Utc>>,
}

/// Creates the job's cursor at 0 if it does not exist.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn ensure(conn: &mut PgConnection, job: &str) -> Result<(), StoreError> {
    super::query("INSERT INTO reconciliation_cursor (job) VALUES ($1) ON CONFLICT DO NOTHING")
        .bind(job)
        .execute(conn)
        .await
        .context("creating the cursor")?;
    Ok(())
}

/// Reads the job's cursor; `None` if the job never ran.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read(conn: &mut PgConnection, job: &str) -> Result<Option<CursorRow>, StoreError> {
    super::query_as(
        "SELECT job, last_id, cycle_started_at, last_cycle_completed_at
           FROM reconciliation_cursor WHERE job = $1",
    )
    .bind(job)
    .fetch_optional(conn)
    .await
    .context("reading the cursor")
}

/// Moves the cursor from `old` to `new`. Returns `false` when the cursor was
/// no longer at `old` (another run moved it): the caller must roll back.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn advance(
    conn: &mut PgConnection,
    job: &str,
    old: i64,
    new: i64,
) -> Result<bool, StoreError> {
    let done = super::query(
        "UPDATE reconciliation_cursor SET last_id = $3 WHERE job = $1 AND last_id = $2",
    )
    .bind(job)
    .bind(old)
    .bind(new)
    .execute(conn)
    .await
    .context("advancing the cursor")?;
    Ok(done.rows_affected() == 1)
}

/// Resets the cursor to 0 at the end of the table and stamps the cycle.
/// Returns `false` when the cursor was no longer at `old`.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn wrap(conn: &mut PgConnection, job: &str, old: i64) -> Result<bool, StoreError> {
    let done = super::query(
        "UPDATE reconciliation_cursor
            SET last_id = 0, last_cycle_completed_at = now(), cycle_started_at = now()
          WHERE job = $1 AND last_id = $2",
    )
    .bind(job)
    .bind(old)
    .execute(conn)
    .await
    .context("wrapping the cursor")?;
    Ok(done.rows_affected() == 1)
}

/// Ends the cycle after a batch that read the table's last rows: the cursor
/// goes from `old` back to 0 and the cycle is stamped, as [`wrap`] does, in
/// the batch's own transaction (no batch is spent on an empty read). Returns
/// `false` when the cursor was no longer at `old`.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn complete_cycle(
    conn: &mut PgConnection,
    job: &str,
    old: i64,
) -> Result<bool, StoreError> {
    wrap(conn, job, old).await
}
