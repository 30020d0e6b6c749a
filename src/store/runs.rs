//! `reconciliation_runs`: one row per `run` invocation, for operators and for
//! measuring B*R (rows per hour the job actually scans).

use sqlx::PgConnection;

use super::{Context, StoreError};
use crate::config::Partition;

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

/// Opens a run row and returns its id. Commits on its own.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn start(
    conn: &mut PgConnection,
    job: &str,
    batch_size: u32,
    key: &crate::key::KeyType,
) -> Result<i64, StoreError> {
    let mut tx = super::begin(conn).await.context("opening a transaction")?;
    // The id growth measures G for integer keys only; other keys leave it
    // NULL and G is unknown (docs/keys.md).
    let max_id = match key.kind() {
        crate::key::KeyKind::Integer => "(SELECT coalesce(max(id), 0)::bigint FROM payments)",
        _ => "NULL::bigint",
    };
    let sql = format!(
        "INSERT INTO reconciliation_runs (job, batch_size, max_payment_id)
         VALUES ($1, $2, {max_id})
         RETURNING id"
    );
    let id = super::query_scalar(&sql)
        .bind(job)
        .bind(i32::try_from(batch_size).unwrap_or(i32::MAX))
        .fetch_one(&mut *tx)
        .await
        .context("recording the run start")?;
    tx.commit().await.context("recording the run start")?;
    Ok(id)
}

/// Closes a run row with its figures. Commits on its own.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn finish(
    conn: &mut PgConnection,
    run_id: i64,
    record: &RunRecord<'_>,
) -> Result<(), StoreError> {
    let mut tx = super::begin(conn).await.context("opening a transaction")?;
    super::query(
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
    .execute(&mut *tx)
    .await
    .context("recording the run end")?;
    tx.commit().await.context("recording the run end")
}

/// The job's run history over the last 24 hours, reduced to what the capacity
/// figures need.
#[derive(Debug, Clone, Default, PartialEq, sqlx::FromRow)]
pub struct RunHistory {
    /// Finished runs in the window.
    pub runs: i64,
    /// Rows scanned by every finished run but the newest (those runs are
    /// what happened between the first and the newest run's start).
    pub rows_scanned_before_newest: i64,
    /// Seconds between the first and the newest run's start.
    pub span_seconds: f64,
    /// `max(payments.id)` at the first run's start.
    pub first_max_payment_id: Option<i64>,
    /// `max(payments.id)` at the newest run's start.
    pub newest_max_payment_id: Option<i64>,
    /// When a run of this job last completed (Unix seconds), at any time.
    pub last_success_unix: Option<f64>,
    /// Rows scanned by the finished runs in the window that scanned any: the
    /// pace's numerator (docs/operations.md, "Sizing (`auto`)").
    pub paced_rows: i64,
    /// Seconds those runs took, start to finish: the pace's denominator.
    pub paced_seconds: f64,
    /// With a partition: its rows with ids in `(first_max_payment_id,
    /// newest_max_payment_id]` (the ids grow for every partition; only
    /// these are this job's inflow). `None` without a partition.
    #[sqlx(default)]
    pub partition_new_rows: Option<i64>,
}

impl RunHistory {
    /// G's numerator: rows added between the first and the newest run's
    /// start (the id growth, or the partition's rows in that id range).
    pub fn growth(&self) -> i64 {
        match (
            self.partition_new_rows,
            self.first_max_payment_id,
            self.newest_max_payment_id,
        ) {
            (Some(rows), _, _) => rows,
            (None, Some(first), Some(newest)) => newest - first,
            _ => 0,
        }
    }
}

/// Reads the job's recent run history (an index range scan on
/// `reconciliation_runs_job_started`); with a partition, also its rows added
/// in the window (a range scan of the partition's `(column, id)` index).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn history(
    conn: &mut PgConnection,
    job: &str,
    partition: Option<&Partition>,
) -> Result<RunHistory, StoreError> {
    let mut history: RunHistory = super::query_as(
        "WITH recent AS (
             SELECT started_at, finished_at, rows_scanned, max_payment_id,
                    row_number() OVER (ORDER BY started_at DESC) AS newest_first,
                    row_number() OVER (ORDER BY started_at) AS oldest_first
               FROM reconciliation_runs
              WHERE job = $1 AND started_at > now() - interval '24 hours' AND finished_at IS NOT NULL)
         SELECT count(*) AS runs,
                coalesce(sum(rows_scanned) FILTER (WHERE newest_first > 1), 0)::bigint AS rows_scanned_before_newest,
                coalesce(extract(epoch FROM max(started_at) - min(started_at)), 0)::float8 AS span_seconds,
                max(max_payment_id) FILTER (WHERE oldest_first = 1) AS first_max_payment_id,
                max(max_payment_id) FILTER (WHERE newest_first = 1) AS newest_max_payment_id,
                (SELECT extract(epoch FROM max(finished_at))::float8 FROM reconciliation_runs
                  WHERE job = $1 AND outcome = 'completed') AS last_success_unix,
                coalesce(sum(rows_scanned) FILTER (WHERE rows_scanned > 0), 0)::bigint AS paced_rows,
                coalesce(extract(epoch FROM sum(finished_at - started_at) FILTER (WHERE rows_scanned > 0)), 0)::float8
                    AS paced_seconds
           FROM recent",
    )
    .bind(job)
    .fetch_one(&mut *conn)
    .await
    .context("reading the run history")?;
    if let (Some(p), Some(first), Some(newest)) = (
        partition,
        history.first_max_payment_id,
        history.newest_max_payment_id,
    ) {
        let sql = format!(
            "SELECT count(*) FROM payments p WHERE p.id > $1 AND p.id <= $2 AND {}",
            p.condition("p", 3)
        );
        let rows: i64 = super::query_scalar(&sql)
            .bind(first)
            .bind(newest)
            .bind(p.value.as_str())
            .fetch_one(conn)
            .await
            .context("counting the partition's new rows")?;
        history.partition_new_rows = Some(rows);
    }
    Ok(history)
}
