//! PURE: events that become visible late (docs/events.md, "Events listed
//! late"). Stripe lists an event by its `created`, but an event may appear in
//! the list some time after that instant. A run re-reads an overlap behind
//! its position; an event found there that the feed had not handled was not
//! listed when the position was written, so it was late by at least the
//! time between its `created` and that listing. The overlap follows the
//! largest lateness observed, decaying with time.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::store::events_position::EventsPosition;

/// The least overlap a run re-reads behind its position.
pub const MIN_OVERLAP: Duration = Duration::from_secs(60);

/// The most: an hour (a late event beyond it is left to the scan).
pub const MAX_OVERLAP: Duration = Duration::from_secs(3600);

/// The observed lateness halves every 6 hours without a new observation, so
/// one late burst does not widen every later run's overlap for ever.
pub const LATENESS_HALF_LIFE: Duration = Duration::from_secs(6 * 3600);

/// How often a feed re-reads the whole hour behind its position, after its
/// new events ([`sweep_band`]).
pub const SWEEP_EVERY: Duration = MAX_OVERLAP;

/// The band a run re-reads after its window when the feed's sweep is due:
/// `[covered_until − MAX_OVERLAP, window_start)`. Its events already handled
/// cost list pages only; one not handled was listed late (later than the
/// overlap, e.g. before any lateness was observed) and is handled. Due when
/// the feed never swept, or [`SWEEP_EVERY`] after its last sweep; never for
/// a first run (its lookback reads everything), a position written before
/// listings were stored (its events were never remembered), or a gap.
pub fn sweep_band(
    position: Option<&EventsPosition>,
    window_start: DateTime<Utc>,
    listed_at: DateTime<Utc>,
) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let p = position?;
    let covered = p.covered_until?;
    p.listed_at?;
    let every = chrono::Duration::from_std(SWEEP_EVERY).ok()?;
    if p.swept_at.is_some_and(|s| listed_at - s < every) || window_start > covered {
        return None;
    }
    let from = covered - chrono::Duration::from_std(MAX_OVERLAP).ok()?;
    (from < window_start).then_some((from, window_start))
}

/// The overlap behind a position whose feed showed `lateness_seconds`:
/// [`MIN_OVERLAP`] plus twice the lateness, at most [`MAX_OVERLAP`].
pub fn overlap(lateness_seconds: f64) -> Duration {
    let extra = (2.0 * lateness_seconds.max(0.0)).min(MAX_OVERLAP.as_secs_f64());
    (MIN_OVERLAP + Duration::from_secs_f64(extra)).min(MAX_OVERLAP)
}

/// `seconds` observed at `then`, decayed to `now` ([`LATENESS_HALF_LIFE`]).
pub fn decayed(seconds: f64, then: DateTime<Utc>, now: DateTime<Utc>) -> f64 {
    let elapsed = now.signed_duration_since(then).num_milliseconds().max(0) as f64 / 1000.0;
    seconds * 0.5_f64.powf(elapsed / LATENESS_HALF_LIFE.as_secs_f64())
}

/// One feed's lateness during a run: what its stored position says, and what
/// this run observed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lateness {
    /// The stored position and the listing that wrote it: an event created
    /// before the position that the feed had not handled was not listed
    /// then. `None` for a first run, or a position written before the
    /// listing was stored (nothing can be said of it).
    behind: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// The lateness the run carries (seconds): the stored one decayed to
    /// this listing, raised by each observation.
    pub seconds: f64,
}

impl Lateness {
    /// The lateness of a feed with stored `position`, listed at `listed_at`.
    pub fn of(position: Option<&EventsPosition>, listed_at: DateTime<Utc>) -> Self {
        let Some(p) = position else {
            return Lateness {
                behind: None,
                seconds: 0.0,
            };
        };
        let seconds = p.listed_at.map_or(p.lateness_seconds, |then| {
            decayed(p.lateness_seconds, then, listed_at)
        });
        Lateness {
            behind: p.covered_until.zip(p.listed_at),
            seconds,
        }
    }

