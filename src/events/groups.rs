//! [`EventsGroups`]: the settings groups the events job works with, and
//! what a run's context gives the events job (its name, its lease).

use super::{events_job, EventsError};
use crate::config::{EventsSettings, Settings};
use crate::job::RunContext;
use crate::lease::Lease;
use crate::outcome::RunError;
use crate::read::ReadGroups;
use crate::scan::ScanGroups;

/// What the events job of `events` works with, as references into
/// [`Settings`]: the scan's read and write path it shares ([`ScanGroups`]:
/// the job's name, grace and deadline, the read mode and batch size its
/// reads and lease follow, the read budget, how `payments` is read, the
/// aging thresholds and where repairs go), and its own group (`events`).
#[derive(Debug, Clone, Copy)]
pub struct EventsGroups<'a> {
    /// The scan's groups. `scan.run.job` names the events job too (it is
    /// `<RECONCILER_JOB>-events`); `scan.scan` gives the read mode and list
    /// reads of the PaymentIntents it retrieves and the batch size the lease
    /// is sized by.
    pub scan: ScanGroups<'a>,
    /// `RECONCILER_EVENTS_*` and `RECONCILER_ORPHAN_METADATA_KEY`.
    pub events: &'a EventsSettings,
}

impl<'a> EventsGroups<'a> {
    /// The events job's groups of `settings`.
    pub fn of(settings: &'a Settings) -> Self {
        EventsGroups {
            scan: ScanGroups::of(settings),
            events: &settings.events,
        }
    }

    /// The groups a read of Stripe works with.
    pub fn read(&self) -> ReadGroups<'a> {
        self.scan.read()
    }
}

/// A run's context with the events job's groups.
pub type EventsContext<'a> = RunContext<'a, EventsGroups<'a>>;

/// The events job's name, `<RECONCILER_JOB>-events` ([`events_job`]): its
/// position rows, held PaymentIntents and Pushgateway group.
pub(super) fn job_name(ctx: &EventsContext<'_>) -> String {
    events_job(&ctx.settings.scan.run.job)
}

/// The events job's lease: [`crate::job::run_once`] takes it before the
/// body, so a body without one was never given it to hold (a lost run).
pub(super) fn lease_of<'c>(ctx: &'c EventsContext<'_>) -> Result<&'c Lease, EventsError> {
    ctx.lease
        .as_ref()
        .ok_or_else(|| EventsError::from(RunError::ConcurrentRun { job: job_name(ctx) }))
}
