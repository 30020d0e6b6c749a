//! Phase 3's write path, one for the scan's batches and the events job:
//! what a read of Stripe observed becomes stamps, findings and repair
//! commands, inside the caller's write transaction (which also moves the
//! caller's cursor or position). Lock order: payments, findings, outbox.
//!
//! - [`rows`]: the rows phase 3 writes for, locked and demoted when they
//!   changed meanwhile, and the finding each records.

pub mod rows;

use std::collections::{HashMap, HashSet};

use crate::outcome::RunError;
use crate::read::Observation;
use crate::reconcile::{FindingKind, RepairCommand, Verdict};
use crate::store::findings::{self, CreatedFinding, NewFinding};
use crate::store::outbox::{self, RepairRow};
use crate::store::payment_state;
use crate::store::unverifiable;
use rows::demote_changed_rows;
pub use rows::new_finding;

/// What [`record_observations`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recorded {
    /// Findings newly opened.
    pub findings_created: u64,
    /// Open findings resolved because the read no longer sees them.
    pub findings_cleared: u64,
    /// Repair commands enqueued in the outbox.
    pub commands_enqueued: u64,
}

/// Records what phase 2 observed, inside the caller's transaction `tx`,
/// the same for a scan batch and an events run: locks the
/// payments (demoting rows that changed meanwhile), records in the
/// reconciler's own `reconciliation_payment_state` every row read and, for
/// rows Stripe answered, `observed_external_status`/`last_reconciled_at`
/// (never an UPDATE of `payments`: DESIGN.md, Turn 3 contract),
/// resolves stale findings with their commands, counts UNVERIFIABLE rows
/// against `job`'s cycle, upserts findings once per open (payment, kind),
/// and enqueues one command per open repairable finding without a live one
/// and not blocked. Returns what it created, cleared and enqueued.
///
/// # Errors
/// [`RunError::Store`]; the caller rolls back.
pub async fn record_observations(
    tx: &mut sqlx::PgConnection,
    job: &str,
    unverifiable_cycles: u32,
    observations: &mut [Observation],
) -> Result<Recorded, RunError> {
    // Payments first (in id order), then findings, then the outbox: the one
    // lock order of every writer, so the scan and repair workers never deadlock.
    demote_changed_rows(tx, observations).await?;
    // Answered: rows Stripe answered definitively. A 404 or a malformed id is
    // an answer too (its finding carries the problem), so those rows do not
    // hold the reconciliation lag forever; UNVERIFIABLE rows never are.
    let answered: Vec<&Observation> = observations.iter().filter(|o| is_answer(o)).collect();
    let answered_ids: Vec<i64> = answered.iter().map(|o| o.payment_id).collect();
    let current_kinds: Vec<Option<String>> = answered
        .iter()
        .map(|o| o.decision.kind.as_ref().map(|k| k.as_str().into_owned()))
        .collect();
    // Every row read gets its state row (so it is seen, and counts in the lag
    // from `created_at` until confirmed); answered rows are confirmed.
    let all_ids: Vec<i64> = observations.iter().map(|o| o.payment_id).collect();
    let confirmed: Vec<bool> = observations.iter().map(is_answer).collect();
    let statuses: Vec<Option<String>> = observations
        .iter()
        .map(|o| o.observed.as_ref().map(|s| s.as_str().to_owned()))
        .collect();
    payment_state::record(tx, &all_ids, &confirmed, &statuses).await?;
    // A finding the scan no longer sees is resolved, with its commands.
    let with_status: Vec<bool> = answered.iter().map(|o| o.observed.is_some()).collect();
    let stale = findings::resolve_stale(tx, &answered_ids, &current_kinds, &with_status).await?;
    let findings_cleared = stale.len() as u64;
    outbox::close_for_findings(
        tx,
        &RepairCommand::EVENT_TYPES,
        &stale,
        "finding resolved by a later scan",
    )
    .await?;

    // A repair is applied only while the newest read supports it: a row
    // Stripe could not answer for now (or whose money could not be proven
    // kept) has its pending repair command closed; the next read that proves
    // the drift enqueues one again (`findings_without_command`).
    let unproven: Vec<i64> = observations
        .iter()
        .filter(|o| o.asked_stripe && o.decision.verdict == Verdict::Unverifiable)
        .map(|o| o.payment_id)
        .collect();
    let held = findings::open_repairable(tx, &unproven).await?;
    outbox::close_for_findings(
        tx,
        &RepairCommand::EVENT_TYPES,
        &held,
        "a later read could not confirm the drift with Stripe; enqueued again once one does",
    )
    .await?;

    // Rows Stripe could not answer for, counted once per cycle.
    let (failed_ids, errors): (Vec<i64>, Vec<Option<String>>) = observations
        .iter()
        .filter(|o| o.asked_stripe && o.decision.verdict == Verdict::Unverifiable)
        .map(|o| (o.payment_id, o.error.clone()))
        .unzip();
    let failing = unverifiable::record(tx, job, &answered_ids, &failed_ids, &errors).await?;
    let by_payment: HashMap<i64, &Observation> =
        observations.iter().map(|o| (o.payment_id, o)).collect();
    let mut new_findings: Vec<NewFinding> = observations.iter().filter_map(new_finding).collect();
    new_findings.extend(
        failing
            .iter()
            .filter(|u| u.cycles >= i32::try_from(unverifiable_cycles).unwrap_or(i32::MAX))
            .filter_map(|u| {
                let o = by_payment.get(&u.payment_id)?;
                Some(NewFinding {
                    payment_id: u.payment_id,
                    kind: FindingKind::PersistentlyUnverifiable.as_str().into_owned(),
                    local_status: o.local.as_str().to_owned(),
                    external_status: None,
                    details: Some(serde_json::json!({
                        "last_error": u.last_error,
                        "cycles": u.cycles,
                        "failing_since": u.first_failed_at.to_rfc3339(),
                    })),
                    acknowledgeable: false,
                })
            }),
    );
    let touched = findings::upsert_open(tx, &new_findings).await?;
    let findings_created = touched.iter().filter(|f| f.created).count() as u64;

    // One live command per open repairable finding: enqueued when the finding
    // is new, or again when its command was lost or skipped while a money
    // finding blocked the payment; never for a payment that is blocked now.
    let repairable: Vec<(&CreatedFinding, RepairCommand, &Observation)> = touched
        .iter()
        .filter_map(|f| {
            let o = by_payment.get(&f.payment_id)?;
            let command = o.decision.command?;
            (command.finding_kind().as_str() == f.kind).then_some((f, command, *o))
        })
        .collect();
    let candidate_payments: Vec<i64> = repairable.iter().map(|(f, ..)| f.payment_id).collect();
    let blocked: HashSet<i64> = findings::blocked_payments(tx, &candidate_payments)
        .await?
        .into_iter()
        .collect();
    let candidate_findings: Vec<i64> = repairable
        .iter()
        .filter(|(f, ..)| !blocked.contains(&f.payment_id))
        .map(|(f, ..)| f.id)
        .collect();
    let without: HashSet<i64> =
        outbox::findings_without_command(tx, &RepairCommand::EVENT_TYPES, &candidate_findings)
            .await?
            .into_iter()
            .collect();
    let repairs: Vec<RepairRow> = repairable
        .iter()
        .filter(|(f, ..)| without.contains(&f.id))
        .filter_map(|(f, command, o)| {
            Some(RepairRow {
                payment_id: f.payment_id,
                finding_id: f.id,
                command: command.as_str(),
                expected_local_status: o.local.as_str().to_owned(),
                stripe_payment_intent_id: o.payment_intent.clone()?,
            })
        })
        .collect();
    let commands_enqueued = outbox::enqueue_repairs(tx, &repairs).await?;
    Ok(Recorded {
        findings_created,
        findings_cleared,
        commands_enqueued,
    })
}

/// Stripe answered for this row definitively: a status, or a 404 / malformed
/// id (whose finding carries the problem).
fn is_answer(o: &Observation) -> bool {
    o.observed.is_some() || definitive_without_status(o)
}

fn definitive_without_status(o: &Observation) -> bool {
    matches!(
        o.decision.kind,
        Some(FindingKind::MissingExternally | FindingKind::InvalidPaymentIntentId)
    )
}
