//! The scan as a [`Job`] (docs/scan.md): the cursor lease (none for a dry
//! run), the run's history row and plan, the batches (`pipeline`), the
//! summary with the real cursor, also after a failure (`history`), and what
//! the lifecycle reports: the summary logged and printed (`print`), the
//! job's state ([`crate::status`]) and the figures pushed to
//! `job=<RECONCILER_JOB>`.

use std::time::Duration;

use sqlx::PgPool;

use super::groups::ScanGroups;
use super::history::{finish_record, start_record};
use super::pipeline::{batches, RunOptions};
use super::plan::plan_run;
use super::print::{log_summary, print_summary};
use super::report::RunSummary;
use crate::config::{LogFormat, RunSettings, Settings, STRIPE_EVENTS_RETENTION};
use crate::facts::TableFacts;
use crate::lease::Lease;
use crate::lifecycle::{Checks, Clock, Job, JobContext, JobSpec, Reported};
use crate::metrics::{RunMetrics, ScanFigures, ScanMetrics};
use crate::outcome::{RunError, RunOutcome};
use crate::reconcile::Verdict;
use crate::status::{self, Status, StatusQuery};
use crate::store::cursor;
use crate::store::lease::LeaseTable;
use crate::store::Context;
use crate::stripe::{RequestCounts, StripeGateway};

/// Stripe's default per-endpoint rate limit (docs/scan.md, "Stripe").
const STRIPE_ENDPOINT_LIMIT_RPS: u32 = 25;

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
    const SPEC: JobSpec = JobSpec {
        checks: Checks::Reads {
            partition_index: true,
        },
    };
    type Groups<'s> = ScanGroups<'s>;
    type Gateway = StripeGateway;
    type Summary = RunSummary;
    type Error = RunError;
    type State = Status;

    fn groups<'s>(settings: &'s Settings, facts: &'s TableFacts) -> ScanGroups<'s> {
        ScanGroups::of(settings, facts)
    }

    fn check(&self, settings: &Settings) {
        if settings.stripe.rate_limit_rps > STRIPE_ENDPOINT_LIMIT_RPS {
            tracing::warn!(
                rate_limit_rps = settings.stripe.rate_limit_rps,
                "RECONCILER_RATE_LIMIT_RPS is above Stripe's {STRIPE_ENDPOINT_LIMIT_RPS}/s limit on this endpoint, which the application shares; use this only against a local stand-in"
            );
        }
    }

    fn summary(&self, ctx: &JobContext<'_, '_, Self>) -> RunSummary {
        RunSummary {
            job: ctx.settings.run.job.clone(),
            dry_run: self.options.dry_run,
            ..RunSummary::default()
        }
    }

    fn database_down(&self, run: &RunSettings, clock: &Clock) -> RunSummary {
        RunSummary {
            job: run.job.clone(),
            dry_run: self.options.dry_run,
            outcome: RunOutcome::DatabaseError,
            duration_seconds: clock.elapsed_seconds(),
            ..RunSummary::default()
        }
    }

    fn lease(&self, ctx: &JobContext<'_, '_, Self>) -> Option<Lease> {
        let s = ctx.settings;
        (!self.options.dry_run)
            .then(|| Lease::new(s.scan, s.stripe, LeaseTable::Cursor, &s.run.job))
    }

    async fn refused(
        &mut self,
        ctx: &JobContext<'_, '_, Self>,
        summary: &mut RunSummary,
        error: &RunError,
    ) {
        // The cursor where it really is (the summary shows it), then what
        // every job records of a refused run (`Job::refused`'s default).
        (summary.cursor_position, summary.cursor_key) =
            real_cursor(ctx.pool, &ctx.settings.run.job).await;
        crate::lifecycle::Ended::ended(summary, error.outcome(), ctx.clock.elapsed_seconds());
    }

    async fn body(
        &mut self,
        ctx: &JobContext<'_, '_, Self>,
        summary: &mut RunSummary,
    ) -> Result<(), RunError> {
        self.requests_before = ctx.gateway.request_counts();
        if ctx.lease.is_some() {
            self.run_id = start_record(
                ctx.pool,
                ctx.settings.run,
                ctx.settings.scan,
                &ctx.settings.facts.key,
            )
            .await;
        }
        if ctx.lease.is_some() && ctx.settings.facts.key.own_copy() {
            register_own_copy(ctx.pool, ctx.settings.facts).await?;
        }
        summary.plan = Some(plan_run(ctx.pool, &ctx.settings).await);
        batches(ctx, self.options, summary).await
    }

    async fn finish(
        &mut self,
        ctx: &JobContext<'_, '_, Self>,
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

    fn reported(summary: &RunSummary) -> Reported<'_> {
        Reported {
            group: &summary.job,
            outcome: summary.outcome,
            notifies: !summary.dry_run,
        }
    }

    fn log(summary: &RunSummary) {
        log_summary(summary);
    }

    fn print(summary: &RunSummary, format: LogFormat) {
        print_summary(summary, format);
    }

    async fn state(&self, ctx: &JobContext<'_, '_, Self>) -> Option<Status> {
        // After a signal, the pod has its termination grace period (30 s by
        // default) for the state query and the push: keep both short.
        let timeout = if ctx.shutdown.is_cancelled() {
            Duration::from_secs(5)
        } else {
            Duration::from_secs(30)
        };
        read_status(ctx.pool, &ctx.settings, timeout).await
    }

    fn metrics(
        summary: &RunSummary,
        _gateway: &StripeGateway,
        state: Option<&Status>,
        now: f64,
    ) -> Option<Result<RunMetrics, prometheus::Error>> {
        if summary.dry_run {
            tracing::info!("dry run: metrics not pushed");
            return None;
        }
        let mut metrics = match ScanMetrics::new() {
            Ok(m) => m,
            Err(e) => return Some(Err(e)),
        };
        if summary.outcome == RunOutcome::ConcurrentRun {
            metrics.observe_concurrent_run(now);
        } else {
            metrics.observe_run(&figures(summary), now);
            if let Some(s) = state {
                metrics.observe_status(s);
            }
        }
        Some(Ok(metrics.into_figures()))
    }
}

