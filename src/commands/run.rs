//! `stripe-reconciler run [--dry-run] [--object payments|subscriptions]`: the
//! payments scan's or the subscriptions scan's lifecycle
//! ([`crate::lifecycle::run`] of a [`ScanJob`] or a [`SubscriptionsJob`]).

use super::CommandError;
use crate::cli::Object;
use crate::config::Settings;
use crate::lifecycle;
use crate::scan::{RunOptions, ScanJob};
use crate::subscriptions::SubscriptionsJob;

/// Scans `object`, prints the summary on stdout, logs it, pushes the
/// figures (also for a failed run; not for a dry run), and returns the
/// run's error.
pub(super) async fn run(
    settings: &Settings,
    dry_run: bool,
    object: Object,
) -> Result<(), CommandError> {
    match object {
        Object::Payments => lifecycle::run(settings, ScanJob::new(RunOptions { dry_run })).await?,
        Object::Subscriptions => lifecycle::run(settings, SubscriptionsJob::new(dry_run)).await?,
    }
    Ok(())
}
