//! `stripe-reconciler events`: the events feed. Reads Stripe's PaymentIntent
//! events created since the stored position, treats each as a trigger, and
//! re-reads and classifies each PaymentIntent named exactly as the scan would
//! ([`crate::record`]); a succeeded PaymentIntent no
//! `payments` row points at becomes `missing_locally`. Time to detect a
//! missed webhook: one events run (plus the grace window), whatever the
//! table size.
//!
//! Reading the feed:
//! - [`feed`]: the window from the stored position, and one slice's pages.
//! - [`slices`]: PURE: the window cut into slices, oldest first.
//! - [`accounts`]: the connected accounts' feeds, each from its own position.
//! - [`feed_run`]: PURE: one feed of a run: its window's slices, then the sweep's.
//! - [`lateness`]: PURE: events listed late, and the overlap behind a position.
//! - `seen`: the events of a slice a feed already handled, left out; lateness observed.
//! - [`run`]: the run's work: window, slices until done, cap, deadline or shutdown.
//! - `job`: the events [`crate::lifecycle::Job`]: lease, summary, state and figures.
//! - `print`: the summary printed.
//!
//! One batch of events (a slice, or held PaymentIntents read again):
//! - `batch`: the batch's phases in a row, and what it adds to the summary.
//! - `source`: what a batch is (its feed; a slice or held PaymentIntents).
//! - `lookup`: phase 1: the rows its events name, the orphans open, the plan.
//! - [`plan`](mod@plan): PURE: which PaymentIntents and rows need a Stripe read.
//! - `sessions`: Checkout Session events: rows judged by their session, or their PaymentIntent's way (docs/checkout-sessions.md).
//! - `ask_stripe`: phase 2: Stripe, with no transaction open; the outage rule.
//! - `write`: phase 3: record, hold, move the position, in one transaction.
//! - [`orphans`]: succeeded PaymentIntents no row points at (`missing_locally`).
//!
//! Holding and retrying PaymentIntents:
//! - [`held`]: which PaymentIntents a batch holds for another read, and their share of a run.
//! - `retries`: the held PaymentIntents read again, first in a run.
//!
//! Around them:
//! - `groups`: [`EventsGroups`], the settings groups the events job works with.
//! - [`summary`]: [`EventsSummary`], what one run did.

pub mod accounts;
mod ask_stripe;
mod batch;
pub mod feed;
pub mod feed_run;
mod groups;
pub mod held;
mod job;
pub mod lateness;
mod lookup;
pub mod orphans;
pub mod plan;
mod print;
mod retries;
pub mod run;
mod seen;
mod sessions;
pub mod slices;
mod source;
pub mod summary;
mod write;

pub use groups::{EventsContext, EventsGroups};
pub use job::{figures, EventsJob};
pub use plan::{collapse, plan, Plan, PlanRules, RowAction};
pub use summary::{EventsSummary, HOLD_BEYOND_GRACE};

use crate::exit;
use crate::outcome::{RunError, RunOutcome};
use crate::stripe::GatewayError;

/// The suffix of the events job's name: `<RECONCILER_JOB>-events` names its
/// position row and its Pushgateway group.
pub const JOB_SUFFIX: &str = "-events";

/// The events job's name for `RECONCILER_JOB`.
pub fn events_job(job: &str) -> String {
    format!("{job}{JOB_SUFFIX}")
}

/// Why an events run stopped early. Each maps to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    /// The guards the scan has: lease held (75), key rejected (78), Stripe
    /// down (1), database (1), interrupted (1).
    #[error(transparent)]
    Scan(#[from] RunError),
    /// The events list could not be read after the retry budget; the slices
    /// before it stay committed, the one in progress wrote nothing.
    #[error("cannot read Stripe's events feed; the slices already committed are kept, the position stays where they left it")]
    FeedUnavailable(#[source] GatewayError),
    /// The events list did not advance: a page with `has_more` that brought
    /// no event id the slice had not already seen (a proxy that ignores
    /// `starting_after`, or `has_more` with an empty page). The feed is read
    /// no further this run and its position stays where its last committed
    /// slice left it; the other feeds go on and the run exits 1.
    #[error("the events list of {feed} does not advance (page {page} of a slice brought no new event id although has_more is true; a proxy that ignores starting_after?): that feed is read no further this run and its position stays where its last committed slice left it")]
    FeedNotAdvancing {
        /// `the platform's feed` or `connected account acct_…'s feed`.
        feed: String,
        /// The page of the slice (1-based) that did not advance.
        page: u32,
    },
    /// Stripe says the platform has no access to a connected account
    /// (revoked, or not connected to this platform): that account's feed is
    /// skipped for the run, counted in `stripe_accounts_unreachable`; never
    /// the end of the run.
    #[error("the platform has no access to a connected account's events")]
    AccountUnreachable(#[source] GatewayError),
}

impl From<crate::store::StoreError> for EventsError {
    fn from(e: crate::store::StoreError) -> Self {
        EventsError::Scan(RunError::Store(e))
    }
}

impl crate::store::retry::Transient for EventsError {
    fn store_error(&self) -> Option<&crate::store::StoreError> {
        match self {
            EventsError::Scan(e) => e.store_error(),
            _ => None,
        }
    }
}

impl EventsError {
    /// The process exit code (README.md, "Exit codes").
    pub fn exit_code(&self) -> u8 {
        match self {
            EventsError::Scan(e) => e.exit_code(),
            EventsError::FeedUnavailable(_) => exit::FAILURE,
            EventsError::FeedNotAdvancing { .. } => exit::FAILURE,
            // Handled per account by the run; never its result.
            EventsError::AccountUnreachable(_) => exit::FAILURE,
        }
    }

    /// The run's outcome (logs, metrics).
    pub fn outcome(&self) -> RunOutcome {
        match self {
            EventsError::Scan(e) => e.outcome(),
            EventsError::FeedUnavailable(_) => RunOutcome::StripeDown,
            EventsError::FeedNotAdvancing { .. } => RunOutcome::StripeDown,
            EventsError::AccountUnreachable(_) => RunOutcome::StripeDown,
        }
    }
}
