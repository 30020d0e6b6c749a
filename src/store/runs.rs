//! `reconciliation_runs`: one row per `run` invocation, for operators and for
//! measuring B*R (rows per hour the job actually scans).

use sqlx::PgConnection;

use super::{Context, StoreError};

/// The figures of a finished run, as stored.
#[derive(Debug, Clone)]
pub struct RunRecord<'a> {
    /// Batches attempted (including a wrap).
    pub batches: i32,
    /// Rows read from `payments`.
    pub rows_scanned: i64,
    /// `{"in_sync": n, ...}`
    pub verdicts: serde_json::Value,
    /// Findings newly created.
    pub findings_created: i64,
    /// Repair commands enqueued.
    pub commands_enqueued: i64,
    /// Whether the cursor reached the end of the table.
    pub wrapped: bool,
    /// `completed`, `concurrent_run`, `stripe_rejected_key`, `stripe_down`, `failed`, `interrupted`.
    pub outcome: &'a str,
}

/// Opens a run row and returns its id.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn start(conn: &mut PgConnection, job: &str, batch_size: u32) -> Result<i64, StoreError> {
    sqlx::query_scalar(
        "INSERT INTO reconciliation_runs (job, batch_size) VALUES ($1, $2) RETURNING id",
    )
    .bind(job)
    .bind(i32::try_from(batch_size).unwrap_or(i32::MAX))
    .fetch_one(conn)
    .await
    .context("recording the run start")
}

/// Closes a run row with its figures.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn finish(
    conn: &mut PgConnection,
    run_id: i64,
    record: &RunRecord<'_>,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE reconciliation_runs
            SET finished_at = now(), batches = $2, rows_scanned = $3, verdicts = $4,
                findings_created = $5, commands_enqueued = $6, wrapped = $7, outcome = $8
          WHERE id = $1",
    )
    .bind(run_id)
    .bind(record.batches)
    .bind(record.rows_scanned)
    .bind(&record.verdicts)
    .bind(record.findings_created)
    .bind(record.commands_enqueued)
    .bind(record.wrapped)
    .bind(record.outcome)
    .execute(conn)
    .await
    .context("recording the run end")?;
    Ok(())
}
