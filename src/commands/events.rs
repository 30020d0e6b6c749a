//! `stripe-reconciler events`: the events job's lifecycle
//! ([`crate::lifecycle::run`] of an [`EventsJob`], then of a
//! [`SubscriptionEventsJob`] when the subscriptions table is set).

use super::CommandError;
use crate::config::Settings;
use crate::events::EventsJob;
use crate::lifecycle;
use crate::subscriptions::SubscriptionEventsJob;

/// Reads the events feed once, prints the summary, logs it, pushes the
/// figures to `job=<RECONCILER_JOB>-events` (also for a failed run), and
/// returns the run's error. The start-up checks are `run`'s (exit 78 naming
/// what to fix): the outbox, the PaymentIntent index, the configured columns
/// (amount, currency, account) and the partition (without its index).
///
/// With `RECONCILER_SUBSCRIPTIONS_TABLE` set, the subscriptions' feed runs
/// next, from its own position (docs/subscriptions.md, "Events"), also when
/// the PaymentIntents' feed failed; the first error decides the exit code.
pub(super) async fn events(settings: &Settings) -> Result<(), CommandError> {
    let payments = lifecycle::run(settings, EventsJob).await;
    if settings.subscriptions.is_some() {
        let subscriptions = lifecycle::run(settings, SubscriptionEventsJob::default()).await;
        payments?;
        subscriptions?;
        return Ok(());
    }
    Ok(payments?)
}
