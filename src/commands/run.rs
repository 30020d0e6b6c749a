//! `stripe-reconciler run [--dry-run]`: the scan's lifecycle
//! ([`crate::lifecycle::run`] of a [`ScanJob`]).

use super::CommandError;
use crate::config::Settings;
use crate::lifecycle;
use crate::scan::{RunOptions, ScanJob};

/// Scans, prints the summary on stdout, logs it, pushes the figures (also for
/// a failed run; not for a dry run), and returns the run's error.
pub(super) async fn run(settings: &Settings, dry_run: bool) -> Result<(), CommandError> {
    Ok(lifecycle::run(settings, ScanJob::new(RunOptions { dry_run })).await?)
}