/// The figures of a run's summary, as the metrics take them.
pub fn figures(s: &RunSummary) -> ScanFigures {
    ScanFigures {
        duration_seconds: s.duration_seconds,
        outcome: s.outcome,
        rows_scanned: s.rows_scanned,
        batches: s.batches,
        findings_created: s.findings_created,
        commands_enqueued: s.commands_enqueued,
        wrapped: s.wrapped,
        verdicts: Verdict::ALL
            .into_iter()
            .map(|v| (v, s.verdicts.get(v)))
            .collect(),
        stripe_requests: s.stripe_requests,
        accounts_unreachable: s.stripe_accounts_unreachable,
        pending_without_payment_intent: s.pending_without_payment_intent,
        cursor_position: s.cursor_position,
        plan: s.plan,
    }
}

/// Registers the payments inserted since the last run in the reconciler's
/// own ordered copy, once at the start of a run that walks it (docs/keys.md,
/// "The walk"): the batches then walk the copy only.
///
/// # Errors
/// [`RunError::Store`] from the database.
async fn register_own_copy(pool: &PgPool, facts: &TableFacts) -> Result<(), RunError> {
    let started = std::time::Instant::now();
    let mut conn = pool.acquire().await.context("connecting")?;
    let registered = crate::store::payment_state::register_unseen(&mut conn, &facts.times).await?;
    tracing::info!(
        registered,
        seconds = started.elapsed().as_secs_f64(),
        "payments inserted since the last run registered in the reconciler's ordered copy (the walk of a table without an index on created_at)"
    );
    Ok(())
}

/// The job's state for the push (no plan, no events figures: the scan's
/// gauges use neither), within `timeout`; `None` when it cannot be read
/// (logged).
async fn read_status(pool: &PgPool, job: &ScanGroups<'_>, timeout: Duration) -> Option<Status> {
    let query = StatusQuery {
        job: &job.run.job,
        events_job: None,
        outbox: job.outbox,
        partition: job.facts.partition.as_ref(),
        times: &job.facts.times,
        key: None,
        account_active: STRIPE_EVENTS_RETENTION,
        plan: None,
    };
    let read = async {
        let mut conn = crate::store::begin(pool).await.context("connecting")?;
        status::read_query(&mut conn, &query).await
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(s)) => {
            if let Some(c) = s.capacity.filter(|c| c.ratio <= 1.0) {
                tracing::warn!(
                    capacity_ratio = c.ratio,
                    scanned_rows_per_hour = c.scanned_rows_per_hour,
                    new_rows_per_hour = c.new_rows_per_hour,
                    "capacity ratio B*R/G is at or below 1: the cursor will never complete a cycle; raise RECONCILER_BATCH_SIZE or run more often"
                );
            }
            Some(s)
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "cannot read the job's state for the metrics");
            None
        }
        Err(_) => {
            tracing::error!("reading the job's state for the metrics timed out");
            None
        }
    }
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
