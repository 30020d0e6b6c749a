//! PURE: what an events run must read from Stripe. An event is a trigger,
//! never the truth: every PaymentIntent it names is re-read unless the local
//! row was confirmed with Stripe after the event and matches it.
//!
//! The rule for skipping a read ("the local row already agrees"): a row is
//! *confirmed* for an event when `last_reconciled_at` is later than the
//! event's `created` AND `observed_external_status` equals the status the
//! event's object showed. Then a retrieve after the event already saw at
//! least this state and recorded whatever drift there was; a second read
//! cannot learn more about this event. Local status matching the event's
//! status alone is not enough: the event's object is rendered in the event's
//! API version, may be older than the PaymentIntent's current state, and says
//! nothing about the charge (refunds, disputes) the money checks need.
//! A charge, refund or dispute event carries no PaymentIntent status, so the
//! rule never applies to it: its PaymentIntent is always re-read.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::reconcile::ExternalStatus;
use crate::store::events_retry::HoldReason;
use crate::store::payments::PaymentByIntent;
use crate::stripe::{EventObject, PaymentIntentEvent, PaymentIntentId};

/// The newest event per PaymentIntent, from a newest-first list, in the
/// order PaymentIntents first appear: a PaymentIntent named by five events
/// (PaymentIntent, charge, refund or dispute events alike) is read once.
/// When the newest is a charge, refund or dispute event, it keeps the status
/// and metadata of the PaymentIntent's newest PaymentIntent event, if any (a
/// succeeded PaymentIntent without a row, refunded since, is still an
/// orphan to read).
pub fn collapse(events: &[PaymentIntentEvent]) -> Vec<PaymentIntentEvent> {
    let mut at: HashMap<&str, usize> = HashMap::new();
    let mut once: Vec<PaymentIntentEvent> = Vec::new();
    for e in events {
        match at.get(e.payment_intent.as_str()) {
            None => {
                at.insert(e.payment_intent.as_str(), once.len());
                once.push(e.clone());
            }
            Some(&i) => {
                let kept = &mut once[i];
                if e.object == EventObject::PaymentIntent
                    && kept.status.is_none()
                    && kept.object != EventObject::PaymentIntent
                {
                    kept.status = e.status.clone();
                    kept.metadata = e.metadata.clone();
                }
            }
        }
    }
    once
}

/// The clock and thresholds of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRules {
    /// The run's clock.
    pub now: DateTime<Utc>,
    /// `RECONCILER_GRACE_SECONDS`: rows updated more recently are left alone
    /// (the application is on them), and a succeeded PaymentIntent this young
    /// without a row may still get one.
    pub grace: Duration,
    /// The PaymentIntent of an event younger than this that could not be
    /// decided (row in the grace window, no row yet, Stripe did not answer)
    /// waits in `reconciliation_events_retry` for the next runs; an older
    /// one is left to the scan.
    pub hold_limit: Duration,
    /// `RECONCILER_ORPHAN_METADATA_KEY`.
    pub orphan_metadata_key: Option<String>,
}

/// What happens to one `payments` row named by an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowAction {
    /// Re-read the PaymentIntent and classify the row as the scan does.
    Retrieve,
    /// Confirmed with Stripe after the event, in the event's status: no read.
    Confirmed,
    /// Updated within the grace window: skipped (IN_FLIGHT).
    InGrace,
}

/// The reads and skips of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// `(index into rows, action)` for every row found.
    pub rows: Vec<(usize, RowAction)>,
    /// Succeeded PaymentIntents without a row, to re-read as orphans.
    pub orphan_reads: Vec<PaymentIntentId>,
    /// Succeeded PaymentIntents without a row that already have an open
    /// `missing_locally` finding: no read.
    pub orphans_already_open: usize,
    /// Without a row and without the metadata key: another application's.
    pub foreign: usize,
    /// Without a row, and the newest event is not a success: nothing to say.
    pub not_succeeded: usize,
    /// PaymentIntents that have at least one row (their findings without a
    /// payment, if any, are stale).
    pub with_rows: Vec<String>,
    /// PaymentIntents to read again next run, and why (each at most once).
    pub held: Vec<(String, HoldReason)>,
}

impl Plan {
    /// Rows to re-read.
    pub fn count(&self, action: RowAction) -> usize {
        self.rows.iter().filter(|(_, a)| *a == action).count()
    }

    /// The PaymentIntents that a later event of the same run needs no new
    /// plan for: those read from Stripe (every row of theirs retrieved, or
    /// an orphan read) and those `held` for another read. A PaymentIntent
    /// decided without a read (a row confirmed after the event, or no row
    /// and no success yet) is not among them: the earlier event said nothing
    /// about the later one. `rows` are the rows the plan was made from.
    pub fn read_or_held(
        &self,
        rows: &[PaymentByIntent],
        held: &[(String, HoldReason)],
    ) -> Vec<String> {
        let pi_of = |i: usize| rows[i].row.stripe_payment_intent_id.clone();
        let confirmed: HashSet<String> = self
            .rows
            .iter()
            .filter(|(_, a)| *a == RowAction::Confirmed)
            .filter_map(|(i, _)| pi_of(*i))
            .collect();
        let retrieved = self
            .rows
            .iter()
            .filter(|(_, a)| *a == RowAction::Retrieve)
            .filter_map(|(i, _)| pi_of(*i))
            .filter(|pi| !confirmed.contains(pi));
        let orphans = self.orphan_reads.iter().map(|pi| pi.as_str().to_owned());
        retrieved
            .chain(orphans)
            .chain(held.iter().map(|(pi, _)| pi.clone()))
            .collect()
    }

