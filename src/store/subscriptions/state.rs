//! The subscriptions job's figures for `status` and the metrics: rows
//! confirmed, the lag (the longest a row has gone unconfirmed), open
//! subscription findings by kind, repair commands pending.

use sqlx::PgConnection;

use super::{APPLY_SUBSCRIPTION_STATE, KIND_PREFIX};
use crate::config::OutboxSettings;
use crate::store::{Context, StoreError};

/// What `status` shows of the subscriptions job.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SubscriptionFigures {
    /// Rows the job has confirmed with Stripe at least once.
    pub rows_confirmed: i64,
    /// Seconds since the least recently confirmed row was confirmed; `None`
    /// before any.
    pub lag_seconds: Option<f64>,
    /// Open findings by kind.
    pub open_findings: Vec<(String, i64)>,
    /// `ApplySubscriptionState` commands not yet processed; `None` for a
    /// relayed outbox (not ours to count).
    pub outbox_pending: Option<i64>,
}

/// Reads the job's figures.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read(
    conn: &mut PgConnection,
    job: &str,
    outbox: &OutboxSettings,
) -> Result<SubscriptionFigures, StoreError> {
    let (rows_confirmed, lag_seconds): (i64, Option<f64>) = crate::store::query_as(
        "SELECT count(*) FILTER (WHERE last_reconciled_at IS NOT NULL),
                extract(epoch FROM now() - min(coalesce(last_reconciled_at, first_seen_at)))::float8
           FROM reconciliation_subscription_state WHERE job = $1",
    )
    .bind(job)
    .fetch_one(&mut *conn)
    .await
    .context("reading the subscriptions' state")?;
    let open_findings = crate::store::query_as(
        "SELECT kind, count(*) FROM reconciliation_findings
          WHERE resolved_at IS NULL AND kind LIKE $1 || '%'
          GROUP BY kind ORDER BY kind",
    )
    .bind(KIND_PREFIX.replace('_', "\\_"))
    .fetch_all(&mut *conn)
    .await
    .context("counting open subscription findings")?;
    let outbox_pending = if outbox.shape.drained_by_reconciler() {
        crate::store::query_scalar(&format!(
            "SELECT count(*) FROM {} WHERE processed_at IS NULL AND event_type = $1",
            outbox.table.quoted()
        ))
        .bind(APPLY_SUBSCRIPTION_STATE)
        .fetch_one(conn)
        .await
        .context("counting pending subscription repairs")
        .map(Some)?
    } else {
        None
    };
    Ok(SubscriptionFigures {
        rows_confirmed,
        lag_seconds,
        open_findings,
        outbox_pending,
    })
}

/// The catalogue's estimate of the table's rows (`reltuples`, summed over
/// partitions); `None` for a table never analysed.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn estimated_rows(
    conn: &mut PgConnection,
    table: &str,
) -> Result<Option<f32>, StoreError> {
    crate::store::query_scalar(
        "SELECT CASE WHEN bool_and(c.reltuples < 0) THEN NULL
                     ELSE sum(greatest(c.reltuples, 0))::real END
           FROM pg_class c
          WHERE c.oid = to_regclass($1)
             OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass($1))",
    )
    .bind(table)
    .fetch_one(conn)
    .await
    .context("estimating the subscriptions table's size")
}
