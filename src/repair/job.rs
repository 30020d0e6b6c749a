//! `repair` as a [`Job`] (docs/review.md): the outbox drained by the
//! canonical writer, through the same lifecycle as the scheduled jobs, with
//! no lease (the rows' locks order the workers), no Stripe gateway and no
//! push. A `debezium`-shaped outbox is the application's relay's to
//! deliver: the run says so and drains nothing.

use super::worker::{drain_with, RepairOptions, RepairReport};
use crate::config::{LogFormat, OutboxSettings, RunSettings, SchemaSettings, Settings};
use crate::facts::TableFacts;
use crate::lease::Lease;
use crate::lifecycle::{Checks, Clock, Job, JobContext, JobSpec, NoGateway, Reported};
use crate::metrics::RunMetrics;
use crate::outcome::{RunError, RunOutcome};

/// The outbox worker of `stripe-reconciler repair`.
#[derive(Debug, Default)]
pub struct RepairJob;

/// What `repair` works with, as references into [`Settings`]: the outbox
/// and how `payments` is read (the status words, the Checkout Session
/// column, the time zone).
#[derive(Debug, Clone, Copy)]
pub struct RepairGroups<'a> {
    /// `RECONCILER_OUTBOX_TABLE` and `RECONCILER_OUTBOX_SHAPE`.
    pub outbox: &'a OutboxSettings,
    /// How `payments` is read.
    pub schema: &'a SchemaSettings,
    /// The subscriptions table as checked at start (`None`: not configured).
    pub subscriptions: Option<&'a crate::facts::SubscriptionTable>,
}

/// What one `repair` did: its report, or `None` when the outbox is not the
/// reconciler's to drain (nothing printed).
#[derive(Debug, Default)]
pub struct RepairSummary {
    /// The commands applied, no-op, failed and stuck.
    pub report: Option<RepairReport>,
    /// How the run ended.
    pub outcome: RunOutcome,
}

impl crate::lifecycle::Ended for RepairSummary {
    fn ended(&mut self, outcome: RunOutcome, duration_seconds: f64) {
        // The repair summary records no duration.
        let _ = duration_seconds;
        self.outcome = outcome;
    }
}

impl Job for RepairJob {
    const SPEC: JobSpec = JobSpec {
        checks: Checks::Schema,
    };
    type Groups<'s> = RepairGroups<'s>;
    type Gateway = NoGateway;
    type Summary = RepairSummary;
    type Error = RunError;
    type State = ();

    fn groups<'s>(settings: &'s Settings, facts: &'s TableFacts) -> RepairGroups<'s> {
        RepairGroups {
            outbox: &settings.outbox,
            schema: &settings.schema,
            subscriptions: facts.subscriptions.as_ref(),
        }
    }

    fn summary(&self, _ctx: &JobContext<'_, '_, Self>) -> RepairSummary {
        RepairSummary::default()
    }

    fn database_down(&self, _run: &RunSettings, _clock: &Clock) -> RepairSummary {
        RepairSummary {
            report: None,
            outcome: RunOutcome::DatabaseError,
        }
    }

    fn lease(&self, _ctx: &JobContext<'_, '_, Self>) -> Option<Lease> {
        None
    }

    async fn refused(
        &mut self,
        _ctx: &JobContext<'_, '_, Self>,
        _summary: &mut RepairSummary,
        _error: &RunError,
    ) {
    }

    /// Drains the repair commands; a `debezium`-shaped outbox is said and
    /// left alone.
    async fn body(
        &mut self,
        ctx: &JobContext<'_, '_, Self>,
        summary: &mut RepairSummary,
    ) -> Result<(), RunError> {
        let RepairGroups {
            outbox,
            schema,
            subscriptions,
        } = ctx.settings;
        if !outbox.shape.drained_by_reconciler() {
            println!(
                "the outbox {} has the {} shape: the application's relay delivers its commands to the application's canonical writer; `repair` has nothing to drain",
                outbox.table.display(),
                outbox.shape.as_str()
            );
            return Ok(());
        }
        let options = RepairOptions {
            outbox: outbox.clone(),
            checkout_session_column: schema.checkout_session_column.clone(),
            timestamp_zone: schema.timestamp_zone.clone(),
            subscriptions: subscriptions.cloned(),
            ..RepairOptions::default()
        };
        let report = drain_with(ctx.pool, options, &schema.statuses, &ctx.shutdown).await?;
        summary.report = Some(report);
        // Stopped by a signal: what was drained stays (and is printed), the
        // run failed.
        if ctx.shutdown.is_cancelled() {
            return Err(RunError::Interrupted);
        }
        Ok(())
    }

    async fn finish(
        &mut self,
        _ctx: &JobContext<'_, '_, Self>,
        summary: &mut RepairSummary,
        result: &Result<(), RunError>,
    ) {
        summary.outcome = match result {
            Ok(()) => RunOutcome::Completed,
            Err(e) => e.outcome(),
        };
    }

    fn reported(summary: &RepairSummary) -> Reported<'_> {
        Reported {
            group: "",
            outcome: summary.outcome,
            notifies: false,
        }
    }

    fn log(summary: &RepairSummary) {
        if let Some(report) = &summary.report {
            tracing::info!(
                applied = report.applied,
                no_op = report.no_op,
                failed = report.failed,
                stuck = report.stuck,
                "repair summary"
            );
        }
    }

    /// One JSON line, whatever the log format.
    fn print(summary: &RepairSummary, _format: LogFormat) {
        if let Some(report) = &summary.report {
            match serde_json::to_string(report) {
                Ok(line) => println!("{line}"),
                Err(e) => tracing::error!(error = %e, "cannot serialise the repair report"),
            }
        }
    }

    async fn state(&self, _ctx: &JobContext<'_, '_, Self>) -> Option<()> {
        None
    }

    /// `repair` pushes nothing.
    fn metrics(
        _summary: &RepairSummary,
        _gateway: &NoGateway,
        _state: Option<&()>,
        _now: f64,
    ) -> Option<Result<RunMetrics, prometheus::Error>> {
        None
    }
}
