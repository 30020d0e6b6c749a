//! `stripe-reconciler events`: the events job's lifecycle
//! ([`crate::lifecycle::run`] of an [`EventsJob`]).

use super::CommandError;
use crate::config::Settings;
use crate::events::EventsJob;
use crate::lifecycle;

/// Reads the events feed once, prints the summary, logs it, pushes the
/// figures to `job=<RECONCILER_JOB>-events` (also for a failed run), and
/// returns the run's error. The start-up checks are `run`'s (exit 78 naming
/// what to fix): the outbox, the PaymentIntent index, the configured columns
/// (amount, currency, account) and the partition (without its index).
pub(super) async fn events(settings: &Settings) -> Result<(), CommandError> {
    Ok(lifecycle::run(settings, EventsJob).await?)
}
