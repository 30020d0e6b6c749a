//! The PaymentIntents a batch could not decide, held for another read
//! (`reconciliation_events_retry`): which ones a batch holds, and the share
//! of a run their reads get (docs/operations.md, "Events: held PaymentIntents get a third of a run").

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::groups::EventsContext;
use super::lookup::Looked;
use super::orphans::OrphanRead;
use super::plan::{young, PlanRules};
use super::slices::SLICE_EVENTS;
use crate::read::Observation;
use crate::reconcile::Verdict;
use crate::store::events_retry::{Held, HoldReason};
use crate::stripe::{PaymentIntentEvent, RetryPolicy};

/// The most PaymentIntents held by earlier runs read again per run, before
/// the feed (about five slices' worth).
pub const RETRIES_PER_RUN: usize = 500;

/// The held PaymentIntents' share of a run: a third of its page budget and
/// of its deadline; the rest goes to new events.
pub const HELD_SHARE_DIVISOR: u32 = 3;

/// Held PaymentIntents read again per step (one commit each), oldest first:
/// at most a slice's worth, fewer when the share's time left does not fit
/// that many at their worst-case cost ([`step_size`]).
pub const HELD_PER_STEP: usize = SLICE_EVENTS;

/// The part of the share's time left a step plans to use at worst-case
/// cost: the rest covers what the cost leaves out (response times, the
/// outage probe, the commit).
pub const STEP_SHARE_OF_TIME_LEFT: f64 = 0.5;

/// Worst-case seconds one held read costs the share: every attempt of
/// `retry` spent (a PaymentIntent Stripe keeps failing for), at
/// `rate_limit_rps` (`RECONCILER_RATE_LIMIT_RPS`) through the shared
/// limiter, or its back-off delays spread over `max_in_flight`
/// (`RECONCILER_MAX_IN_FLIGHT`) concurrent reads, whichever is longer.
/// Stripe's retry rule: docs/operations.md ("Events: held PaymentIntents get
/// a third of a run").
pub fn read_cost(rate_limit_rps: u32, max_in_flight: u32, retry: RetryPolicy) -> f64 {
    let attempts = retry.max_attempts.max(1);
    let backoff: f64 = (1..attempts)
        .map(|k| {
            let doubled = retry.initial_delay.as_secs_f64() * 2_f64.powi(k as i32 - 1);
            doubled.min(retry.max_delay.as_secs_f64())
        })
        .sum();
    let by_rate = f64::from(attempts) / f64::from(rate_limit_rps.max(1));
    let by_slots = backoff / f64::from(max_in_flight.max(1));
    by_rate.max(by_slots)
}

/// The held PaymentIntents the next step reads: as many as fit
/// [`STEP_SHARE_OF_TIME_LEFT`] of `left` (the share's time left; `None`: no
/// deadline) at `cost` seconds each ([`read_cost`]), at most
/// [`HELD_PER_STEP`]; 0 when not one fits (the share is used up), so a step
/// is never started that cannot finish and record its attempts.
pub fn step_size(left: Option<Duration>, cost: f64) -> usize {
    let Some(left) = left else {
        return HELD_PER_STEP;
    };
    if cost <= 0.0 {
        return HELD_PER_STEP;
    }
    let fit = (left.as_secs_f64() * STEP_SHARE_OF_TIME_LEFT / cost).floor();
    if fit < 1.0 {
        return usize::from(left.as_secs_f64() >= cost);
    }
    (fit as usize).min(HELD_PER_STEP)
}

/// The held PaymentIntents one run reads again: a third of
/// `RECONCILER_EVENTS_MAX_PAGES` pages' worth (a page names up to
/// [`SLICE_EVENTS`] PaymentIntents), at least one, at most
/// [`RETRIES_PER_RUN`].
pub fn held_limit(max_pages: u32) -> usize {
    let pages = (max_pages / HELD_SHARE_DIVISOR) as usize;
    pages.saturating_mul(SLICE_EVENTS).clamp(1, RETRIES_PER_RUN)
}

/// When the held PaymentIntents' time is up: a third of
/// `RECONCILER_RUN_DEADLINE_SECONDS` after the run's start (`None`: no
/// deadline, only [`held_limit`] bounds them).
pub(super) fn held_until(ctx: &EventsContext<'_>) -> Option<Instant> {
    let share = ctx.settings.scan.run.run_deadline? / HELD_SHARE_DIVISOR;
    ctx.clock.started().checked_add(share)
}

