//! Read-only figures for `status` and the metrics. Every query here stays an
//! index lookup or a small aggregate on a 10M-row `payments` table.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{Context, StoreError};

/// Figures about `payments`, the cursor, findings and the outbox.
#[derive(Debug, Clone, Default, PartialEq, sqlx::FromRow)]
pub struct TableFigures {
    /// Seconds since the least recently confirmed row was confirmed with
    /// Stripe (`created_at` for never-confirmed rows); 0 for an empty table.
    /// One lookup on the expression index `payments_reconciled_or_created`.
    pub lag_seconds: f64,
    /// Planner estimate of the row count (`pg_class.reltuples`), or an exact
    /// count when the table was never analysed.
    pub rows_estimate: f64,
    /// Lowest and highest `payments.id` (primary key lookups).
    pub min_id: Option<i64>,
    /// See `min_id`.
    pub max_id: Option<i64>,
    /// `reconciliation_cursor.last_id`; 0 when the job never ran.
    pub cursor_position: i64,
    /// When the current cycle started.
    pub cycle_started_at: Option<DateTime<Utc>>,
    /// When the previous cycle completed.
    pub last_cycle_completed_at: Option<DateTime<Utc>>,
    /// Repair commands not yet processed.
    pub outbox_pending: i64,
    /// Age in seconds of the oldest unprocessed repair command; 0 when none.
    pub outbox_oldest_pending_seconds: f64,
}

/// Reads [`TableFigures`] for a job. `repair_types` are the outbox event types
/// of the repair commands (the outbox may be shared).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn table_figures(
    conn: &mut PgConnection,
    job: &str,
    repair_types: &[&str],
) -> Result<TableFigures, StoreError> {
    super::query_as(
        "SELECT coalesce(extract(epoch FROM now() - (SELECT min(coalesce(last_reconciled_at, created_at)) FROM payments)), 0)::float8
                    AS lag_seconds,
                coalesce((SELECT CASE WHEN reltuples >= 0 THEN reltuples::float8 END
                            FROM pg_class WHERE oid = 'payments'::regclass),
                         (SELECT count(*)::float8 FROM payments)) AS rows_estimate,
                (SELECT min(id) FROM payments) AS min_id,
                (SELECT max(id) FROM payments) AS max_id,
                coalesce(c.last_id, 0) AS cursor_position,
                c.cycle_started_at,
                c.last_cycle_completed_at,
                (SELECT count(*) FROM outbox WHERE processed_at IS NULL AND event_type = ANY($2)) AS outbox_pending,
                coalesce((SELECT extract(epoch FROM now() - min(created_at)) FROM outbox
                           WHERE processed_at IS NULL AND event_type = ANY($2)), 0)::float8 AS outbox_oldest_pending_seconds
           FROM (SELECT 1) AS one
           LEFT JOIN reconciliation_cursor c ON c.job = $1",
    )
    .bind(job)
    .bind(repair_types)
    .fetch_one(conn)
    .await
    .context("reading status figures")
}

/// Open findings per kind, most frequent first.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn open_findings_by_kind(
    conn: &mut PgConnection,
) -> Result<Vec<(String, i64)>, StoreError> {
    super::query_as(
        "SELECT kind, count(*) FROM reconciliation_findings WHERE resolved_at IS NULL
          GROUP BY kind ORDER BY count(*) DESC, kind",
    )
    .fetch_all(conn)
    .await
    .context("counting open findings")
}
