//! PURE: cutting a run's window into slices, oldest first. Each slice is a
//! `created` range `[gte, lt)` small enough to read in a page or two and to
//! commit, with its findings, as one step of the position (docs/events.md: a
//! run stopped at any moment keeps what it finished). A crowded slice is cut
//! smaller from the density its first pages showed; a single second is never
//! cut (Stripe's `created` has second precision) and is read whole with
//! `starting_after`.

use chrono::{DateTime, Utc};

/// The events a slice aims at: one page of 100, so that at the chart's 10
/// requests/s a slice's reads take about ten seconds and a deadline or a
/// SIGTERM never waits long for the slice in progress.
pub const SLICE_EVENTS: usize = 100;

/// Pages a slice of more than one second may take before it is cut smaller.
pub const SLICE_PAGES: u32 = 2;

/// One slice of the window: events created in `[gte, lt)`, Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    /// `created[gte]`.
    pub gte: i64,
    /// `created[lt]`.
    pub lt: i64,
    /// The position the slice reaches once committed: `lt`, or the end of
    /// the window for its last slice.
    pub until: DateTime<Utc>,
}

impl Slice {
    /// Seconds the slice spans (at least 1).
    pub fn seconds(&self) -> i64 {
        self.lt - self.gte
    }

    /// The position the slice commits (`covered_until`).
    pub fn end(&self) -> DateTime<Utc> {
        self.until
    }
}

/// Hands out the slices of one window, oldest first, adapting their width to
/// how crowded the feed is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slicer {
    next: i64,
    end: i64,
    until: DateTime<Utc>,
    width: i64,
    /// The stored position: no slice commits a position before it.
    floor: Option<DateTime<Utc>>,
    /// A crowded second (Unix seconds): the oldest a crowded slice's pages
    /// reached, holding half a page or more of them. Stripe lists newest
    /// first, so every event after it up to that slice's end was on those
    /// pages. No slice crosses it until it is read whole on its own; once
    /// behind `next` it bounds nothing.
    crowd: Option<i64>,
}

impl Slicer {
    /// The slices of `[start, end)` in whole seconds (Stripe's `created`
    /// precision): `start` rounds down (an event of that second is read,
    /// maybe again), the last slice asks up to the second after `end` and
    /// commits `end` itself.
    pub fn new(start: DateTime<Utc>, end: DateTime<Utc>) -> Self {
        let next = start.timestamp();
        let up = end.timestamp() + i64::from(end.timestamp_subsec_nanos() > 0);
        Slicer {
            next,
            end: up,
            until: end,
            width: (up - next).max(1),
            floor: None,
            crowd: None,
        }
    }

    /// The feed's stored position (`covered_until`): a position never moves
    /// backwards, so every slice commits at least this (docs/events.md; the store
    /// keeps the greater too). A slice ending earlier (the window starts
    /// an overlap before the position ([`super::lateness::overlap`]), and a clock behind the
    /// one that wrote it ends the window before it) still has its events
    /// handled.
    pub fn never_before(mut self, floor: Option<DateTime<Utc>>) -> Self {
        self.floor = floor;
        self
    }

    /// The next slice to read; `None` once the window is covered. A slice
    /// ends before the crowded second a cut found, and that second, once
    /// reached, is a slice of its own (read whole).
    pub fn next(&self) -> Option<Slice> {
        (self.next < self.end).then(|| {
            let wide = self.next.saturating_add(self.width);
            let lt = self.end.min(match self.crowd {
                Some(crowd) if crowd == self.next => crowd + 1,
                Some(crowd) if crowd > self.next => wide.min(crowd),
                _ => wide,
            });
            let until = match DateTime::from_timestamp(lt, 0) {
                Some(t) if lt < self.end => t,
                _ => self.until,
            };
            let until = self.floor.map_or(until, |floor| until.max(floor));
            Slice {
                gte: self.next,
                lt,
                until,
            }
        })
    }

