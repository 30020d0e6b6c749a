//! `reconciliation_cursor`: the persistent position of a job's walk over
//! `payments` (docs/keys.md). Every move is a compare-and-set on its
//! position (`last_key`).
//! Its lease is [`super::lease`] on [`super::lease::LeaseTable::Cursor`].

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{Context, StoreError};
use crate::key::{PaymentKey, Position};

/// The cursor's position as SQL over the columns of `reconciliation_cursor`
/// (`alias.` prefixed, or bare for `""`): `last_key` (0018), unless it is a
/// whole number in canonical form (at most 18 digits) that `last_id` no
/// longer matches, i.e. `last_id` was set by
/// an older release or by hand (`UPDATE … SET last_id = 0` rewinds the
/// cursor as it always did); then `last_id`, 0 being the start.
pub(crate) fn position_sql(alias: &str) -> String {
    let (key, id) = (format!("{alias}last_key"), format!("{alias}last_id"));
    format!(
        "CASE WHEN {key} IS NULL OR ({key} ~ '^(0|-?[1-9][0-9]{{0,17}})$' AND {id}::text <> {key})
              THEN CASE WHEN {id} <> 0 THEN {id}::text END
              ELSE {key} END"
    )
}

/// One job's cursor row.
#[derive(Debug, Clone)]
pub struct CursorRow {
    /// The job name (`RECONCILER_JOB`).
    pub job: String,
    /// The last row walked in the current cycle; `None`: the cycle's start,
    /// before every row (any key, ids ≤ 0 included: docs/keys.md).
    pub position: Option<Position>,
    /// When the current cycle began.
    pub cycle_started_at: DateTime<Utc>,
    /// When the previous cycle reached the end of the table.
    pub last_cycle_completed_at: Option<DateTime<Utc>>,
}

#[derive(sqlx::FromRow)]
struct RawCursor {
    job: String,
    last_key: Option<PaymentKey>,
    last_created_at: Option<DateTime<Utc>>,
    cycle_started_at: DateTime<Utc>,
    last_cycle_completed_at: Option<DateTime<Utc>>,
}

/// Creates the job's cursor at the start if it does not exist.
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
    let raw: Option<RawCursor> = super::query_as(&format!(
        "SELECT job, {} AS last_key, last_created_at, cycle_started_at,
                last_cycle_completed_at
           FROM reconciliation_cursor WHERE job = $1",
        position_sql("")
    ))
    .bind(job)
    .fetch_optional(conn)
    .await
    .context("reading the cursor")?;
    Ok(raw.map(|r| CursorRow {
        job: r.job,
        position: r.last_key.map(|key| Position {
            key,
            created_at: r.last_created_at,
        }),
        cycle_started_at: r.cycle_started_at,
        last_cycle_completed_at: r.last_cycle_completed_at,
    }))
}

/// Moves the cursor from `old` to `new` (`None`: the cycle's start), `rows`
/// more rows walked in the cycle (`cycle_rows_done`, migration 0021: the
/// cycle's progress on every walk, docs/keys.md). Returns `false` when the
/// cursor was no longer at `old` (another run moved it): the caller must
/// roll back. `last_id` follows for readers of older releases (the key when
/// it is a bigint, else 0).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn advance(
    conn: &mut PgConnection,
    job: &str,
    old: Option<&Position>,
    (new, rows): (Option<&Position>, u64),
) -> Result<bool, StoreError> {
    let done = super::query(&format!(
        "UPDATE reconciliation_cursor
            SET last_key = $3, last_created_at = $4, last_id = coalesce($5, 0),
                cycle_rows_done = cycle_rows_done + $6
          WHERE job = $1 AND {} IS NOT DISTINCT FROM $2",
        position_sql("")
    ))
    .bind(job)
    .bind(old.map(|p| &p.key))
    .bind(new.map(|p| &p.key))
    .bind(new.and_then(|p| p.created_at))
    .bind(new.and_then(|p| p.key.as_i64().filter(|n| n.to_string() == p.key.as_str())))
    .bind(i64::try_from(rows).unwrap_or(i64::MAX))
    .execute(conn)
    .await
    .context("advancing the cursor")?;
    Ok(done.rows_affected() == 1)
}

/// Puts the cursor back to the start at the end of the table and stamps the
/// cycle. Returns `false` when the cursor was no longer at `old`.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn wrap(
    conn: &mut PgConnection,
    job: &str,
    old: Option<&Position>,
) -> Result<bool, StoreError> {
    let done = super::query(&format!(
        "UPDATE reconciliation_cursor
            SET last_key = NULL, last_created_at = NULL, last_id = 0, cycle_rows_done = 0,
                last_cycle_completed_at = now(), cycle_started_at = now()
          WHERE job = $1 AND {} IS NOT DISTINCT FROM $2",
        position_sql("")
    ))
    .bind(job)
    .bind(old.map(|p| &p.key))
    .execute(conn)
    .await
    .context("wrapping the cursor")?;
    Ok(done.rows_affected() == 1)
}

/// Ends the cycle after a batch that read the table's last rows: the cursor
/// goes from `old` back to the start and the cycle is stamped, as [`wrap`]
/// does, in the batch's own transaction (no batch is spent on an empty
/// read). Returns `false` when the cursor was no longer at `old`.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn complete_cycle(
    conn: &mut PgConnection,
    job: &str,
    old: Option<&Position>,
) -> Result<bool, StoreError> {
    wrap(conn, job, old).await
}