    /// The overlap this feed's window re-reads ([`overlap`]).
    pub fn overlap(&self) -> Duration {
        overlap(self.seconds)
    }

    /// An event created at `created` that the feed had not handled: its
    /// lateness (seconds) when it lies behind the stored position, which it
    /// raises; `None` when it does not.
    pub fn observe(&mut self, created: DateTime<Utc>) -> Option<f64> {
        let (covered_until, listed_at) = self.behind?;
        if created >= covered_until {
            return None;
        }
        let late = listed_at.signed_duration_since(created).num_milliseconds() as f64 / 1000.0;
        self.seconds = self.seconds.max(late);
        Some(late)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(t, 0).unwrap()
    }

    fn position(covered: i64, listed: Option<i64>, lateness: f64) -> EventsPosition {
        EventsPosition {
            job: "j-events".into(),
            covered_until: Some(at(covered)),
            newest_event_id: None,
            newest_event_created: None,
            last_success_at: None,
            listed_at: listed.map(at),
            lateness_seconds: lateness,
            swept_at: None,
        }
    }

    #[test]
    fn the_overlap_is_a_minute_plus_twice_the_lateness_at_most_an_hour() {
        assert_eq!(overlap(0.0), Duration::from_secs(60));
        assert_eq!(overlap(30.0), Duration::from_secs(120));
        assert_eq!(overlap(1_000.0), Duration::from_secs(2_060));
        assert_eq!(overlap(5_000.0), Duration::from_secs(3_600));
        assert_eq!(overlap(-3.0), Duration::from_secs(60));
    }

    #[test]
    fn lateness_halves_every_six_hours() {
        assert_eq!(decayed(100.0, at(0), at(6 * 3600)), 50.0);
        assert_eq!(decayed(100.0, at(0), at(24 * 3600)), 6.25);
        assert_eq!(decayed(100.0, at(10), at(0)), 100.0, "a clock behind");
    }

    #[test]
    fn an_event_behind_the_position_not_handled_before_was_late_by_its_listing() {
        let mut l = Lateness::of(Some(&position(1_000, Some(1_002), 0.0)), at(1_300));
        assert_eq!(l.observe(at(1_100)), None, "ahead of the position: new");
        assert_eq!(l.observe(at(970)), Some(32.0));
        assert_eq!(l.observe(at(990)), Some(12.0));
        assert_eq!((l.seconds, l.overlap()), (32.0, Duration::from_secs(124)));
    }

    #[test]
    fn a_first_run_or_a_position_without_its_listing_observes_nothing() {
        let mut first = Lateness::of(None, at(1_300));
        assert_eq!(first.observe(at(10)), None);
        let mut old = Lateness::of(Some(&position(1_000, None, 0.0)), at(1_300));
        assert_eq!(old.observe(at(970)), None);
        assert_eq!(old.overlap(), MIN_OVERLAP);
    }

    #[test]
    fn the_hour_behind_the_position_is_swept_when_never_swept_or_an_hour_after_the_last() {
        let p = position(10_000, Some(10_000), 0.0);
        let start = at(10_000 - 60);
        assert_eq!(
            sweep_band(Some(&p), start, at(10_300)),
            Some((at(6_400), start))
        );
        let recent = EventsPosition {
            swept_at: Some(at(9_000)),
            ..p.clone()
        };
        assert_eq!(sweep_band(Some(&recent), start, at(10_300)), None);
        assert!(sweep_band(Some(&recent), start, at(12_600)).is_some());
        let upgraded = position(10_000, None, 0.0);
        assert_eq!(sweep_band(Some(&upgraded), start, at(10_300)), None);
        assert_eq!(sweep_band(None, start, at(10_300)), None, "a first run");
        let gap = at(10_500);
        assert_eq!(sweep_band(Some(&p), gap, at(10_300)), None, "a gap");
    }

    #[test]
    fn the_stored_lateness_decays_to_the_new_listing() {
        let l = Lateness::of(Some(&position(1_000, Some(0), 80.0)), at(6 * 3600));
        assert_eq!(l.seconds, 40.0);
    }
}
