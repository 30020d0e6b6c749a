//! The PaymentIntents a batch could not decide, held for another read
//! (`reconciliation_events_retry`): which ones a batch holds, and the share
//! of a run their reads get (docs/operations.md, "Events: held PaymentIntents get a third of a run").

use std::collections::HashMap;
use std::time::Instant;

use chrono::{DateTime, Utc};

use super::groups::EventsContext;
use super::lookup::Looked;
use super::orphans::OrphanRead;
use super::plan::{young, PlanRules};
use super::slices::SLICE_EVENTS;
use crate::read::Observation;
use crate::reconcile::Verdict;
use crate::store::events_retry::{Held, HoldReason};
use crate::stripe::PaymentIntentEvent;

/// The most PaymentIntents held by earlier runs read again per run, before
/// the feed (about five slices' worth).
pub const RETRIES_PER_RUN: usize = 500;

/// The held PaymentIntents' share of a run: a third of its page budget and
/// of its deadline; the rest goes to new events.
pub const HELD_SHARE_DIVISOR: u32 = 3;

/// Held PaymentIntents read again per step (one commit each), oldest first:
/// a slice's worth.
pub const HELD_PER_STEP: usize = SLICE_EVENTS;

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
    fn held_payment_intents_get_a_third_of_the_page_budget_at_most_500() {
        // RECONCILER_EVENTS_MAX_PAGES 100 (default): 3,333 by pages, 500 at most.
        assert_eq!(held_limit(100), 500);
        // 9 pages: 3 pages' worth.
        assert_eq!(held_limit(9), 300);
        // 1 or 2 pages: still one, never none.
        assert_eq!((held_limit(1), held_limit(2)), (1, 1));
    }
}
