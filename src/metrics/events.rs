//! The events job's figures, pushed to `job=<RECONCILER_JOB>-events`
//! (docs/events.md), from the [`EventsFigures`] the events job fills.

use chrono::{DateTime, Utc};
use prometheus::Registry;

use super::gauge::{Figure, Labelled};
use crate::outcome::RunOutcome;
use crate::stripe::RequestCounts;

/// What an events run pushes, filled by the events job from its summary.
#[derive(Debug, Clone, Default)]
pub struct EventsFigures {
    /// Wall time of the run, in seconds.
    pub duration_seconds: f64,
    /// How the run ended.
    pub outcome: RunOutcome,
    /// PaymentIntent events read.
    pub events_read: u64,
    /// Event list pages read.
    pub pages: u32,
    /// Distinct PaymentIntents handled.
    pub payment_intents: u64,
    /// PaymentIntents re-read from Stripe.
    pub payment_intents_retrieved: u64,
    /// Rows confirmed after their event, not re-read.
    pub rows_confirmed: u64,
    /// Findings newly recorded (`missing_locally` included).
    pub findings_created: u64,
    /// `missing_locally` findings newly recorded.
    pub missing_locally_created: u64,
    /// Repair commands enqueued.
    pub commands_enqueued: u64,
    /// Whether `RECONCILER_EVENTS_MAX_PAGES` stopped the run.
    pub truncated: bool,
    /// Connected accounts whose feed could not be read.
    pub accounts_unreachable: u64,
    /// Events whose object names no PaymentIntent.
    pub events_without_payment_intent: u64,
    /// Feeds whose list did not advance.
    pub feeds_not_advancing: u64,
    /// Whether the held PaymentIntents used up their share of the run.
    pub held_share_reached: bool,
    /// Events whose PaymentIntent was already held: left to the held share.
    pub left_to_held: u64,
    /// Events behind the position their feed had not handled (listed late).
    pub listed_late: u64,
    /// The overlap the platform's feed re-read behind its position, seconds.
    pub overlap_seconds: f64,
    /// Seconds of events never read (position older than Stripe keeps).
    pub gap_seconds: Option<f64>,
    /// Stripe requests the run sent, per endpoint.
    pub stripe_requests: RequestCounts,
}

/// The events job's stored state, for its gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventsState {
    /// Every event created before this was handled (the position).
    pub covered_until: Option<DateTime<Utc>>,
    /// When an events run last committed.
    pub last_success: Option<DateTime<Utc>>,
    /// PaymentIntents waiting in `reconciliation_events_retry` for another
    /// read (rows).
    pub held: i64,
}

/// The `events_*` gauges and `stripe_requests{endpoint}`.
pub(super) struct EventsGauges {
    last_success: Figure,
    read: Figure,
    pages: Figure,
    payment_intents_checked: Figure,
    payment_intents_retrieved: Figure,
    rows_confirmed: Figure,
    findings_created: Figure,
    missing_locally_created: Figure,
    commands_enqueued: Figure,
    lag: Figure,
    gap: Figure,
    truncated: Figure,
    held: Figure,
    accounts_unreachable: Figure,
    without_payment_intent: Figure,
    not_advancing: Figure,
    held_share_reached: Figure,
    left_to_held: Figure,
    listed_late: Figure,
    overlap: Figure,
    stripe_requests: Labelled,
}

// The events job's gauges: (name, help).
/// `events_last_success_timestamp_seconds`.
const LAST_SUCCESS: (&str, &str) = (
    "events_last_success_timestamp_seconds",
    "When an events run last committed (Unix time).",
);

/// `events_read`.
const READ: (&str, &str) = (
    "events_read",
    "PaymentIntent events read by the last events run.",
);

/// `events_pages`.
const PAGES: (&str, &str) = (
    "events_pages",
    "Event list pages read by the last events run.",
);

/// `events_payment_intents_checked`.
const PAYMENT_INTENTS_CHECKED: (&str, &str) = (
    "events_payment_intents_checked",
    "Distinct PaymentIntents the last events run handled (each once).",
);

/// `events_payment_intents_retrieved`.
const PAYMENT_INTENTS_RETRIEVED: (&str, &str) = (
    "events_payment_intents_retrieved",
    "PaymentIntents the last events run re-read from Stripe.",
);

/// `events_rows_confirmed`.
const ROWS_CONFIRMED: (&str, &str) = (
    "events_rows_confirmed",
    "Rows confirmed with Stripe after their event: not re-read.",
);

/// `events_findings_created`.
const FINDINGS_CREATED: (&str, &str) = (
    "events_findings_created",
    "Findings newly recorded by the last events run (missing_locally included).",
);

/// `events_missing_locally_created`.
const MISSING_LOCALLY_CREATED: (&str, &str) = (
    "events_missing_locally_created",
    "missing_locally findings newly recorded by the last events run.",
);

/// `events_commands_enqueued`.
const COMMANDS_ENQUEUED: (&str, &str) = (
    "events_commands_enqueued",
    "Repair commands enqueued by the last events run.",
);

/// `events_lag_seconds`.
const LAG: (&str, &str) = (
    "events_lag_seconds",
    "Now minus the events position: every event created before it was handled.",
);

/// `events_gap_seconds`.
const GAP: (&str, &str) = (
    "events_gap_seconds",
    "Seconds of events never read by the last run (position older than Stripe's 30 days); 0 when none.",
);

/// `events_truncated`.
const TRUNCATED: (&str, &str) = (
    "events_truncated",
    "1 if RECONCILER_EVENTS_MAX_PAGES stopped the last events run before the end of its window (a backlog the next runs continue, not a gap).",
);

