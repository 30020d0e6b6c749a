//! [`ReadGroups`]: the settings groups a read of Stripe works with.

use crate::config::{ScanSettings, SchemaSettings, StripeSettings};
use crate::facts::TableFacts;
use crate::reconcile::Rules;

/// What reading rows' Stripe objects and judging them works with, as
/// references into [`crate::config::Settings`]: the read mode and list reads
/// (`scan`), the in-flight budget (`stripe`), the account column and the
/// partition (`schema`, and its kind in `facts`), the aging thresholds
/// (`rules`).
#[derive(Debug, Clone, Copy)]
pub struct ReadGroups<'a> {
    /// `RECONCILER_READ_MODE`, `RECONCILER_LIST_WINDOW_SLACK_SECONDS`,
    /// `RECONCILER_LIST_MAX_PAGES`.
    pub scan: &'a ScanSettings,
    /// `RECONCILER_MAX_IN_FLIGHT`: reads in flight at once.
    pub stripe: &'a StripeSettings,
    /// `RECONCILER_ACCOUNT_COLUMN` and the partition.
    pub schema: &'a SchemaSettings,
    /// The aging thresholds the verdicts use.
    pub rules: &'a Rules,
    /// What the start-up checks learned of `payments` (the partition's kind).
    pub facts: &'a TableFacts,
}
