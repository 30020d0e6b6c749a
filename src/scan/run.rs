//! The `run` lifecycle: take the cursor lease, run the batches
//! (`pipeline`), give the lease back, and report what was committed
//! with the real cursor, also after a failure (`history`).

use std::time::Instant;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::history::{finish_record, start_record};
use super::pipeline::batches;
use super::plan::plan_run;
use super::report::RunSummary;
use crate::config::JobSettings;
use crate::lease::Lease;
use crate::outcome::{RunError, RunOutcome};
use crate::store::cursor;
use crate::store::lease::LeaseTable;
use crate::stripe::StripeGateway;

/// How to run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Read and classify, write nothing (not even the cursor or run history).
    pub dry_run: bool,
}

/// Runs the job. Always returns the summary of what was committed, with the
/// error that stopped the run, if any.
#[tracing::instrument(name = "run", skip_all, fields(job = %settings.job, dry_run = options.dry_run))]
pub async fn run(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    options: RunOptions,
    shutdown: CancellationToken,
) -> (RunSummary, Result<(), RunError>) {
    let started = Instant::now();
    let requests_before = gateway.request_counts();
    let mut summary = RunSummary {
        job: settings.job.clone(),
        dry_run: options.dry_run,
        ..RunSummary::default()
    };
    let lease = if options.dry_run {
        None
    } else {
        match Lease::new(settings, LeaseTable::Cursor, &settings.job)
            .take(pool)
            .await
        {
            Ok(lease) => Some(lease),
            Err(e) => {
                summary.outcome = e.outcome();
                summary.cursor_position = real_cursor(pool, settings).await;
                summary.duration_seconds = started.elapsed().as_secs_f64();
                return (summary, Err(e));
            }
        }
    };
    let run_id = match lease {
        Some(_) => start_record(pool, settings).await,
        None => None,
    };
    summary.plan = Some(plan_run(pool, settings).await);
    let result = batches(
        pool,
        gateway,
        settings,
        options,
        lease.as_ref(),
        &shutdown,
        &mut summary,
    )
    .await;
    if let Some(lease) = &lease {
        lease.give_back(pool).await;
        // The real cursor, whatever stopped the run: a failed batch leaves it
        // where the last committed one (or an earlier run) put it.
        summary.cursor_position = real_cursor(pool, settings).await;
    }
    summary.duration_seconds = started.elapsed().as_secs_f64();
    summary.stripe_requests = gateway.request_counts().since(&requests_before);
    // The gateway is the run's: the accounts it found unreachable are this run's.
    summary.stripe_accounts_unreachable = gateway.accounts().unreachable_count() as u64;
    summary.outcome = match &result {
        Ok(()) => RunOutcome::Completed,
        Err(e) => e.outcome(),
    };
    if let Some(id) = run_id {
        finish_record(pool, id, &summary).await;
    }
    (summary, result)
}

/// The job's cursor as stored; `None` when it cannot be read.
async fn real_cursor(pool: &PgPool, settings: &JobSettings) -> Option<i64> {
    let mut conn = pool.acquire().await.ok()?;
    match cursor::read(&mut conn, &settings.job).await {
        Ok(row) => Some(row.map_or(0, |c| c.last_id)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the cursor for the summary");
            None
        }
    }
}
