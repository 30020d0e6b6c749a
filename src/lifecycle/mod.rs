//! The lifecycle of a scheduled job's command (`run`, `events`), in one
//! function, [`run`]: the Stripe gateway, the shutdown signal, the database
//! (down: a failed summary is still pushed), the preflight checks, then the
//! job's run ([`crate::job::run_once`]: lease, body, summary), the summary
//! logged and printed, the job's state read and the figures pushed, the new
//! findings notified ([`crate::notify`]; not after a dry run), and the exit
//! code. A job plugs in by implementing [`crate::job::Job`] (its run) and
//! [`Report`] (its summary and figures).
//!
//! - `error`: [`CommandError`], why a subcommand failed, and its exit code.
//! - [`preflight`]: the start-up checks of the schema and settings (exit 78).
//! - `push`: the push of a run's figures, decided the same way for every job.
//! - `scan`: the scan's [`Report`].
//! - `events`: the events job's [`Report`].

mod error;
mod events;
mod push;
mod scan;

pub use error::CommandError;

use crate::config::{LogFormat, RunSettings, Settings};
use crate::job::{run_once, Clock, Job, RunContext};
use crate::metrics::RunMetrics;
use crate::outcome::RunOutcome;
use crate::preflight;
use crate::shutdown;
use crate::stripe::StripeGateway;

/// What a scheduled job reports: its summary to people and logs, and its
/// figures to the Pushgateway.
// The jobs run on the caller's task (never spawned): no `Send` bound is needed.
#[allow(async_fn_in_trait)]
pub trait Report: Job {
    /// The job's stored state, read after the run for the push.
    type State;
    /// Whether the preflight requires the partition's index (the scan reads
    /// every batch by it; the events job looks rows up by PaymentIntent).
    const NEEDS_PARTITION_INDEX: bool;

    /// The job's settings groups of `settings`.
    fn groups(settings: &Settings) -> Self::Groups<'_>;

    /// Warnings about the settings, before anything runs.
    fn check(&self, _groups: &Self::Groups<'_>) {}

    /// The summary of a run that could not reach the database.
    fn database_down(&self, run: &RunSettings, clock: &Clock) -> Self::Summary;

    /// The summary's Pushgateway group and its run's outcome.
    fn group(summary: &Self::Summary) -> (&str, RunOutcome);

    /// Whether the run may post its new findings to `RECONCILER_NOTIFY_URL`
    /// (a dry run wrote none, so it posts nothing).
    fn notifies(_summary: &Self::Summary) -> bool {
        true
    }

    /// Logs the summary (one tracing event).
    fn log(summary: &Self::Summary);

    /// Prints the summary on stdout: JSON for machines, a table for people.
    fn print(summary: &Self::Summary, format: LogFormat);

    /// The job's stored state after the run; `None` when it cannot be read
    /// (logged).
    async fn state(&self, ctx: &RunContext<'_, Self::Groups<'_>>) -> Option<Self::State>;

    /// The figures to push (`None`: nothing is pushed, e.g. a dry run).
    ///
    /// # Errors
    /// [`prometheus::Error`] when the gauges cannot be registered.
    fn metrics(
        summary: &Self::Summary,
        gateway: &StripeGateway,
        state: Option<&Self::State>,
        now: f64,
    ) -> Option<Result<RunMetrics, prometheus::Error>>;
}

/// Runs `job` as its command: preflight → lease → body → summary → push →
/// exit code. The summary is printed on stdout and logged; the figures are
/// pushed also for a failed run; the run's error decides the exit code.
///
/// # Errors
/// [`CommandError`]: a setting (exit 78), the database or the HTTP client
/// (exit 1), or the job's own error.
pub async fn run<J>(settings: &Settings, mut job: J) -> Result<(), CommandError>
where
    J: Report,
    J::Error: Into<CommandError>,
{
    let gateway = stripe_gateway(settings)?;
    job.check(&J::groups(settings));
    // Before the first await that can take long: a SIGTERM while connecting
    // must still end in a summary and a push, not a killed process.
    let shutdown = shutdown::on_signal();
    let clock = Clock::start();
    let pool = match settings.database.connect().await {
        Ok(pool) => pool,
        Err(e) => {
            let summary = job.database_down(&settings.run, &clock);
            publish::<J>(settings, &summary, &gateway, None).await;
            return Err(e.into());
        }
    };
    let settings = &preflight::check_columns(&pool, settings, J::NEEDS_PARTITION_INDEX).await?;
    let mut ctx = RunContext {
        pool: &pool,
        gateway: &gateway,
        settings: J::groups(settings),
        lease: None,
        shutdown,
        clock,
    };
    let (summary, result) = run_once(&mut ctx, &mut job).await;
    J::log(&summary);
    J::print(&summary, settings.log_format);
    let state = job.state(&ctx).await;
    publish::<J>(settings, &summary, &gateway, state.as_ref()).await;
    if J::notifies(&summary) {
        let (group, _) = J::group(&summary);
        crate::notify::after_run(
            settings.notify.as_ref(),
            settings.stripe.dashboard_mode(None),
            settings.pushgateway_url.as_ref(),
            &pool,
            group,
        )
        .await;
    }
    pool.close().await;
    result.map_err(Into::into)
}

/// The run's Stripe gateway from `STRIPE_API_KEY`, `STRIPE_API_BASE` and
/// the read budget; its retries never wait past the run deadline.
///
/// # Errors
/// [`CommandError::Config`] without a key, [`CommandError::Http`].
fn stripe_gateway(settings: &Settings) -> Result<StripeGateway, CommandError> {
    Ok(settings.stripe.gateway(settings.run.run_deadline)?)
}

/// Pushes the run's figures. A run that lost the lease to another run pushes
/// only a marker to its own group, so the holder's figures stay. Failures
/// are logged at error level and change nothing else.
async fn publish<J: Report>(
    settings: &Settings,
    summary: &J::Summary,
    gateway: &StripeGateway,
    state: Option<&J::State>,
) {
    let Some(base) = settings.pushgateway_url.clone() else {
        return;
    };
    let now = push::unix_now();
    let metrics = match J::metrics(summary, gateway, state, now) {
        None => return,
        Some(Ok(m)) => m,
        Some(Err(e)) => {
            tracing::error!(error = %e, "cannot build the metrics; nothing pushed");
            return;
        }
    };
    let (group, outcome) = J::group(summary);
    let (extra, method) = push::push_plan(outcome, state.is_some());
    push::push_or_log(base, &metrics, group, extra, method).await;
}
