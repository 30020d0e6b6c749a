//! The run lease, one implementation for the two tables that carry one:
//! `reconciliation_cursor` (the scan) and `reconciliation_events_position`
//! (the events feed). A lease is a row with an owner and an expiry, not a
//! session advisory lock, so a transaction pooler cannot orphan it and a
//! crashed run's lease expires by itself.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{Context, StoreError};

/// A table with `job`, `lease_owner` and `lease_expires_at` columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseTable {
    /// `reconciliation_cursor` (the scan's cursor).
    Cursor,
    /// `reconciliation_events_position` (the events feed's position).
    EventsPosition,
}

impl LeaseTable {
    /// The table's name: a fixed identifier, never input.
    fn name(self) -> &'static str {
        match self {
            LeaseTable::Cursor => "reconciliation_cursor",
            LeaseTable::EventsPosition => "reconciliation_events_position",
        }
    }

    /// What the row holds, for logs: `cursor` or `events`.
    pub fn holds(self) -> &'static str {
        match self {
            LeaseTable::Cursor => "cursor",
            LeaseTable::EventsPosition => "events",
        }
    }
}

/// Takes `job`'s lease for `ttl_seconds` if it is free, expired, or already
/// `owner`'s, creating the job's row (cursor at 0, or no position yet) if
/// needed. Returns `false` when another run holds a live lease. Commits on
/// its own (a bounded transaction, or a savepoint when `conn` is in one).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn acquire(
    conn: &mut PgConnection,
    table: LeaseTable,
    job: &str,
    owner: &str,
    ttl_seconds: f64,
) -> Result<bool, StoreError> {
    let mut tx = super::begin(conn).await.context("opening a transaction")?;
    super::query(&format!(
        "INSERT INTO {} (job) VALUES ($1) ON CONFLICT DO NOTHING",
        table.name()
    ))
    .bind(job)
    .execute(&mut *tx)
    .await
    .context("creating the job's row")?;
    let taken = take(&mut tx, table, job, owner, ttl_seconds).await?;
    tx.commit().await.context("committing the lease")?;
    Ok(taken)
}

/// Takes `job`'s lease for `ttl_seconds` (inside the caller's transaction)
/// if it is free, expired, or already `owner`'s. The row must exist. Returns
/// `false` when another run holds a live lease.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn take(
    conn: &mut PgConnection,
    table: LeaseTable,
    job: &str,
    owner: &str,
    ttl_seconds: f64,
) -> Result<bool, StoreError> {
    let taken = super::query(&format!(
        "UPDATE {}
            SET lease_owner = $2, lease_expires_at = now() + make_interval(secs => $3)
          WHERE job = $1
            AND (lease_owner IS NULL OR lease_expires_at < now() OR lease_owner = $2)",
        table.name()
    ))
    .bind(job)
    .bind(owner)
    .bind(ttl_seconds)
    .execute(conn)
    .await
    .context("taking the lease")?;
    Ok(taken.rows_affected() == 1)
}

/// Who holds `job`'s lease and until when (UTC); `None` when nobody does.
/// Reads in a bounded transaction of its own.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn holder(
    conn: &mut PgConnection,
    table: LeaseTable,
    job: &str,
) -> Result<Option<(String, Option<DateTime<Utc>>)>, StoreError> {
    let mut tx = super::begin(conn).await.context("opening a transaction")?;
    let holder = super::query_as(&format!(
        "SELECT lease_owner, lease_expires_at FROM {}
          WHERE job = $1 AND lease_owner IS NOT NULL",
        table.name()
    ))
    .bind(job)
    .fetch_optional(&mut *tx)
    .await
    .context("reading the lease")?;
    tx.commit().await.context("closing a transaction")?;
    Ok(holder)
}

/// Extends `owner`'s lease by `ttl_seconds` from now; `false` when the lease
/// is no longer `owner`'s.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn renew(
    conn: &mut PgConnection,
    table: LeaseTable,
    job: &str,
    owner: &str,
    ttl_seconds: f64,
) -> Result<bool, StoreError> {
    let renewed = super::query(&format!(
        "UPDATE {} SET lease_expires_at = now() + make_interval(secs => $3)
          WHERE job = $1 AND lease_owner = $2",
        table.name()
    ))
    .bind(job)
    .bind(owner)
    .bind(ttl_seconds)
    .execute(conn)
    .await
    .context("renewing the lease")?;
    Ok(renewed.rows_affected() == 1)
}

/// Gives `owner`'s lease back (end of run, also a failed one), in a
/// transaction of its own.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn release(
    conn: &mut PgConnection,
    table: LeaseTable,
    job: &str,
    owner: &str,
) -> Result<(), StoreError> {
    let mut tx = super::begin(conn).await.context("opening a transaction")?;
    super::query(&format!(
        "UPDATE {} SET lease_owner = NULL, lease_expires_at = NULL
          WHERE job = $1 AND lease_owner = $2",
        table.name()
    ))
    .bind(job)
    .bind(owner)
    .execute(&mut *tx)
    .await
    .context("releasing the lease")?;
    tx.commit().await.context("releasing the lease")
}
