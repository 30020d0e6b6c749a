//! [`EventsGroups`]: the settings groups the events job works with.

use crate::config::{
    EventsSettings, OutboxSettings, RunSettings, ScanSettings, SchemaSettings, Settings,
    StripeSettings,
};
use crate::job::RunContext;
use crate::read::ReadGroups;
use crate::reconcile::Rules;

/// What the events job of `events` works with, as references into
/// [`Settings`]: its own group (`events`), and the scan's read and write
/// path it shares: the job's name, grace and deadline (`run`), the read mode
/// and batch size its reads and lease follow (`scan`), the read budget
/// (`stripe`), how `payments` is read (`schema`), the aging thresholds
/// (`rules`) and where repairs go (`outbox`).
#[derive(Debug, Clone, Copy)]
pub struct EventsGroups<'a> {
    /// `RECONCILER_JOB` (the events job is `<RECONCILER_JOB>-events`), the
    /// grace, the run deadline and `RECONCILER_UNVERIFIABLE_CYCLES`.
    pub run: &'a RunSettings,
    /// The read mode and list reads of the PaymentIntents it retrieves; the
    /// batch size the lease is sized by.
    pub scan: &'a ScanSettings,
    /// The read budget (rate limit, in flight, timeout).
    pub stripe: &'a StripeSettings,
    /// How `payments` is read.
    pub schema: &'a SchemaSettings,
    /// The aging thresholds.
    pub rules: &'a Rules,
    /// Where repair commands go.
    pub outbox: &'a OutboxSettings,
    /// `RECONCILER_EVENTS_*` and `RECONCILER_ORPHAN_METADATA_KEY`.
    pub events: &'a EventsSettings,
}

impl<'a> EventsGroups<'a> {
    /// The events job's groups of `settings`.
    pub fn of(settings: &'a Settings) -> Self {
        EventsGroups {
            run: &settings.run,
            scan: &settings.scan,
            stripe: &settings.stripe,
            schema: &settings.schema,
            rules: &settings.rules,
            outbox: &settings.outbox,
            events: &settings.events,
        }
    }

    /// The groups a read of Stripe works with.
    pub fn read(&self) -> ReadGroups<'a> {
        ReadGroups {
            scan: self.scan,
            stripe: self.stripe,
            schema: self.schema,
            rules: self.rules,
        }
    }
}

/// A run's context with the events job's groups.
pub type EventsContext<'a> = RunContext<'a, EventsGroups<'a>>;
