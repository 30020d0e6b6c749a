//! Reading the feed: the window from the stored position, and the pages of
//! one slice of it.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::lateness::{sweep_band, Lateness};
use super::slices::{Slice, Slicer, SLICE_PAGES};
use super::EventsError;
use crate::outcome::RunError;
use crate::store::events_position::EventsPosition;
use crate::stripe::{
    AccountId, EventPage, GatewayError, PaymentIntentEvent, SessionEvent, StripeGateway,
};

/// Events older than Stripe's 30 days are gone; a window is clamped this far
/// inside the retention so the first page never asks for a purged second.
pub const RETENTION_MARGIN: Duration = Duration::from_secs(300);

/// Where a run starts reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// `created[gte]` of the first page.
    pub start: DateTime<Utc>,
    /// Seconds of events lost because the position was older than Stripe
    /// keeps them (logged as a gap); `None` when there is no gap.
    pub gap_seconds: Option<f64>,
}

/// The window of a run at `now`: the first run looks back `lookback`; later
/// runs start `overlap` before `covered_until` (an event Stripe had created
/// but not yet listed when the previous run read the feed is not lost;
/// [`super::lateness::overlap`]: a minute plus twice the lateness observed,
/// at most an hour; events already handled there are not handled again); a
/// start older than Stripe's retention (30 days) is a gap and restarts at
/// the oldest available event.
pub fn window(
    covered_until: Option<DateTime<Utc>>,
    overlap: Duration,
    now: DateTime<Utc>,
    lookback: Duration,
    retention: Duration,
) -> Window {
    let span = |d: Duration| chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
    let wanted = covered_until.map_or_else(|| now - span(lookback), |c| c - span(overlap));
    let oldest = now - span(retention) + span(RETENTION_MARGIN);
    if wanted < oldest && covered_until.is_some() {
        let gap = oldest.signed_duration_since(wanted).num_milliseconds() as f64 / 1000.0;
        return Window {
            start: oldest,
            gap_seconds: Some(gap),
        };
    }
    Window {
        start: wanted.max(oldest),
        gap_seconds: None,
    }
}

/// Where one feed's run starts: its window, the window's slices, the
/// lateness it carries, and the hour behind its position when a sweep is
/// due ([`sweep_band`]).
#[derive(Debug, Clone)]
pub struct Start {
    /// The window ([`window`]).
    pub window: Window,
    /// Its slices, never committing a position before the stored one.
    pub slicer: Slicer,
    /// The feed's lateness ([`Lateness`]).
    pub lateness: Lateness,
    /// The slices of the hour behind the window, read after it, when due.
    pub sweep: Option<Slicer>,
}

/// Where a feed with stored `position` starts when listed at `listed_at`:
/// the overlap follows its lateness; no position looks back `lookback`; a
/// position older than `retention` is a gap ([`window`]).
pub fn start(
    position: Option<&EventsPosition>,
    listed_at: DateTime<Utc>,
    lookback: Duration,
    retention: Duration,
) -> Start {
    let lateness = Lateness::of(position, listed_at);
    let covered = position.and_then(|p| p.covered_until);
    let window = window(covered, lateness.overlap(), listed_at, lookback, retention);
    let sweep = window
        .gap_seconds
        .is_none()
        .then(|| sweep_band(position, window.start, listed_at))
        .flatten()
        .map(|(from, to)| Slicer::new(from, to).never_before(covered));
    Start {
        window,
        slicer: Slicer::new(window.start, listed_at).never_before(covered),
        lateness,
        sweep,
    }
}

/// The events of one slice, read whole.
#[derive(Debug, Clone, Default)]
pub struct SliceEvents {
    /// Every readable event of the slice that names a PaymentIntent, newest first.
    pub events: Vec<PaymentIntentEvent>,
    /// Entries skipped as unreadable.
    pub skipped: usize,
    /// Charge, refund and dispute events whose object names no
    /// PaymentIntent: counted, nothing to re-read.
    pub without_payment_intent: usize,
    /// Every readable Checkout Session event of the slice, newest first
    /// (docs/checkout-sessions.md).
    pub sessions: Vec<SessionEvent>,
}

impl SliceEvents {
    /// The events read, of every kind.
    pub fn len(&self) -> usize {
        self.events.len() + self.sessions.len()
    }

    /// No event was read.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `page`'s events and counts; returns its `next_after` (the next
    /// page's `starting_after`).
    fn add(&mut self, page: EventPage) -> Option<String> {
        self.skipped += page.skipped;
        self.without_payment_intent += page.without_payment_intent;
        self.events.extend(page.events);
        self.sessions.extend(page.sessions);
        page.next_after
    }

    /// The oldest `created` (Unix seconds) among the events read (each kind
    /// is newest first, so its last); `None` when none was.
    fn oldest_created(&self) -> Option<i64> {
        self.events
            .last()
            .map(|e| e.created.timestamp())
            .into_iter()
            .chain(self.sessions.last().map(|e| e.created.timestamp()))
            .min()
    }