/// After recording: what is held for the next runs (the plan's, and a row
/// demoted while Stripe was asked, held like one Stripe did not answer
/// for), those of the batch's events, and the PaymentIntents settled.
pub(super) fn holds<'e>(
    looked: &Looked<'e>,
    orphan_reads: &[OrphanRead],
    observations: &[Observation],
) -> (Vec<(String, HoldReason)>, Vec<Held<'e>>, Vec<&'e str>) {
    let mut held = looked.plan.held.clone();
    hold_unanswered(
        &mut held,
        &looked.rules,
        &looked.named,
        orphan_reads,
        observations,
    );
    let by_intent: HashMap<&str, &'e PaymentIntentEvent> = looked
        .named
        .iter()
        .map(|e| (e.payment_intent.as_str(), *e))
        .collect();
    let to_hold: Vec<Held<'e>> = held
        .iter()
        .filter_map(|(pi, reason)| {
            by_intent.get(pi.as_str()).map(|event| Held {
                event,
                reason: *reason,
            })
        })
        .collect();
    let settled: Vec<&'e str> = looked
        .ids
        .iter()
        .copied()
        .filter(|pi| !held.iter().any(|(h, _)| h == pi))
        .collect();
    (held, to_hold, settled)
}

/// PaymentIntents not settled by this read are held for the next runs
/// (while their event is younger than the hold limit, [`young`]: grace plus
/// about an hour, so a PaymentIntent that always fails cannot be read again
/// for ever; after that the scan covers its row): PaymentIntents without a
/// row that Stripe did not answer for, and rows Stripe did not answer for (or
/// whose money it could not prove) or that changed while it was asked.
fn hold_unanswered(
    held: &mut Vec<(String, HoldReason)>,
    rules: &PlanRules,
    named: &[&PaymentIntentEvent],
    orphans: &[OrphanRead],
    rows: &[Observation],
) {
    let created: HashMap<&str, DateTime<Utc>> = named
        .iter()
        .map(|e| (e.payment_intent.as_str(), e.created))
        .collect();
    let unanswered_orphans = orphans
        .iter()
        .filter(|o| o.unverifiable())
        .map(|o| (o.payment_intent.as_str(), HoldReason::StripeUnanswered));
    let unsettled_rows = rows
        .iter()
        .filter(|o| o.asked_stripe && o.observed.is_none() && o.decision.kind.is_none())
        .filter_map(|o| {
            let reason = if o.decision.verdict == Verdict::InFlight {
                HoldReason::ChangedWhileAsked
            } else {
                HoldReason::StripeUnanswered
            };
            o.payment_intent.as_deref().map(|pi| (pi, reason))
        });
    for (pi, reason) in unanswered_orphans.chain(unsettled_rows) {
        let is_young = created.get(pi).is_some_and(|c| young(rules, *c));
        if is_young && !held.iter().any(|(h, _)| h == pi) {
            held.push((pi.to_owned(), reason));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_read_costs_its_attempts_at_the_rate_limit_or_its_back_off_per_slot() {
        let retry = RetryPolicy::default();
        // 3 attempts at 10/s: 0.3 s; back-off 0.5 + 1 s over 8 slots: 0.19 s.
        assert!((read_cost(10, 8, retry) - 0.3).abs() < 1e-9);
        // 100/s on one slot: the back-off is what costs.
        assert!((read_cost(100, 1, retry) - 1.5).abs() < 1e-9);
    }

    #[test]
    fn a_step_fits_half_the_share_left_at_worst_case_cost() {
        // 6 s left at 10/s: 10 PaymentIntents (their 30 attempts take 3 s).
        assert_eq!(step_size(Some(Duration::from_secs(6)), 0.3), 10);
        assert_eq!(
            step_size(Some(Duration::from_secs(600)), 0.3),
            HELD_PER_STEP
        );
        assert_eq!(step_size(Some(Duration::from_millis(400)), 0.3), 1);
        assert_eq!(step_size(Some(Duration::from_millis(200)), 0.3), 0);
        assert_eq!(step_size(None, 0.3), HELD_PER_STEP);
    }

    #[test]
    fn held_payment_intents_get_a_third_of_the_page_budget_at_most_500() {
        // RECONCILER_EVENTS_MAX_PAGES 100 (default): 3,333 by pages, 500 at most.
        assert_eq!(held_limit(100), 500);
        // 9 pages: 3 pages' worth.
        assert_eq!(held_limit(9), 300);
        // 1 or 2 pages: still one, never none.
        assert_eq!((held_limit(1), held_limit(2)), (1, 1));
    }
}
