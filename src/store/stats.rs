//! Read-only figures for `status` and the metrics. Every query here stays an
//! index lookup or a small aggregate on a 10M-row `payments` table; what the
//! scan confirmed is read from `reconciliation_payment_state`, never `payments`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{payment_state, Context, StoreError};
use crate::config::{OutboxSettings, OutboxShape};

/// Figures about `payments` and the cursor.
#[derive(Debug, Clone, Default, PartialEq, sqlx::FromRow)]
pub struct TableFigures {
    /// Seconds since the least recently confirmed row was confirmed with
    /// Stripe (`created_at` for never-confirmed rows); 0 for an empty table.
    /// See [`lag_since`] for how it stays exact and an index lookup.
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
    /// The database's clock (`now()`), the one clock every age is measured
    /// with, like the lag.
    pub database_now: DateTime<Utc>,
}

/// The SQL of the instant the reconciliation lag counts from: the least of
/// `coalesce(last_reconciled_at, created_at)` over every payment, read from
/// the reconciler's own `reconciliation_payment_state` (one lookup on its
/// expression index `reconciliation_payment_state_lag`), and of `created_at`
/// over the payments beyond its highest id, never seen yet (a primary-key
/// range of the rows inserted since the last batch registered new rows:
/// [`payment_state::register_new`]). Exact per row like the seed's
/// `min(coalesce(last_reconciled_at, created_at))` over `payments`, except for
/// a transaction that commits below the highest seen id after the scan passed
/// it: it counts once a batch reads it (the next batch, or the next cycle), and
/// a deleted payment counts until the cursor passes its id. NULL for an empty
/// table. `{head}` is the parameter holding
/// [`payment_state::highest_seen`], bound as a value so that the planner
/// reads the rows beyond it by primary key.
pub fn lag_since(head: &str) -> String {
    format!(
        "least(
    (SELECT min(coalesce(last_reconciled_at, created_at)) FROM reconciliation_payment_state),
    (SELECT min(created_at) FROM payments WHERE id > {head}))"
    )
}

/// Reads [`TableFigures`] for a job.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn table_figures(conn: &mut PgConnection, job: &str) -> Result<TableFigures, StoreError> {
    let head = payment_state::highest_seen(&mut *conn).await?;
    super::query_as(&format!(
        "SELECT coalesce(extract(epoch FROM now() - {}), 0)::float8 AS lag_seconds,
                coalesce((SELECT CASE WHEN reltuples >= 0 THEN reltuples::float8 END
                            FROM pg_class WHERE oid = 'payments'::regclass),
                         (SELECT count(*)::float8 FROM payments)) AS rows_estimate,
                (SELECT min(id) FROM payments) AS min_id,
                (SELECT max(id) FROM payments) AS max_id,
                coalesce(c.last_id, 0) AS cursor_position,
                c.cycle_started_at,
                c.last_cycle_completed_at,
                now() AS database_now
           FROM (SELECT 1) AS one
           LEFT JOIN reconciliation_cursor c ON c.job = $1",
        lag_since("$2")
    ))
    .bind(job)
    .bind(head)
    .fetch_one(conn)
    .await
    .context("reading status figures")
}

/// The backlog of the repair commands in an outbox our `repair` worker drains.
#[derive(Debug, Clone, Copy, Default, PartialEq, sqlx::FromRow)]
pub struct OutboxFigures {
    /// Repair commands not yet processed.
    pub pending: i64,
    /// Age in seconds of the oldest unprocessed repair command (measured with
    /// the database's clock); 0 when none.
    pub oldest_pending_seconds: f64,
}

/// Reads [`OutboxFigures`] from `RECONCILER_OUTBOX_TABLE`. `repair_types` are
/// the event types of the repair commands (the outbox may be shared).
/// `None` for a `debezium` outbox (DESIGN.md, Turn 3 contract): the
/// application's relay drains it, deleting or keeping rows as it likes, so no
/// count there tells a pending command from a delivered one.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn outbox_figures(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    repair_types: &[&str],
) -> Result<Option<OutboxFigures>, StoreError> {
    if outbox.shape == OutboxShape::Debezium {
        return Ok(None);
    }
    let table = outbox.table.quoted();
    let sql = format!(
        "SELECT count(*) AS pending,
                coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_pending_seconds
           FROM {table} WHERE processed_at IS NULL AND event_type = ANY($1)"
    );
    super::query_as(&sql)
        .bind(repair_types)
        .fetch_one(conn)
        .await
        .context("reading the outbox backlog")
        .map(Some)
}