/// `events_payment_intents_held`.
const HELD: (&str, &str) = (
    "events_payment_intents_held",
    "PaymentIntents the events job could not decide yet (row in grace, no row yet, Stripe did not answer), read again by its next runs; the position does not wait for them.",
);

/// `stripe_accounts_unreachable`.
const ACCOUNTS_UNREACHABLE: (&str, &str) = (
    "stripe_accounts_unreachable",
    "Connected accounts whose events feed the last events run could not read (the platform has no access); skipped, the other feeds were read.",
);

/// `events_without_payment_intent`.
const WITHOUT_PAYMENT_INTENT: (&str, &str) = (
    "events_without_payment_intent",
    "Charge, refund and dispute events the last events run read whose object names no PaymentIntent (charges made without one): counted, nothing to re-read.",
);

/// `events_feeds_not_advancing`.
const NOT_ADVANCING: (&str, &str) = (
    "events_feeds_not_advancing",
    "Feeds whose events list did not advance in the last events run (the same page again, or has_more with no new ids): read no further, their positions kept.",
);

/// `events_held_share_reached`.
const HELD_SHARE_REACHED: (&str, &str) = (
    "events_held_share_reached",
    "1 if the held PaymentIntents used up their share of the last events run (a third of its pages and of its deadline): the rest stay held for the next runs.",
);

/// `events_left_to_held`.
const LEFT_TO_HELD: (&str, &str) = (
    "events_left_to_held",
    "Events the last events run read about PaymentIntents already held for another read: left to the held share, not read by the feed.",
);

/// `events_listed_late`.
const LISTED_LATE: (&str, &str) = (
    "events_listed_late",
    "Events the last events run found behind a position that their feed had not handled: Stripe listed them late; handled now.",
);

/// `events_overlap_seconds`.
const OVERLAP: (&str, &str) = (
    "events_overlap_seconds",
    "Seconds the last events run re-read behind the platform feed's position: 60 plus twice the lateness observed, at most 3600.",
);

impl EventsGauges {
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let figure = |(name, help)| Figure::register(registry, name, help);
        Ok(EventsGauges {
            last_success: figure(LAST_SUCCESS)?,
            read: figure(READ)?,
            pages: figure(PAGES)?,
            payment_intents_checked: figure(PAYMENT_INTENTS_CHECKED)?,
            payment_intents_retrieved: figure(PAYMENT_INTENTS_RETRIEVED)?,
            rows_confirmed: figure(ROWS_CONFIRMED)?,
            findings_created: figure(FINDINGS_CREATED)?,
            missing_locally_created: figure(MISSING_LOCALLY_CREATED)?,
            commands_enqueued: figure(COMMANDS_ENQUEUED)?,
            lag: figure(LAG)?,
            gap: figure(GAP)?,
            truncated: figure(TRUNCATED)?,
            held: figure(HELD)?,
            accounts_unreachable: figure(ACCOUNTS_UNREACHABLE)?,
            without_payment_intent: figure(WITHOUT_PAYMENT_INTENT)?,
            not_advancing: figure(NOT_ADVANCING)?,
            held_share_reached: figure(HELD_SHARE_REACHED)?,
            left_to_held: figure(LEFT_TO_HELD)?,
            listed_late: figure(LISTED_LATE)?,
            overlap: figure(OVERLAP)?,
            stripe_requests: Labelled::register(
                registry,
                "stripe_requests",
                "HTTP requests sent to Stripe by the last run, per endpoint (retries included).",
                "endpoint",
            )?,
        })
    }

    /// An events run's figures and, when it could be read, the job's state;
    /// `now_unix` is the end of the run.
    pub(super) fn observe(&self, s: &EventsFigures, state: Option<&EventsState>, now_unix: f64) {
        self.read.set(s.events_read as f64);
        self.pages.set(f64::from(s.pages));
        self.payment_intents_checked.set(s.payment_intents as f64);
        self.payment_intents_retrieved
            .set(s.payment_intents_retrieved as f64);
        self.rows_confirmed.set(s.rows_confirmed as f64);
        self.findings_created.set(s.findings_created as f64);
        self.missing_locally_created
            .set(s.missing_locally_created as f64);
        self.commands_enqueued.set(s.commands_enqueued as f64);
        self.truncated.set(f64::from(u8::from(s.truncated)));
        self.accounts_unreachable.set(s.accounts_unreachable as f64);
        self.without_payment_intent
            .set(s.events_without_payment_intent as f64);
        self.not_advancing.set(s.feeds_not_advancing as f64);
        self.held_share_reached
            .set(f64::from(u8::from(s.held_share_reached)));
        self.left_to_held.set(s.left_to_held as f64);
        self.listed_late.set(s.listed_late as f64);
        self.overlap.set(s.overlap_seconds);
        if let Some(st) = state {
            self.held.set(st.held as f64);
        }
        self.gap.set(s.gap_seconds.unwrap_or(0.0));
        for (endpoint, n) in s.stripe_requests.by_endpoint() {
            self.stripe_requests.set(endpoint, n as f64);
        }
        if let Some(st) = state {
            if let Some(c) = st.covered_until {
                let lag = now_unix - unix_seconds(c);
                self.lag.set(lag.max(0.0));
            }
            if let Some(t) = st.last_success {
                self.last_success.set(unix_seconds(t));
            }
        }
    }
}

fn unix_seconds(t: DateTime<Utc>) -> f64 {
    t.timestamp_millis() as f64 / 1000.0
}
