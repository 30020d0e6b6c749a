//! PURE: one feed of a run (the platform's or a connected account's): the
//! slices of its window, then, when due, those of the hour behind it (the
//! sweep, docs/events.md, "Events listed late"), the lateness it carries and
//! when it was listed.

use chrono::{DateTime, Utc};

use super::feed::Start;
use super::lateness::Lateness;
use super::slices::{Slice, Slicer};
use crate::stripe::AccountId;

/// One feed of a run, with the slices left to read.
#[derive(Debug, Clone)]
pub struct FeedRun {
    /// The connected account whose feed it is (`None`: the platform's).
    pub account: Option<AccountId>,
    /// When the run listed the feed (the end of its window).
    pub listed_at: DateTime<Utc>,
    /// The lateness it carries, raised by what the run observes.
    pub lateness: Lateness,
    slicer: Slicer,
    sweep: Option<Slicer>,
    sweeping: bool,
}

impl FeedRun {
    /// The feed of `account` starting at `start`, listed at `listed_at`.
    pub fn new(account: Option<AccountId>, start: Start, listed_at: DateTime<Utc>) -> Self {
        FeedRun {
            account,
            listed_at,
            lateness: start.lateness,
            slicer: start.slicer,
            sweep: start.sweep,
            sweeping: false,
        }
    }

    /// The next slice: the window's, then the sweep's; `None` once both are
    /// covered.
    pub fn next_slice(&mut self) -> Option<Slice> {
        if !self.sweeping {
            if let Some(slice) = self.slicer.next() {
                return Some(slice);
            }
            self.sweeping = self.sweep.is_some();
        }
        self.sweep.as_ref().and_then(Slicer::next)
    }

    /// Whether the slices handed out now are the sweep's: a page cap or a
    /// deadline there leaves no backlog (the window is covered).
    pub fn sweeping(&self) -> bool {
        self.sweeping
    }

    fn current(&mut self) -> &mut Slicer {
        match (self.sweeping, self.sweep.as_mut()) {
            (true, Some(sweep)) => sweep,
            _ => &mut self.slicer,
        }
    }

    /// `slice` was committed with `events` events ([`Slicer::done`]);
    /// `true` when that completed the sweep.
    pub fn done(&mut self, slice: Slice, events: usize) -> bool {
        self.current().done(slice, events);
        self.sweeping && self.sweep.as_ref().is_some_and(|s| s.next().is_none())
    }

    /// `slice` was crowded ([`Slicer::crowded`]).
    pub fn crowded(&mut self, slice: Slice, seen: usize, oldest_seen: i64, at_oldest: usize) {
        self.current().crowded(slice, seen, oldest_seen, at_oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::feed::{start, Window};
    use crate::store::events_position::EventsPosition;
    use std::time::Duration;

    fn at(t: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(t, 0).unwrap()
    }

    #[test]
    fn the_window_comes_first_then_the_hour_behind_it_and_the_position_never_moves_back() {
        let position = EventsPosition {
            job: "j-events".into(),
            covered_until: Some(at(100_000)),
            newest_event_id: None,
            newest_event_created: None,
            last_success_at: None,
            listed_at: Some(at(100_000)),
            lateness_seconds: 0.0,
            swept_at: None,
        };
        let day = Duration::from_secs(86_400);
        let s = start(Some(&position), at(100_300), day, 30 * day);
        assert_eq!(
            s.window,
            Window {
                start: at(99_940),
                gap_seconds: None
            }
        );
        let mut feed = FeedRun::new(None, s, at(100_300));
        let first = feed.next_slice().unwrap();
        assert_eq!((first.gte, first.lt), (99_940, 100_300));
        assert!(!feed.done(first, 3));
        assert!(!feed.sweeping());
        let sweep = feed.next_slice().unwrap();
        assert!(feed.sweeping());
        assert_eq!(
            (sweep.gte, sweep.lt, sweep.end()),
            (96_400, 99_940, at(100_000))
        );
        assert!(feed.done(sweep, 3), "the sweep is complete");
        assert_eq!(feed.next_slice(), None);
    }
}
