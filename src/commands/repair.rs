//! `stripe-reconciler repair`: the outbox worker's lifecycle
//! ([`crate::lifecycle::run`] of a [`RepairJob`]).

use super::CommandError;
use crate::config::Settings;
use crate::lifecycle;
use crate::repair::RepairJob;

/// Drains the repair commands and prints the report on stdout (one JSON
/// line). A `debezium` or `plain` outbox is the application's relay's to deliver:
/// `repair` says so and exits 0 without touching it.
pub(super) async fn repair(settings: &Settings) -> Result<(), CommandError> {
    Ok(lifecycle::run(settings, RepairJob).await?)
}
