//! The [`Job`] trait every scheduled job implements (the scan of `run`, the
//! events feed of `events`, the outbox worker of `repair`), its
//! [`JobSpec`], and [`run_once`], the one place a run takes its lease, runs
//! its body, gives the lease back and completes its summary. The checklist
//! of what a new job touches is docs/layout.md, "Adding a job".

use super::context::{Clock, Gateway, RunContext};
use super::error::Failure;
use crate::config::{LogFormat, RunSettings, Settings};
use crate::facts::TableFacts;
use crate::lease::Lease;
use crate::metrics::RunMetrics;
use crate::outcome::{RunError, RunOutcome};

/// The start-up checks a job needs before its run (exit 78 naming what to
/// fix; [`crate::preflight`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checks {
    /// The schema only: `payments.id`'s key type, the outbox's shape and the
    /// time zone, and the subscriptions table when configured (`repair`).
    Schema,
    /// What a run that reads `payments` relies on: the schema, the key
    /// columns aligned, the PaymentIntent index, the configured columns,
    /// and the partition's index when `partition_index` (the scan reads
    /// every batch by it; the events job looks rows up by PaymentIntent).
    Reads {
        /// Whether the partition's `(column, id)` index is required.
        partition_index: bool,
    },
    /// The schema, then the subscriptions table and its configured columns
    /// (`run --object subscriptions`; docs/subscriptions.md).
    Subscriptions,
}

/// What the lifecycle needs to know of a job before it runs: data, not
/// behaviour.
#[derive(Debug, Clone, Copy)]
pub struct JobSpec {
    /// The start-up checks.
    pub checks: Checks,
}

/// How a finished run is reported: its Pushgateway group, its outcome, and
/// whether it may post its new findings to `RECONCILER_NOTIFY_URL`.
#[derive(Debug, Clone, Copy)]
pub struct Reported<'a> {
    /// The Pushgateway group (`job=<group>`) and the notification's job.
    pub group: &'a str,
    /// The run's outcome.
    pub outcome: RunOutcome,
    /// Whether the run posts its new findings (a dry run wrote none).
    pub notifies: bool,
}

/// How a run ended, as its summary records it: the outcome and, where the
/// summary has one, the run's duration.
pub trait Ended {
    /// Records the run's `outcome` and its `duration_seconds` (seconds since
    /// the run started; a summary without a duration ignores it).
    fn ended(&mut self, outcome: RunOutcome, duration_seconds: f64);
}

/// A job's run context: its settings groups and its gateway.
pub type JobContext<'a, 'g, J> = RunContext<'a, <J as Job>::Groups<'g>, <J as Job>::Gateway>;

/// One scheduled job: what its run leases, does, reports and pushes.
///
/// A run is [`run_once`]: [`Job::summary`], then the lease
/// ([`Job::lease`]; refused: [`Job::refused`]), then [`Job::body`], the lease
/// given back, and [`Job::finish`]. Around it, [`crate::lifecycle::run`]
/// builds [`Job::Gateway`], checks [`JobSpec::checks`], and after the run
/// logs ([`Job::log`]), prints ([`Job::print`]), reads [`Job::state`] and
/// pushes [`Job::metrics`].
// The jobs run on the caller's task (never spawned): no `Send` bound is needed.
#[allow(async_fn_in_trait)]
pub trait Job {
    /// What the lifecycle checks before the run.
    const SPEC: JobSpec;
    /// The settings groups the run works with: references into
    /// [`Settings`] (e.g. the scan's `ScanGroups`).
    type Groups<'s>: Copy;
    /// What the run reads Stripe through ([`crate::stripe::StripeGateway`]
    /// or [`super::NoGateway`]).
    type Gateway: Gateway;
    /// What the run reports (printed, logged, pushed).
    type Summary: Ended;
    /// Why a run stopped early; a refused lease is a [`RunError`].
    type Error: Failure + From<RunError>;
    /// The job's stored state, read after the run for the push.
    type State;

