//! What a batch of events is: the feed it came from and what committing it
//! does to that feed's position (a slice moves it; the held PaymentIntents
//! read again leave it), and how the batch ended.

use std::time::Instant;

use super::slices::Slice;
use crate::store::events_position::Listing;
use crate::stripe::AccountId;

/// What a batch of events is, and what committing it does to the position.
#[derive(Debug, Clone, Copy)]
pub(super) enum Source {
    /// A slice of the feed: the position moves to its end, with the run's
    /// listing and the lateness it carries.
    Slice(Slice, Listing),
    /// PaymentIntents held by earlier runs: the position stays; Stripe's
    /// answers are abandoned (nothing written) at `until`.
    Retry { until: Option<Instant> },
}

/// How a batch of events ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Worked {
    /// Committed.
    Done,
    /// The held PaymentIntents' time was up before Stripe answered: nothing
    /// written, they stay held.
    OutOfTime,
}

/// A batch of events: whose feed it came from, and what committing it does
/// to that feed's position.
#[derive(Debug, Clone, Copy)]
pub(super) struct Feed<'a> {
    /// The connected account whose feed it is (`None`: the platform's).
    pub(super) account: Option<&'a AccountId>,
    /// A slice, or held PaymentIntents.
    pub(super) source: Source,
}