    /// `slice` held more than [`SLICE_PAGES`] pages: `seen` events read over
    /// `[oldest_seen, slice.lt)`, `at_oldest` of them in `oldest_seen`. The
    /// next slice starts at the same second, as wide as that density gives
    /// [`SLICE_EVENTS`], and at most half as wide, so a burst is cut down to
    /// size in a few tries. When `oldest_seen` holds half a page or more, no
    /// slice reaches past it until that second is read whole, so a crowd in
    /// one second (a bulk capture, renewals at midnight) costs its own pages
    /// and a few more, not a cut after a cut around it.
    pub fn crowded(&mut self, slice: Slice, seen: usize, oldest_seen: i64, at_oldest: usize) {
        if at_oldest >= SLICE_EVENTS / 2 {
            self.crowd = Some(oldest_seen.clamp(slice.gte, slice.lt - 1));
        }
        let half = (slice.seconds() / 2).max(1);
        let span = (slice.lt - oldest_seen).max(1);
        let estimate = match i64::try_from(seen) {
            Ok(seen) if seen > 0 => span.saturating_mul(SLICE_EVENTS as i64) / seen,
            _ => half,
        };
        self.width = estimate.clamp(1, half);
    }

    /// `slice` was read whole with `events` events and committed: the next
    /// slice starts at its end, wider when this one was sparse (up to 16
    /// times for an empty one: quiet hours cost few pages), unless it was
    /// cut short at a crowded second (its few events say nothing of what
    /// follows).
    pub fn done(&mut self, slice: Slice, events: usize) {
        let cut_short = self.crowd == Some(slice.lt);
        self.next = slice.lt;
        if events < SLICE_EVENTS / 2 && !cut_short {
            let factor = (SLICE_EVENTS / (events + 1)).clamp(2, 16) as i64;
            self.width = self.width.saturating_mul(factor);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(t, 0).unwrap()
    }

    fn slice(gte: i64, lt: i64) -> Slice {
        Slice {
            gte,
            lt,
            until: at(lt),
        }
    }

    #[test]
    fn a_quiet_window_is_one_slice_ending_at_the_window_end() {
        let s = Slicer::new(at(1000), at(1300));
        assert_eq!(s.next(), Some(slice(1000, 1300)));
        let mut s = s;
        s.done(slice(1000, 1300), 3);
        assert_eq!(s.next(), None);
    }

    #[test]
    fn a_burst_is_cut_to_about_a_page_per_slice_and_covered_without_holes() {
        // 10 events a second over [0, 2000): 20,000 events.
        let mut s = Slicer::new(at(0), at(2000));
        let mut covered = 0;
        let mut crowded = 0;
        while let Some(slice) = s.next() {
            assert_eq!(slice.gte, covered, "slices follow each other");
            let events = (slice.seconds() * 10) as usize;
            if events > SLICE_EVENTS * SLICE_PAGES as usize {
                // Two pages, newest first: the oldest seen is 20 s back.
                s.crowded(slice, 200, slice.lt - 20, 10);
                crowded += 1;
                continue;
            }
            s.done(slice, events);
            covered = slice.lt;
        }
        assert_eq!(covered, 2000);
        assert!(crowded <= 3, "the width settles after a cut: {crowded}");
    }

    #[test]
    fn the_last_slice_commits_the_window_end_itself() {
        let end = at(1300) + chrono::Duration::milliseconds(400);
        let s = Slicer::new(at(1000), end);
        let last = s.next().unwrap();
        assert_eq!((last.lt, last.end()), (1301, end));
    }

    #[test]
    fn no_slice_commits_a_position_before_the_stored_one() {
        // Stored at 1300 by a pod whose clock ran ahead; the window is
        // [1240, 1290) on this pod's clock.
        let s = Slicer::new(at(1240), at(1290)).never_before(Some(at(1300)));
        let only = s.next().unwrap();
        assert_eq!((only.gte, only.lt, only.end()), (1240, 1290, at(1300)));
        let s = Slicer::new(at(1240), at(1400)).never_before(Some(at(1300)));
        assert_eq!(s.next().unwrap().end(), at(1400), "a later end is kept");
    }

    #[test]
    fn a_crowded_slice_shrinks_at_least_by_half_and_never_below_one_second() {
        let mut s = Slicer::new(at(0), at(100));
        let first = s.next().unwrap();
        s.crowded(first, 200, 99, 2);
        assert_eq!(s.next(), Some(slice(0, 1)));
        let mut s = Slicer::new(at(0), at(100));
        s.crowded(first, 0, 0, 0);
        assert_eq!(s.next(), Some(slice(0, 50)));
    }

    /// Reads `[start, end)` as `read_slice` does over `events` (their
    /// `created`, Unix seconds), Stripe's pages of 100, newest first: a slice
    /// of more than one second is given up after [`SLICE_PAGES`] pages; a
    /// single second is read whole. Returns (pages asked, events handled).
    fn read_window(events: &[i64], start: i64, end: i64) -> (usize, usize) {
        let mut s = Slicer::new(at(start), at(end));
        let (mut pages, mut handled) = (0, 0);
        while let Some(slice) = s.next() {
            let mut inside: Vec<i64> = events
                .iter()
                .copied()
                .filter(|t| (slice.gte..slice.lt).contains(t))
                .collect();
            inside.sort_unstable_by(|a, b| b.cmp(a));
            let limit = SLICE_EVENTS * SLICE_PAGES as usize;
            if slice.seconds() > 1 && inside.len() > limit {
                pages += SLICE_PAGES as usize;
                let oldest = inside[limit - 1];
                let at_oldest = inside[..limit].iter().filter(|t| **t == oldest).count();
                s.crowded(slice, limit, oldest, at_oldest);
                continue;
            }
            pages += inside.len() / SLICE_EVENTS + 1;
            handled += inside.len();
            s.done(slice, inside.len());
        }
        (pages, handled)
    }

    #[test]
    fn a_crowded_second_in_a_quiet_day_is_read_whole_in_a_few_more_pages_than_its_own() {
        // A first run's day: 1,500 events in one second (a bulk capture,
        // renewals at midnight) 40 s before the end, one event 20 s before.
        let end = 86_400;
        let mut events = vec![end - 40; 1_500];
        events.push(end - 20);
        let (pages, handled) = read_window(&events, 0, end);
        assert_eq!(handled, 1_501);
        // The second alone takes 15 pages (16 as this count goes), 162 before
        // a cut stopped at the second its pages reached.
        assert!(pages <= 24, "{pages} pages");
    }

    /// Each layout's bound is near what it costs now; on a busy day the
    /// cuts without the crowd bound cost 460 and 469 pages, the crowd
    /// bound must not cost more.
    #[test]
    fn every_event_is_read_once_and_crowds_cost_about_their_own_pages() {
        let end = 86_400;
        // One event every `step` seconds of the day, and `more` besides.
        let steady = |step: i64, more: Vec<i64>| -> Vec<i64> {
            (0..end / step).map(|i| i * step).chain(more).collect()
        };
        let layouts: Vec<(&str, Vec<i64>, usize)> = vec![
            ("a crowd in the window's first second", vec![0; 1_500], 22),
            (
                "two crowded seconds an hour apart",
                [vec![end - 3_640; 800], vec![end - 40; 800]].concat(),
                40,
            ),
            (
                "1,500 events over three seconds",
                (0..1_500).map(|i| end - 42 + i % 3).collect(),
                45,
            ),
            (
                "a crowd beside a steady trickle",
                steady(60, vec![end - 600; 1_000]),
                40,
            ),
            (
                "a busy day (an event every 4 s) with 1,500 more over ten minutes",
                steady(4, (0..1_500).map(|i| end - 4_200 + i * 2 / 5).collect()),
                460,
            ),
            (
                "a busy day (an event every 4 s) with 1,500 more in one second",
                steady(4, vec![end - 4_200; 1_500]),
                460,
            ),
        ];
        let over: Vec<String> = layouts
            .into_iter()
            .filter_map(|(what, events, most)| {
                let (pages, handled) = read_window(&events, 0, end);
                assert_eq!(handled, events.len(), "{what}");
                (pages > most).then(|| format!("{what}: {pages} pages (at most {most})"))
            })
            .collect();
        assert!(over.is_empty(), "{over:#?}");
    }
}
