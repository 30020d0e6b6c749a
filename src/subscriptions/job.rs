//! The subscriptions scan as a [`Job`] (docs/subscriptions.md, "Running
//! it"): its own cursor and lease (job `subscriptions-vs-stripe`), its own
//! rows in `reconciliation_runs`, the batches, the summary, and the figures
//! pushed to `job=subscriptions-vs-stripe` with the payments scan's gauge
//! names (the `job` label tells the objects apart).

use super::batch::run_batch;
use super::groups::{job_name, SubscriptionGroups, Target};
use super::plan::batches_to_run;
use super::summary::{self, SubscriptionsSummary};
use crate::config::{LogFormat, RunSettings, Settings};
use crate::facts::TableFacts;
use crate::key::KeyType;
use crate::lease::Lease;
use crate::lifecycle::{Checks, Clock, Job, JobContext, JobSpec, Reported};
use crate::metrics::{RunMetrics, ScanFigures, ScanMetrics};
use crate::outcome::{RunError, RunOutcome};
use crate::reconcile::Verdict;
use crate::store::lease::LeaseTable;
use crate::store::subscriptions::state::{self, SubscriptionFigures};
use crate::store::{runs, Context};
use crate::stripe::{RequestCounts, StripeGateway};

/// `stripe-reconciler run --object subscriptions [--dry-run]`.
#[derive(Debug, Default)]
pub struct SubscriptionsJob {
    /// Read and judge, write nothing.
    pub dry_run: bool,
    /// The run's row in `reconciliation_runs`.
    run_id: Option<i64>,
    /// The gateway's counts at the start.
    requests_before: RequestCounts,
}

impl SubscriptionsJob {
    /// A run (`dry_run`: nothing written).
    pub fn new(dry_run: bool) -> Self {
        SubscriptionsJob {
            dry_run,
            ..SubscriptionsJob::default()
        }
    }
}

impl Job for SubscriptionsJob {
    const SPEC: JobSpec = JobSpec {
        checks: Checks::Subscriptions,
    };
    type Groups<'s> = SubscriptionGroups<'s>;
    type Gateway = StripeGateway;
    type Summary = SubscriptionsSummary;
    type Error = RunError;
    type State = SubscriptionFigures;

    fn groups<'s>(settings: &'s Settings, facts: &'s TableFacts) -> SubscriptionGroups<'s> {
        SubscriptionGroups::of(settings, facts)
    }

    fn summary(&self, ctx: &JobContext<'_, '_, Self>) -> SubscriptionsSummary {
        SubscriptionsSummary {
            job: job_name(ctx.settings.run),
            object: "subscriptions",
            dry_run: self.dry_run,
            ..SubscriptionsSummary::default()
        }
    }

    fn database_down(&self, run: &RunSettings, clock: &Clock) -> SubscriptionsSummary {
        SubscriptionsSummary {
            job: job_name(run),
            object: "subscriptions",
            dry_run: self.dry_run,
            outcome: RunOutcome::DatabaseError,
            duration_seconds: clock.elapsed_seconds(),
            ..SubscriptionsSummary::default()
        }
    }

    fn lease(&self, ctx: &JobContext<'_, '_, Self>) -> Option<Lease> {
        let s = ctx.settings;
        (!self.dry_run).then(|| Lease::new(s.scan, s.stripe, LeaseTable::Cursor, &job_name(s.run)))
    }

    async fn body(
        &mut self,
        ctx: &JobContext<'_, '_, Self>,
        summary: &mut SubscriptionsSummary,
    ) -> Result<(), RunError> {
        self.requests_before = ctx.gateway.request_counts();
        let (Some(table), Some(settings)) = (ctx.settings.table, ctx.settings.settings) else {
            tracing::warn!("RECONCILER_SUBSCRIPTIONS_TABLE is not set: nothing to scan");
            return Ok(());
        };
        let job = summary.job.clone();
        if ctx.lease.is_some() {
            self.run_id = start_record(ctx, &job).await;
        }
        let target = Target {
            job: &job,
            table,
            settings,
            dry_run: self.dry_run,
        };
        let planned = batches_to_run(ctx, table).await;
        for _ in 0..planned {
            if ctx.shutdown.is_cancelled() {
                return Err(RunError::Interrupted);
            }
            let counts = run_batch(ctx, target).await?;
            summary.add(&counts);
            if counts.wrapped || self.dry_run {
                break;
            }
        }
        Ok(())
    }