    /// The oldest second (Unix seconds) among the events read and how many
    /// of them it holds; `None` when none was.
    fn oldest_second(&self) -> Option<(i64, usize)> {
        let oldest = self.oldest_created()?;
        let pi = self.events.iter().map(|e| e.created.timestamp());
        let cs = self.sessions.iter().map(|e| e.created.timestamp());
        Some((oldest, pi.chain(cs).filter(|t| *t == oldest).count()))
    }

    /// `(id, created)` of the newest event read, of any kind.
    pub fn newest(&self) -> Option<(&str, DateTime<Utc>)> {
        let pi = self.events.first().map(|e| (e.id.as_str(), e.created));
        let cs = self.sessions.first().map(|e| (e.id.as_str(), e.created));
        match (pi, cs) {
            (Some(a), Some(b)) => Some(if b.1 > a.1 { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

/// What reading one slice gave.
#[derive(Debug, Clone)]
pub enum SliceRead {
    /// Every event of the slice.
    Whole(SliceEvents),
    /// More than [`SLICE_PAGES`] pages: `seen` events over
    /// `[oldest_seen, slice.lt)` were read and dropped; cut it smaller.
    Crowded {
        /// Events read before giving up.
        seen: usize,
        /// The oldest `created` among them (Unix seconds).
        oldest_seen: i64,
        /// How many of them were created in that oldest second.
        at_oldest: usize,
    },
    /// `RECONCILER_EVENTS_MAX_PAGES` pages were read by this run before the
    /// slice was whole: the slice is left to the next run (not a gap).
    Capped,
    /// `RECONCILER_RUN_DEADLINE_SECONDS` passed before the slice was whole:
    /// no new page is asked; the slice is left to the next run.
    Deadline,
}

/// What bounds the pages of a run, from its very first page (the rule of
/// list mode's `RECONCILER_LIST_MAX_PAGES`: no page is sent past the cap).
#[derive(Debug, Clone, Copy)]
pub struct PageBounds<'a> {
    /// `RECONCILER_EVENTS_MAX_PAGES`: list pages of the whole run.
    pub max_pages: u32,
    /// `RECONCILER_RUN_DEADLINE_SECONDS` from the run's start: no page is
    /// asked after it.
    pub deadline: Option<Instant>,
    /// SIGTERM/SIGINT: no page is asked after it.
    pub shutdown: &'a CancellationToken,
}

impl PageBounds<'_> {
    /// Whether the run may ask for another page after `pages`: `None` when
    /// it may, else why not (the cap, the deadline).
    ///
    /// # Errors
    /// [`RunError::Interrupted`] on shutdown.
    fn reached(&self, pages: u32) -> Result<Option<SliceRead>, EventsError> {
        if self.shutdown.is_cancelled() {
            return Err(RunError::Interrupted.into());
        }
        if pages >= self.max_pages {
            return Ok(Some(SliceRead::Capped));
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(Some(SliceRead::Deadline));
        }
        Ok(None)
    }
}

/// Remembers the event ids of one slice's pages: a page with `has_more`
/// must bring one the slice had not seen, or the list does not advance.
#[derive(Debug, Default)]
struct Advancing {
    seen: HashSet<String>,
}

impl Advancing {
    /// Whether `page` (with `has_more`) moved the list on: its last id (the
    /// next `starting_after`) is one the slice had not seen. Remembers its ids.
    fn moved(&mut self, page: &EventPage) -> bool {
        let Some(next) = page.next_after.as_deref() else {
            return false;
        };
        let new = !self.seen.contains(next);
        self.seen.extend(page.events.iter().map(|e| e.id.clone()));
        self.seen.extend(page.sessions.iter().map(|e| e.id.clone()));
        self.seen.insert(next.to_owned());
        new
    }
}

/// The name of `account`'s feed in messages.
pub fn feed_name(account: Option<&AccountId>) -> String {
    account.map_or_else(
        || "the platform's feed".to_owned(),
        |a| format!("connected account {}'s feed", a.as_str()),
    )
}

/// Reads one slice's pages, newest first, counting them in `pages` and
/// stopping before a page past `bounds` (the run's page cap, its deadline,
/// a shutdown), from the run's first page.
///
/// # Errors
/// [`EventsError::FeedUnavailable`] after the retry budget;
/// [`EventsError::FeedNotAdvancing`] when a page with `has_more` brings no
/// event id the slice had not seen (the same page again, or an empty one);
/// [`RunError::StripeRejected`] for a refused key or a wrong base URL;
/// [`EventsError::AccountUnreachable`] when the platform has no access to
/// `account` (that account is skipped for the run, the others go on);
/// [`RunError::Interrupted`] on shutdown.
pub async fn read_slice(
    gateway: &StripeGateway,
    account: Option<&AccountId>,
    slice: Slice,
    pages: &mut u32,
    bounds: PageBounds<'_>,
) -> Result<SliceRead, EventsError> {
    let mut read = SliceEvents::default();
    let mut after: Option<String> = None;
    let mut slice_pages = 0;
    let mut advancing = Advancing::default();
    loop {
        if let Some(stop) = bounds.reached(*pages)? {
            return Ok(stop);
        }
        let page = fetch_page(gateway, account, slice, after.as_deref()).await?;
        *pages += 1;
        slice_pages += 1;
        if !page.has_more {
            read.add(page);
            return Ok(SliceRead::Whole(read));
        }
        // Before anything else: a list that does not move on is never
        // read again (it would be read up to the cap, or for ever).
        if !advancing.moved(&page) {
            return Err(EventsError::FeedNotAdvancing {
                feed: feed_name(account),
                page: slice_pages,
            });
        }
        after = read.add(page);
        // A single second cannot be cut: it is read whole.
        if slice.seconds() > 1 && slice_pages >= SLICE_PAGES {
            let (oldest_seen, at_oldest) = read.oldest_second().unwrap_or((slice.gte, 0));
            return Ok(SliceRead::Crowded {
                seen: read.len() + read.skipped,
                oldest_seen,
                at_oldest,
            });
        }
    }
}

/// One page of `slice` of `account`'s feed after the event `after`, its
/// failure sorted: a refused key ([`RunError::StripeRejected`]), an account
/// the platform cannot reach, or the feed unavailable.
async fn fetch_page(
    gateway: &StripeGateway,
    account: Option<&AccountId>,
    slice: Slice,
    after: Option<&str>,
) -> Result<EventPage, EventsError> {
    gateway
        .payment_intent_events_in(account, slice.gte, Some(slice.lt), after)
        .await
        .map_err(|e| match e {
            e if e.is_rejected() => EventsError::Scan(RunError::StripeRejected(e)),
            e @ GatewayError::AccountUnreachable { .. } => EventsError::AccountUnreachable(e),
            e => EventsError::FeedUnavailable(e),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    const DAY: u64 = 86_400;
    const MIN: Duration = crate::events::lateness::MIN_OVERLAP;

    fn page(ids: &[&str], next: Option<&str>) -> EventPage {
        let events = ids
            .iter()
            .map(|id| PaymentIntentEvent {
                id: (*id).to_owned(),
                event_type: "payment_intent.processing".into(),
                created: Utc.timestamp_opt(1_000, 0).unwrap(),
                object: crate::stripe::EventObject::PaymentIntent,
                payment_intent: crate::stripe::PaymentIntentId::parse("pi_A").unwrap(),
                status: None,
                metadata: Default::default(),
            })
            .collect();
        EventPage {
            events,
            sessions: Vec::new(),
            skipped: 0,
            without_payment_intent: 0,
            has_more: true,
            next_after: next.map(str::to_owned),
        }
    }

    #[test]
    fn a_page_moves_the_list_on_only_with_an_id_the_slice_had_not_seen() {
        let mut a = Advancing::default();
        assert!(a.moved(&page(&["evt_3", "evt_2"], Some("evt_2"))));
        assert!(a.moved(&page(&["evt_1"], Some("evt_0"))), "older ids: on");
        assert!(
            !a.moved(&page(&["evt_3", "evt_2"], Some("evt_2"))),
            "the same page again"
        );
        assert!(!a.moved(&page(&[], None)), "has_more with no id at all");
        // An unreadable last entry still names the next page.
        assert!(a.moved(&page(&[], Some("evt_unreadable"))));
    }

    #[test]
    fn first_run_looks_back_and_later_runs_overlap_their_position() {
        let now = Utc.timestamp_opt(100 * DAY as i64, 0).unwrap();
        let retention = Duration::from_secs(30 * DAY);
        let w = window(None, MIN, now, Duration::from_secs(DAY), retention);
        assert_eq!(
            (w.start, w.gap_seconds),
            (now - chrono::Duration::days(1), None)
        );
        let pos = now - chrono::Duration::minutes(5);
        let w = window(Some(pos), MIN, now, Duration::from_secs(DAY), retention);
        assert_eq!(w.start, pos - chrono::Duration::seconds(60));
    }

    #[test]
    fn a_position_older_than_thirty_days_is_a_gap_from_the_oldest_event() {
        let now = Utc.timestamp_opt(100 * DAY as i64, 0).unwrap();
        let retention = Duration::from_secs(30 * DAY);
        let pos = now - chrono::Duration::days(40);
        let w = window(Some(pos), MIN, now, Duration::from_secs(DAY), retention);
        let oldest = now - chrono::Duration::days(30) + chrono::Duration::seconds(300);
        assert_eq!(w.start, oldest);
        let gap = w.gap_seconds.unwrap();
        assert!((gap - (10.0 * DAY as f64 + 360.0)).abs() < 1.0, "{gap}");
    }
}
