//! The lifecycle of a scheduled job's command (`run`, `events`, `repair`),
//! in one function, [`run`]: the job's gateway, the shutdown signal, the
//! database (down: a failed summary is still pushed), the start-up checks
//! ([`crate::preflight`]), then the job's run ([`run_once`]: lease, body,
//! summary), the summary logged and printed, the job's state read and the
//! figures pushed, the new findings notified ([`crate::notify`]; not after
//! a dry run), and the exit code. A job plugs in by implementing [`Job`] in
//! its own folder; this module knows no job (docs/layout.md, "Adding a
//! job").
//!
//! - `context`: [`RunContext`], the run's [`Clock`], and the [`Gateway`] a job reads Stripe through.
//! - `error`: [`LifecycleError`], why a job's command stopped, and its exit code; [`Failure`].
//! - `job`: the [`Job`] trait, its [`JobSpec`], and [`run_once`].
//! - `push`: the push of a run's figures, decided the same way for every job.

mod context;
mod error;
mod job;
mod push;

pub use context::{Clock, Gateway, NoGateway, RunContext};
pub use error::{Failure, JobFailure, LifecycleError};
pub use job::{run_once, Checks, Ended, Job, JobContext, JobSpec, Reported};

use crate::config::Settings;
use crate::preflight;
use crate::shutdown;

/// Runs `job` as its command: gateway → database → start-up checks → lease
/// → body → summary → push → exit code. The summary is printed on stdout
/// and logged; the figures are pushed also for a failed run; the run's
/// error decides the exit code.
///
/// # Errors
/// [`LifecycleError`]: a setting (exit 78), the database or the HTTP client
/// (exit 1), the start-up checks, or the job's own error
/// ([`LifecycleError::Job`]).
pub async fn run<J: Job>(settings: &Settings, mut job: J) -> Result<(), LifecycleError> {
    let gateway = J::Gateway::build(settings)?;
    job.check(settings);
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
    let facts = match J::SPEC.checks {
        Checks::Schema => preflight::check_schema_only(&pool, settings).await?,
        Checks::Reads { partition_index } => {
            preflight::check_columns(&pool, settings, partition_index).await?
        }
        Checks::Subscriptions => preflight::check_subscriptions(&pool, settings).await?,
    };
    let mut ctx = RunContext {
        pool: &pool,
        gateway: &gateway,
        settings: J::groups(settings, &facts),
        lease: None,
        shutdown,
        clock,
    };
    let (summary, result) = run_once(&mut ctx, &mut job).await;
    J::log(&summary);
    J::print(&summary, settings.log_format);
    let state = job.state(&ctx).await;
    publish::<J>(settings, &summary, &gateway, state.as_ref()).await;
    let reported = J::reported(&summary);
    if reported.notifies {
        crate::notify::after_run(
            settings.notify.as_ref(),
            settings.stripe.dashboard_mode(None),
            settings.pushgateway_url.as_ref(),
            &pool,
            reported.group,
        )
        .await;
    }
    pool.close().await;
    result.map_err(|e| JobFailure::new(e).into())
}

/// Pushes the run's figures. A run that lost the lease to another run pushes
/// only a marker to its own group, so the holder's figures stay. Failures
/// are logged at error level and change nothing else.
async fn publish<J: Job>(
    settings: &Settings,
    summary: &J::Summary,
    gateway: &J::Gateway,
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
    let Reported { group, outcome, .. } = J::reported(summary);
    let (extra, method) = push::push_plan(outcome, state.is_some());
    push::push_or_log(base, &metrics, group, extra, method).await;
}