    async fn finish(
        &mut self,
        ctx: &JobContext<'_, '_, Self>,
        summary: &mut SubscriptionsSummary,
        result: &Result<(), RunError>,
    ) {
        summary.duration_seconds = ctx.clock.elapsed_seconds();
        summary.stripe_requests = ctx.gateway.request_counts().since(&self.requests_before);
        summary.outcome = match result {
            Ok(()) => RunOutcome::Completed,
            Err(e) => e.outcome(),
        };
        if let Some(id) = self.run_id {
            finish_record(ctx, id, summary).await;
        }
    }

    fn reported(summary: &SubscriptionsSummary) -> Reported<'_> {
        Reported {
            group: &summary.job,
            outcome: summary.outcome,
            notifies: !summary.dry_run,
        }
    }

    fn log(summary: &SubscriptionsSummary) {
        summary::log(summary);
    }

    fn print(summary: &SubscriptionsSummary, format: LogFormat) {
        summary::print(summary, format);
    }

    async fn state(&self, ctx: &JobContext<'_, '_, Self>) -> Option<SubscriptionFigures> {
        let job = job_name(ctx.settings.run);
        let read = async {
            let mut conn = crate::store::begin(ctx.pool).await.context("connecting")?;
            state::read(&mut conn, &job, ctx.settings.outbox).await
        };
        match read.await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the subscriptions' state for the metrics");
                None
            }
        }
    }

    fn metrics(
        summary: &SubscriptionsSummary,
        _gateway: &StripeGateway,
        state: Option<&SubscriptionFigures>,
        now: f64,
    ) -> Option<Result<RunMetrics, prometheus::Error>> {
        if summary.dry_run {
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
                metrics.observe_object(s.lag_seconds, &s.open_findings, s.outbox_pending);
            }
        }
        Some(Ok(metrics.into_figures()))
    }
}

/// The figures of a run's summary, in the payments scan's gauges.
fn figures(s: &SubscriptionsSummary) -> ScanFigures {
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
        ..ScanFigures::default()
    }
}

/// The run's row in `reconciliation_runs`; `None` (logged) when it cannot
/// be written.
async fn start_record(ctx: &JobContext<'_, '_, SubscriptionsJob>, job: &str) -> Option<i64> {
    let key = KeyType::from_catalog("text", false).ok()?;
    let mut conn = ctx.pool.acquire().await.ok()?;
    runs::start(&mut conn, job, ctx.settings.scan.batch_size, &key)
        .await
        .map_err(|e| tracing::warn!(error = %e, "could not record the run start"))
        .ok()
}

async fn finish_record(
    ctx: &JobContext<'_, '_, SubscriptionsJob>,
    id: i64,
    s: &SubscriptionsSummary,
) {
    let record = runs::RunRecord {
        batches: i32::try_from(s.batches).unwrap_or(i32::MAX),
        rows_scanned: i64::try_from(s.rows_scanned).unwrap_or(i64::MAX),
        verdicts: s.verdicts.to_json(),
        findings_created: i64::try_from(s.findings_created).unwrap_or(i64::MAX),
        commands_enqueued: i64::try_from(s.commands_enqueued).unwrap_or(i64::MAX),
        wrapped: s.wrapped,
        outcome: s.outcome.as_str(),
    };
    let done = async {
        let mut conn = ctx.pool.acquire().await.context("connecting")?;
        runs::finish(&mut conn, id, &record).await
    };
    if let Err(e) = done.await {
        tracing::warn!(error = %e, "could not record the run end");
    }
}
