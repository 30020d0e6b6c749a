//! The scan as a [`Job`]: the cursor lease (none for a dry run), the run's
//! history row and plan, the batches (`pipeline`), and the summary with the
//! real cursor, also after a failure (`history`).

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::groups::ScanGroups;
use super::history::{finish_record, start_record};
use super::pipeline::{batches, RunOptions};
use super::plan::plan_run;
use super::report::RunSummary;
use crate::job::{run_once, Job, RunContext};
use crate::lease::Lease;
use crate::outcome::{RunError, RunOutcome};
use crate::store::cursor;
use crate::store::lease::LeaseTable;
use crate::stripe::{RequestCounts, StripeGateway};

/// The scan of `stripe-reconciler run [--dry-run]`.
#[derive(Debug, Default)]
pub struct ScanJob {
    /// How to run.
    pub options: RunOptions,
    /// The run's row in `reconciliation_runs`, once recorded.
    run_id: Option<i64>,
    /// The gateway's counts at the start (the run's requests are the difference).
    requests_before: RequestCounts,
}

impl ScanJob {
    /// A scan run with `options`.
    pub fn new(options: RunOptions) -> Self {
        ScanJob {
            options,
            ..ScanJob::default()
        }
    }
}

impl Job for ScanJob {
    type Groups<'s> = ScanGroups<'s>;
    type Summary = RunSummary;
    type Error = RunError;

    fn summary(&self, ctx: &RunContext<'_, Self::Groups<'_>>) -> RunSummary {
        RunSummary {
            job: ctx.settings.run.job.clone(),
            dry_run: self.options.dry_run,
            ..RunSummary::default()
        }
    }

    fn lease(&self, ctx: &RunContext<'_, Self::Groups<'_>>) -> Option<Lease> {
        let s = ctx.settings;
        (!self.options.dry_run)
            .then(|| Lease::new(s.scan, s.stripe, LeaseTable::Cursor, &s.run.job))
    }

    async fn refused(
        &mut self,
        ctx: &RunContext<'_, Self::Groups<'_>>,
        summary: &mut RunSummary,
        error: &RunError,
    ) {
        summary.outcome = error.outcome();
        (summary.cursor_position, summary.cursor_key) =
            real_cursor(ctx.pool, &ctx.settings.run.job).await;
        summary.duration_seconds = ctx.clock.elapsed_seconds();
    }

    async fn body(
        &mut self,
        ctx: &RunContext<'_, Self::Groups<'_>>,
        summary: &mut RunSummary,
    ) -> Result<(), RunError> {
        self.requests_before = ctx.gateway.request_counts();
        if ctx.lease.is_some() {
            self.run_id = start_record(
                ctx.pool,
                ctx.settings.run,
                ctx.settings.scan,
                &ctx.settings.schema.key,
            )
            .await;
        }
        summary.plan = Some(plan_run(ctx.pool, &ctx.settings).await);
        batches(ctx, self.options, summary).await
    }

    async fn finish(
        &mut self,
        ctx: &RunContext<'_, Self::Groups<'_>>,
        summary: &mut RunSummary,
        result: &Result<(), RunError>,
    ) {
        if ctx.lease.is_some() {
            // The real cursor, whatever stopped the run: a failed batch leaves
            // it where the last committed one (or an earlier run) put it.
            (summary.cursor_position, summary.cursor_key) =
                real_cursor(ctx.pool, &ctx.settings.run.job).await;
        }
        summary.duration_seconds = ctx.clock.elapsed_seconds();
        summary.stripe_requests = ctx.gateway.request_counts().since(&self.requests_before);
        // The gateway is the run's: the accounts it found unreachable are this run's.
        summary.stripe_accounts_unreachable = ctx.gateway.accounts().unreachable_count() as u64;
        summary.outcome = match result {
            Ok(()) => RunOutcome::Completed,
            Err(e) => e.outcome(),
        };
        if let Some(id) = self.run_id {
            finish_record(ctx.pool, id, summary).await;
        }
    }
}

/// Runs the scan once ([`run_once`] of a [`ScanJob`]). Always returns the
/// summary of what was committed, with the error that stopped the run, if any.
#[tracing::instrument(name = "run", skip_all, fields(job = %settings.run.job, dry_run = options.dry_run))]
pub async fn run(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &ScanGroups<'_>,
    options: RunOptions,
    shutdown: CancellationToken,
) -> (RunSummary, Result<(), RunError>) {
    let mut ctx = RunContext::new(pool, gateway, *settings, shutdown);
    run_once(&mut ctx, &mut ScanJob::new(options)).await
}

/// The job's cursor as stored: its number (0 at the start or for a key
/// that is not a whole number) and its key; `(None, None)` when it cannot be
/// read.
async fn real_cursor(pool: &PgPool, job: &str) -> (Option<i64>, Option<crate::key::PaymentKey>) {
    let Ok(mut conn) = pool.acquire().await else {
        return (None, None);
    };
    match cursor::read(&mut conn, job).await {
        Ok(row) => {
            let position = row.and_then(|c| c.position);
            (
                Some(position.as_ref().and_then(|p| p.key.as_i64()).unwrap_or(0)),
                position.map(|p| p.key),
            )
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the cursor for the summary");
            (None, None)
        }
    }
}
