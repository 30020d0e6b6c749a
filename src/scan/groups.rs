//! [`ScanGroups`]: the settings groups the scan works with.

use crate::config::{
    OutboxSettings, RunSettings, ScanSettings, SchemaSettings, Settings, StripeSettings,
};
use crate::job::RunContext;
use crate::read::ReadGroups;
use crate::reconcile::Rules;
use crate::record::Target;

/// What the scan of `run` works with, as references into [`Settings`]: the
/// job's name, grace and deadline (`run`), its batch and run sizes and read
/// mode (`scan`), the read budget (`stripe`), how `payments` is read
/// (`schema`), the aging thresholds (`rules`) and where repairs go
/// (`outbox`). Not the database, the Pushgateway, the log format or the
/// notifications: the lifecycle uses those.
#[derive(Debug, Clone, Copy)]
pub struct ScanGroups<'a> {
    /// `RECONCILER_JOB`, `RECONCILER_GRACE_SECONDS`, the run deadline and
    /// `RECONCILER_UNVERIFIABLE_CYCLES`.
    pub run: &'a RunSettings,
    /// Batch and run sizes, the cycle target, the read mode and list reads.
    pub scan: &'a ScanSettings,
    /// The read budget (rate limit, in flight, timeout): the plan and the
    /// lease are sized by it.
    pub stripe: &'a StripeSettings,
    /// How `payments` is read (columns, unit, statuses, partition, key, times).
    pub schema: &'a SchemaSettings,
    /// The aging thresholds.
    pub rules: &'a Rules,
    /// Where repair commands go.
    pub outbox: &'a OutboxSettings,
}

impl<'a> ScanGroups<'a> {
    /// The scan's groups of `settings`.
    pub fn of(settings: &'a Settings) -> Self {
        ScanGroups {
            run: &settings.run,
            scan: &settings.scan,
            stripe: &settings.stripe,
            schema: &settings.schema,
            rules: &settings.rules,
            outbox: &settings.outbox,
        }
    }

    /// Where phase 3 records for this job ([`crate::record::record_observations`]):
    /// the outbox, the key type, the job and its UNVERIFIABLE threshold, the
    /// times' storage.
    pub fn record_target(&self) -> Target<'a> {
        Target {
            outbox: self.outbox,
            key: &self.schema.key,
            job: &self.run.job,
            unverifiable_cycles: self.run.unverifiable_cycles,
            times: &self.schema.times,
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

/// A run's context with the scan's groups.
pub type ScanContext<'a> = RunContext<'a, ScanGroups<'a>>;