    /// The job's settings groups of `settings`, with what the start-up
    /// checks learned of the database (`facts`).
    fn groups<'s>(settings: &'s Settings, facts: &'s TableFacts) -> Self::Groups<'s>;

    /// Warnings about the settings, before anything runs.
    fn check(&self, _settings: &Settings) {}

    /// The summary before anything ran (its job name set).
    fn summary(&self, ctx: &JobContext<'_, '_, Self>) -> Self::Summary;

    /// The summary of a run that could not reach the database.
    fn database_down(&self, run: &RunSettings, clock: &Clock) -> Self::Summary;

    /// The lease the run holds (not taken yet), or `None` for a run that
    /// takes none (a dry run, `repair`).
    fn lease(&self, ctx: &JobContext<'_, '_, Self>) -> Option<Lease>;

    /// The lease was not taken (held by another run, or the database
    /// failed): completes the summary with `error` (its outcome, and the
    /// run's duration so far).
    async fn refused(
        &mut self,
        ctx: &JobContext<'_, '_, Self>,
        summary: &mut Self::Summary,
        error: &RunError,
    ) {
        summary.ended(error.outcome(), ctx.clock.elapsed_seconds());
    }

    /// The job's work, with the lease (if any) in [`RunContext::lease`].
    ///
    /// # Errors
    /// [`Job::Error`]: what was committed before it stays committed.
    async fn body(
        &mut self,
        ctx: &JobContext<'_, '_, Self>,
        summary: &mut Self::Summary,
    ) -> Result<(), Self::Error>;

    /// After the body and the lease given back: completes the summary (the
    /// outcome from `result`, the duration from [`RunContext::clock`]).
    async fn finish(
        &mut self,
        ctx: &JobContext<'_, '_, Self>,
        summary: &mut Self::Summary,
        result: &Result<(), Self::Error>,
    );

    /// The summary's Pushgateway group, its outcome, and whether it notifies.
    fn reported(summary: &Self::Summary) -> Reported<'_>;

    /// Logs the summary (one tracing event).
    fn log(summary: &Self::Summary);

    /// Prints the summary on stdout: JSON for machines, a table for people.
    fn print(summary: &Self::Summary, format: LogFormat);

    /// The job's stored state after the run; `None` when it cannot be read
    /// (logged) or the job pushes none.
    async fn state(&self, ctx: &JobContext<'_, '_, Self>) -> Option<Self::State>;

    /// The figures to push (`None`: nothing is pushed, e.g. a dry run).
    ///
    /// # Errors
    /// [`prometheus::Error`] when the gauges cannot be registered.
    fn metrics(
        summary: &Self::Summary,
        gateway: &Self::Gateway,
        state: Option<&Self::State>,
        now: f64,
    ) -> Option<Result<RunMetrics, prometheus::Error>>;
}

/// Runs `job` once in `ctx`: lease, body, lease given back, summary. Always
/// returns the summary of what was committed, with the error that stopped
/// the run, if any. [`RunContext::lease`] holds the lease taken (still set
/// after it was given back, so [`Job::finish`] knows the run held one).
pub async fn run_once<J: Job>(
    ctx: &mut JobContext<'_, '_, J>,
    job: &mut J,
) -> (J::Summary, Result<(), J::Error>) {
    let mut summary = job.summary(ctx);
    if let Some(lease) = job.lease(ctx) {
        match lease.take(ctx.pool).await {
            Ok(lease) => ctx.lease = Some(lease),
            Err(e) => {
                job.refused(ctx, &mut summary, &e).await;
                return (summary, Err(e.into()));
            }
        }
    }
    let result = job.body(ctx, &mut summary).await;
    if let Some(lease) = &ctx.lease {
        lease.give_back(ctx.pool).await;
    }
    job.finish(ctx, &mut summary, &result).await;
    (summary, result)
}
