//! The run's history row (`reconciliation_runs`): written at the start and
//! the end of a run that holds the lease; a failure to write it never stops
//! the run.

use sqlx::PgPool;

use super::report::RunSummary;
use crate::config::{RunSettings, ScanSettings};
use crate::store::{runs, Context, StoreError};

/// Records the run's start in `reconciliation_runs`; `None` (only logged)
/// when it cannot: the run itself goes on. The row names the run's job and
/// its batch size (rows).
pub(super) async fn start_record(
    pool: &PgPool,
    run: &RunSettings,
    scan: &ScanSettings,
    key: &crate::key::KeyType,
) -> Option<i64> {
    let mut conn = pool.acquire().await.ok()?;
    match runs::start(&mut conn, &run.job, scan.batch_size, key).await {
        Ok(id) => Some(id),
        Err(e) => {
            tracing::warn!(error = %e, "could not record the run start");
            None
        }
    }
}

/// Records the run's end; a failure is only logged.
pub(super) async fn finish_record(pool: &PgPool, run_id: i64, s: &RunSummary) {
    let record = runs::RunRecord {
        batches: i32::try_from(s.batches).unwrap_or(i32::MAX),
        rows_scanned: i64::try_from(s.rows_scanned).unwrap_or(i64::MAX),
        verdicts: s.verdicts.to_json(),
        findings_created: i64::try_from(s.findings_created).unwrap_or(i64::MAX),
        commands_enqueued: i64::try_from(s.commands_enqueued).unwrap_or(i64::MAX),
        wrapped: s.wrapped,
        outcome: s.outcome.as_str(),
    };
    let result: Result<(), StoreError> = async {
        let mut conn = pool.acquire().await.context("connecting")?;
        runs::finish(&mut conn, run_id, &record).await
    }
    .await;
    if let Err(e) = result {
        tracing::warn!(error = %e, "could not record the run end");
    }
}
