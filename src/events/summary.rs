//! [`EventsSummary`]: what one events run did, and the hold limit of the
//! PaymentIntents it could not decide.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::outcome::RunOutcome;
use crate::read::VerdictCounts;

/// A PaymentIntent whose event could not be decided is read again by later
/// runs while the event is at most this much older than the grace window;
/// after that the scan covers its row.
pub const HOLD_BEYOND_GRACE: Duration = Duration::from_secs(3600);

/// What one events run did (printed, logged and pushed).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EventsSummary {
    /// `<RECONCILER_JOB>-events`.
    pub job: String,
    /// How the run ended (see [`super::EventsError::outcome`]).
    pub outcome: RunOutcome,
    /// `created[gte]` of the window read.
    pub window_start: Option<DateTime<Utc>>,
    /// List pages read (crowded slices read again smaller included).
    pub pages: u32,
    /// Slices committed, each with the position it reached.
    pub slices: u32,
    /// PaymentIntent events read.
    pub events_read: u64,
    /// Entries of the feed that were not readable PaymentIntent events.
    pub events_skipped: u64,
    /// Charge, refund and dispute events whose object names no
    /// PaymentIntent (a charge made without one): counted, not an error.
    pub events_without_payment_intent: u64,
    /// Distinct PaymentIntents the events named, per slice (one decided
    /// without a read is planned again by a later slice with a newer event).
    pub payment_intents: u64,
    /// PaymentIntents re-read from Stripe (rows and orphans).
    pub payment_intents_retrieved: u64,
    /// Rows confirmed with Stripe after their event: no read needed.
    pub rows_confirmed: u64,
    /// Rows updated within the grace window: skipped.
    pub rows_in_grace: u64,
    /// Succeeded PaymentIntents without a row and without the metadata key.
    pub orphans_foreign: u64,
    /// Rows per verdict, as the scan counts them.
    pub verdicts: VerdictCounts,
    /// Findings newly recorded (`missing_locally` included).
    pub findings_created: u64,
    /// Of which `missing_locally`.
    pub missing_locally_created: u64,
    /// Repair commands enqueued.
    pub commands_enqueued: u64,
    /// Findings resolved as no longer seen.
    pub findings_cleared: u64,
    /// Rows the database refused to write (each with a `write_refused` finding).
    pub writes_refused: u64,
    /// Events re-read in the overlap behind a position that their feed had
    /// already handled: not handled again (`reconciliation_events_seen`).
    pub events_seen_before: u64,
    /// Events behind a stored position that their feed had not handled: they
    /// were listed late, and are handled now (docs/events.md, "Events listed late").
    pub events_listed_late: u64,
    /// The overlap the platform's feed re-read behind its position (seconds):
    /// a minute plus twice the lateness observed, at most an hour.
    pub overlap_seconds: f64,
    /// The lateness the platform's feed carries after this run (seconds):
    /// the largest observed, decayed with time.
    pub lateness_seconds: f64,
    /// Feeds that re-read the whole hour behind their position this run,
    /// after their new events (once an hour; docs/events.md, "Events listed late").
    pub sweeps: u64,
    /// Events of a slice whose PaymentIntent already waits in
    /// `reconciliation_events_retry`: left to the held share (the held
    /// PaymentIntent takes the newer event), never read by the feed.
    pub events_left_to_held: u64,
    /// PaymentIntents held by earlier runs that this run read again first.
    pub retries_read: u64,
    /// PaymentIntents this run could not decide (row in grace, no row yet,
    /// Stripe did not answer): held in `reconciliation_events_retry` for the
    /// next runs; the position moved past their events anyway.
    pub payment_intents_held: u64,
    /// The held PaymentIntents' share of the run was used up (a third of
    /// `RECONCILER_RUN_DEADLINE_SECONDS` or of the held reads a run allows,
    /// [`super::held::held_limit`]): the rest wait, least recently read
    /// first, for the next runs; nothing is dropped.
    pub held_share_reached: bool,
    /// Held PaymentIntents dropped because their event is older than grace
    /// + 1 h: the scan covers their rows.
    pub retries_expired: u64,
    /// Seconds of events Stripe no longer keeps (position older than 30 days).
    pub gap_seconds: Option<f64>,
    /// `RECONCILER_EVENTS_MAX_PAGES` stopped the run before the end of the
    /// window: the rest of the backlog is read by the next runs (not a gap).
    pub truncated: bool,
    /// `RECONCILER_RUN_DEADLINE_SECONDS` passed: no new slice was started.
    pub deadline_reached: bool,
    /// The position of the platform's feed this run committed last, if it
    /// committed a slice of it: every event created before it was handled
    /// (or waits in `reconciliation_events_retry`). Connected accounts'
    /// positions are their own rows.
    pub covered_until: Option<DateTime<Utc>>,
    /// Connected accounts whose feeds this run considered
    /// (`RECONCILER_ACCOUNT_COLUMN`; 0 without it).
    pub accounts: u64,
    /// Feeds whose events list did not advance (the same page again, or
    /// `has_more` with no new ids): read no further this run, position kept.
    pub feeds_not_advancing: u64,
    /// Connected accounts whose feed Stripe refused (no access): skipped.
    pub accounts_unreachable: u64,
    /// Wall time, seconds.
    pub duration_seconds: f64,
}

impl crate::lifecycle::Ended for EventsSummary {
    fn ended(&mut self, outcome: RunOutcome, duration_seconds: f64) {
        self.outcome = outcome;
        self.duration_seconds = duration_seconds;
    }
}