/// Open findings per kind.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn open_findings_by_kind(
    conn: &mut PgConnection,
) -> Result<BTreeMap<String, i64>, StoreError> {
    let rows: Vec<(String, i64)> = super::query_as(
        "SELECT kind, count(*) FROM reconciliation_findings WHERE resolved_at IS NULL
          GROUP BY kind",
    )
    .fetch_all(conn)
    .await
    .context("counting open findings")?;
    Ok(rows.into_iter().collect())
}

/// The payment that holds the reconciliation lag: the least recently
/// confirmed row (never-confirmed rows count from `created_at`; the same rows
/// as [`lag_since`]), with what a person needs to look into it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct LagHolder {
    /// `payments.id`
    pub payment_id: i64,
    /// The payment's order.
    pub order_id: Option<String>,
    /// The stored PaymentIntent id (may be malformed).
    pub stripe_payment_intent_id: Option<String>,
    /// `payments.status` (an application's table may hold NULL).
    pub status: Option<String>,
    /// When the row was created.
    pub created_at: DateTime<Utc>,
    /// When the row last changed (a recent change keeps it `in_flight`).
    pub updated_at: DateTime<Utc>,
    /// When Stripe last confirmed it; `None`: never.
    pub last_reconciled_at: Option<DateTime<Utc>>,
    /// Its newest open finding, if any.
    pub open_finding_id: Option<i64>,
    /// That finding's kind.
    pub open_finding_kind: Option<String>,
    /// The last error of its unprocessed repair command, if one failed.
    pub repair_last_error: Option<String>,
}

/// The payment holding the lag (see [`LagHolder`]); `None` for an empty
/// table. One lookup on the expression index
/// `reconciliation_payment_state_lag`, and a primary-key range of the
/// payments never seen (see [`lag_since`]). Its repair's last error comes
/// from `RECONCILER_OUTBOX_TABLE`; a `debezium` outbox records none (the
/// application's relay handles failures), so it is `None` there.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn lag_holder(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    repair_types: &[&str],
) -> Result<Option<LagHolder>, StoreError> {
    let head = payment_state::highest_seen(&mut *conn).await?;
    let repair_last_error = match outbox.shape {
        OutboxShape::Reconciler => format!(
            "(SELECT o.last_error FROM {} o
                  WHERE o.aggregate_type = 'Payment' AND o.aggregate_id = p.id::text
                    AND o.processed_at IS NULL AND o.last_error IS NOT NULL
                    AND o.event_type = ANY($2)
                  ORDER BY o.id DESC LIMIT 1)",
            outbox.table.quoted()
        ),
        OutboxShape::Debezium => "NULL::text".to_owned(),
    };
    let sql = format!(
        "SELECT p.id AS payment_id, p.order_id, p.stripe_payment_intent_id, p.status,
                p.created_at, p.updated_at, h.last_reconciled_at,
                f.id AS open_finding_id, f.kind AS open_finding_kind,
                {repair_last_error} AS repair_last_error
           FROM (SELECT * FROM
                   ((SELECT payment_id, last_reconciled_at,
                            coalesce(last_reconciled_at, created_at) AS since
                       FROM reconciliation_payment_state
                      ORDER BY coalesce(last_reconciled_at, created_at) LIMIT 1)
                    UNION ALL
                    (SELECT id, NULL::timestamptz, created_at FROM payments
                      WHERE id > $1
                      ORDER BY created_at LIMIT 1)) AS candidates
                  ORDER BY since LIMIT 1) AS h
           JOIN payments p ON p.id = h.payment_id
           LEFT JOIN LATERAL (SELECT id, kind FROM reconciliation_findings
                               WHERE payment_id = p.id AND resolved_at IS NULL
                               ORDER BY id DESC LIMIT 1) AS f ON true"
    );
    let query = super::query_as(&sql).bind(head);
    let query = match outbox.shape {
        OutboxShape::Reconciler => query.bind(repair_types),
        OutboxShape::Debezium => query,
    };
    query
        .fetch_optional(conn)
        .await
        .context("finding the payment that holds the lag")
}
