//! The job abstraction every scheduled job plugs into (the scan of `run`, the
//! events feed of `events`): a [`RunContext`] carrying what a run works with,
//! and the [`Job`] trait whose [`run_once`] is the one place a run takes its
//! lease, runs its body, gives the lease back and completes its summary. The
//! command-level steps around it (gateway, database, preflight, printing,
//! push, exit code) are [`crate::lifecycle`].
//!
//! - `context`: [`RunContext`] and the run's [`Clock`].

mod context;

pub use context::{Clock, RunContext};

use crate::lease::Lease;
use crate::outcome::RunError;

/// One scheduled job: what its run leases, does and reports.
///
/// A run is [`run_once`]: [`Job::summary`], then the lease
/// ([`Job::lease`]; refused: [`Job::refused`]), then [`Job::body`], the lease
/// given back, and [`Job::finish`].
// The jobs run on the caller's task (never spawned): no `Send` bound is needed.
#[allow(async_fn_in_trait)]
pub trait Job {
    /// The settings groups the run works with: references into
    /// [`crate::config::Settings`] (e.g. [`crate::scan::ScanGroups`]).
    type Groups<'s>;
    /// What the run reports (printed, logged, pushed).
    type Summary;
    /// Why a run stopped early; a refused lease is a [`RunError`].
    type Error: From<RunError>;

    /// The summary before anything ran (its job name set).
    fn summary(&self, ctx: &RunContext<'_, Self::Groups<'_>>) -> Self::Summary;

    /// The lease the run holds (not taken yet), or `None` for a run that
    /// writes nothing (a dry run) and takes none.
    fn lease(&self, ctx: &RunContext<'_, Self::Groups<'_>>) -> Option<Lease>;

    /// The lease was not taken (held by another run, or the database
    /// failed): completes the summary with `error`.
    async fn refused(
        &mut self,
        ctx: &RunContext<'_, Self::Groups<'_>>,
        summary: &mut Self::Summary,
        error: &RunError,
    );

    /// The job's work, with the lease (if any) in [`RunContext::lease`].
    ///
    /// # Errors
    /// [`Job::Error`]: what was committed before it stays committed.
    async fn body(
        &mut self,
        ctx: &RunContext<'_, Self::Groups<'_>>,
        summary: &mut Self::Summary,
    ) -> Result<(), Self::Error>;

    /// After the body and the lease given back: completes the summary (the
    /// outcome from `result`, the duration from [`RunContext::clock`]).
    async fn finish(
        &mut self,
        ctx: &RunContext<'_, Self::Groups<'_>>,
        summary: &mut Self::Summary,
        result: &Result<(), Self::Error>,
    );
}

/// Runs `job` once in `ctx`: lease, body, lease given back, summary. Always
/// returns the summary of what was committed, with the error that stopped
/// the run, if any. [`RunContext::lease`] holds the lease taken (still set
/// after it was given back, so [`Job::finish`] knows the run held one).
pub async fn run_once<J: Job>(
    ctx: &mut RunContext<'_, J::Groups<'_>>,
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
