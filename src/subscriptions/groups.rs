//! [`SubscriptionGroups`]: the settings groups the subscriptions scan works
//! with, and the job's name.

use crate::config::{
    OutboxSettings, RunSettings, ScanSettings, Settings, StripeSettings, SubscriptionSettings,
};
use crate::facts::{SubscriptionTable, TableFacts};
use crate::lifecycle::RunContext;
use crate::stripe::StripeGateway;

/// The job name (cursor, lease, runs, Pushgateway group) when
/// `RECONCILER_JOB` keeps its default.
pub const DEFAULT_JOB: &str = "subscriptions-vs-stripe";

/// The payments job's default name: `RECONCILER_JOB` left unset.
const PAYMENTS_DEFAULT_JOB: &str = "payments-vs-stripe";

/// The subscriptions job's name: [`DEFAULT_JOB`], or
/// `<RECONCILER_JOB>-subscriptions` when that is set (docs/subscriptions.md).
pub fn job_name(run: &RunSettings) -> String {
    if run.job == PAYMENTS_DEFAULT_JOB {
        DEFAULT_JOB.to_owned()
    } else {
        format!("{}-subscriptions", run.job)
    }
}

/// What the subscriptions scan works with, as references into [`Settings`]
/// and the start-up checks' [`TableFacts`].
#[derive(Debug, Clone, Copy)]
pub struct SubscriptionGroups<'a> {
    /// The grace window, the deadline.
    pub run: &'a RunSettings,
    /// Batch and run sizes, the read mode and list reads.
    pub scan: &'a ScanSettings,
    /// The read budget.
    pub stripe: &'a StripeSettings,
    /// Where repair commands go.
    pub outbox: &'a OutboxSettings,
    /// The subscriptions group (words, policy); `None` only when the
    /// start-up checks were skipped.
    pub settings: Option<&'a SubscriptionSettings>,
    /// The table as checked at start.
    pub table: Option<&'a SubscriptionTable>,
}

impl<'a> SubscriptionGroups<'a> {
    /// The groups of `settings` with the checked `facts`.
    pub fn of(settings: &'a Settings, facts: &'a TableFacts) -> Self {
        SubscriptionGroups {
            run: &settings.run,
            scan: &settings.scan,
            stripe: &settings.stripe,
            outbox: &settings.outbox,
            settings: settings.subscriptions.as_ref(),
            table: facts.subscriptions.as_ref(),
        }
    }
}

/// The subscriptions job's run context.
pub type SubscriptionsContext<'a> = RunContext<'a, SubscriptionGroups<'a>, StripeGateway>;

/// What a batch needs beside its context: the job, the table, its settings,
/// and whether it writes.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The job's name.
    pub job: &'a str,
    /// The table as checked.
    pub table: &'a SubscriptionTable,
    /// The subscriptions group.
    pub settings: &'a SubscriptionSettings,
    /// Nothing is written.
    pub dry_run: bool,
}