    fn hold(&mut self, rules: &PlanRules, event: &PaymentIntentEvent, reason: HoldReason) {
        let pi = event.payment_intent.as_str();
        if young(rules, event.created) && !self.held.iter().any(|(p, _)| p == pi) {
            self.held.push((pi.to_owned(), reason));
        }
    }
}

/// Whether an event created at `created` is younger than the hold limit:
/// only then is its PaymentIntent held for another read.
pub fn young(rules: &PlanRules, created: DateTime<Utc>) -> bool {
    rules
        .now
        .signed_duration_since(created)
        .to_std()
        .unwrap_or_default()
        < rules.hold_limit
}

/// A row is confirmed for a PaymentIntent event when Stripe was asked about
/// it after the event and answered the event's status. Never for a charge,
/// refund or dispute event: they show no PaymentIntent status to match.
pub fn confirmed_after(row: &PaymentByIntent, event: &PaymentIntentEvent) -> bool {
    if event.object != EventObject::PaymentIntent {
        return false;
    }
    match (
        &row.last_reconciled_at,
        &row.observed_external_status,
        &event.status,
    ) {
        (Some(at), Some(observed), Some(status)) => {
            *at > event.created && ExternalStatus::parse(observed) == *status
        }
        _ => false,
    }
}

/// Decides the reads of a run: `events` collapsed per PaymentIntent
/// ([`collapse`]), `rows` the payments holding their ids, `open_orphans` the
/// PaymentIntents with an open `missing_locally` finding.
pub fn plan(
    events: &[&PaymentIntentEvent],
    rows: &[PaymentByIntent],
    open_orphans: &HashSet<String>,
    rules: &PlanRules,
) -> Plan {
    let mut by_intent: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        if let Some(pi) = r.row.stripe_payment_intent_id.as_deref() {
            by_intent.entry(pi).or_default().push(i);
        }
    }
    let succeeded = ExternalStatus::parse("succeeded");
    let mut plan = Plan::default();
    for event in events {
        let pi = event.payment_intent.as_str();
        if let Some(indexes) = by_intent.get(pi) {
            plan.with_rows.push(pi.to_owned());
            for &i in indexes {
                let row = &rows[i];
                let action = if row.row.recently_changed {
                    plan.hold(rules, event, HoldReason::InGrace);
                    RowAction::InGrace
                } else if confirmed_after(row, event) {
                    RowAction::Confirmed
                } else {
                    RowAction::Retrieve
                };
                plan.rows.push((i, action));
            }
            continue;
        }
        if event.status.as_ref() != Some(&succeeded) {
            plan.not_succeeded += 1;
        } else if rules
            .orphan_metadata_key
            .as_ref()
            .is_some_and(|k| !event.metadata.contains_key(k))
        {
            plan.foreign += 1;
        } else if open_orphans.contains(pi) {
            plan.orphans_already_open += 1;
        } else if rules
            .now
            .signed_duration_since(event.created)
            .to_std()
            .unwrap_or_default()
            < rules.grace
        {
            // The application may not have committed its row yet.
            plan.hold(rules, event, HoldReason::NoRowYet);
        } else {
            plan.orphan_reads.push(event.payment_intent.clone());
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::payments::PaymentRow;
    use chrono::TimeZone;
    use std::collections::BTreeMap;

    fn event(id: &str, pi: &str, status: &str, created: i64) -> PaymentIntentEvent {
        PaymentIntentEvent {
            id: id.into(),
            event_type: format!("payment_intent.{status}"),
            created: Utc.timestamp_opt(created, 0).unwrap(),
            object: EventObject::PaymentIntent,
            payment_intent: PaymentIntentId::parse(pi).unwrap(),
            status: Some(ExternalStatus::parse(status)),
            metadata: [("app".to_owned(), "shop".to_owned())].into(),
        }
    }

    fn row(id: i64, pi: &str, recent: bool, reconciled: Option<(i64, &str)>) -> PaymentByIntent {
        PaymentByIntent {
            row: PaymentRow {
                id: id.into(),
                stripe_payment_intent_id: Some(pi.into()),
                status: crate::reconcile::LocalStatus::Pending,
                version: 0,
                updated_at: Utc.timestamp_opt(0, 0).unwrap(),
                created_at: Utc.timestamp_opt(0, 0).unwrap(),
                recently_changed: recent,
                key_not_utf8: false,
                amount: None,
                currency: None,
                shares_payment_intent: false,
                stripe_account: None,
                behind_cursor: false,
                checkout_session_id: None,
            },
            last_reconciled_at: reconciled.map(|(t, _)| Utc.timestamp_opt(t, 0).unwrap()),
            observed_external_status: reconciled.map(|(_, s)| s.to_owned()),
        }
    }

    fn rules(key: Option<&str>) -> PlanRules {
        PlanRules {
            now: Utc.timestamp_opt(10_000, 0).unwrap(),
            grace: Duration::from_secs(600),
            hold_limit: Duration::from_secs(4200),
            orphan_metadata_key: key.map(str::to_owned),
        }
    }

    #[test]
    fn five_events_about_one_payment_intent_collapse_to_the_newest() {
        let events: Vec<_> = (0..5)
            .map(|i| event(&format!("evt_{i}"), "pi_A", "processing", 9000 - i))
            .chain([event("evt_b", "pi_B", "succeeded", 8000)])
            .collect();
        let once = collapse(&events);
        assert_eq!(once.len(), 2);
        assert_eq!(once[0].id, "evt_0", "the newest event of pi_A wins");
    }

    /// A `charge.refunded` event about `pi`: no PaymentIntent status.
    fn refund(id: &str, pi: &str, created: i64) -> PaymentIntentEvent {
        PaymentIntentEvent {
            event_type: "charge.refunded".into(),
            object: EventObject::Charge,
            status: None,
            metadata: BTreeMap::new(),
            ..event(id, pi, "succeeded", created)
        }
    }

    #[test]
    fn a_refund_event_collapses_with_the_payment_intent_events_and_is_always_read() {
        let events = [
            refund("evt_r", "pi_A", 9500),
            event("evt_s", "pi_A", "succeeded", 9000),
            refund("evt_other", "pi_B", 8000),
        ];
        let once = collapse(&events);
        assert_eq!(once.len(), 2, "one read per PaymentIntent");
        assert_eq!(once[0].id, "evt_r", "the newest event holds the position");
        assert_eq!(
            once[0].status,
            Some(ExternalStatus::parse("succeeded")),
            "the PaymentIntent's newest status is kept for the orphan rule"
        );
        // Reconciled after the refund, and in its status: still re-read,
        // since a refund shows no PaymentIntent status to match.
        let rows = [row(1, "pi_A", false, Some((9600, "succeeded")))];
        let refs: Vec<_> = once.iter().collect();
        let p = plan(&refs, &rows, &HashSet::new(), &rules(None));
        assert_eq!(p.rows, [(0, RowAction::Retrieve)]);
        assert_eq!(p.not_succeeded, 1, "pi_B has no row and no success seen");
    }

    #[test]
    fn only_rows_confirmed_after_the_event_in_its_status_skip_the_read() {
        let e = event("evt_1", "pi_A", "succeeded", 9000);
        let rows = [
            row(1, "pi_A", false, Some((9001, "succeeded"))),
            row(2, "pi_A", false, Some((8999, "succeeded"))),
            row(3, "pi_A", false, Some((9001, "processing"))),
            row(4, "pi_A", false, None),
            row(5, "pi_A", true, None),
        ];
        let p = plan(&[&e], &rows, &HashSet::new(), &rules(None));
        let actions: Vec<RowAction> = p.rows.iter().map(|(_, a)| *a).collect();
        use RowAction::*;
        assert_eq!(actions, [Confirmed, Retrieve, Retrieve, Retrieve, InGrace]);
        assert_eq!(
            p.held,
            [("pi_A".to_owned(), HoldReason::InGrace)],
            "the row in grace is read again next run, once"
        );
    }

    #[test]
    fn an_undecided_event_older_than_the_hold_limit_is_left_to_the_scan() {
        // 10_000 - 5_000 = 5_000 s old, over the 4_200 s hold limit.
        let e = event("evt_1", "pi_A", "succeeded", 5_000);
        let rows = [row(1, "pi_A", true, None)];
        let p = plan(&[&e], &rows, &HashSet::new(), &rules(None));
        assert_eq!(p.rows, [(0, RowAction::InGrace)]);
        assert!(p.held.is_empty(), "{:?}", p.held);
    }

    #[test]
    fn orphans_need_success_the_metadata_key_and_to_be_out_of_grace() {
        let events = [
            event("evt_1", "pi_Ok", "succeeded", 1000),
            event("evt_2", "pi_Fail", "payment_failed", 1000),
            event("evt_3", "pi_Young", "succeeded", 9900),
            event("evt_4", "pi_Open", "succeeded", 1000),
        ];
        let refs: Vec<_> = events.iter().collect();
        let open: HashSet<String> = ["pi_Open".to_owned()].into();
        let p = plan(&refs, &[], &open, &rules(Some("app")));
        assert_eq!(p.orphan_reads, [PaymentIntentId::parse("pi_Ok").unwrap()]);
        assert_eq!((p.not_succeeded, p.orphans_already_open), (1, 1));
        assert_eq!(p.held, [("pi_Young".to_owned(), HoldReason::NoRowYet)]);
        let p = plan(&refs, &[], &open, &rules(Some("other_app")));
        assert_eq!((p.foreign, p.orphan_reads.len()), (3, 0));
    }
}
