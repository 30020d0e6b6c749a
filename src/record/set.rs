//! Phase 3's statements over one set of rows, in the one lock order of
//! every writer (payments, findings, outbox), each failure tagged with the
//! [`Write`] it came from: what [`super::isolate`] runs under a savepoint,
//! and bisects when the database refuses it.

use std::collections::{HashMap, HashSet};

use crate::config::{OutboxSettings, PaymentTimes};
use crate::key::{KeyType, PaymentKey};
use crate::read::Observation;
use crate::reconcile::{FindingKind, RepairCommand};
use crate::store::findings::{self, CreatedFinding, NewFinding};
use crate::store::outbox::{self, RepairRow};
use crate::store::payment_state;
use crate::store::unverifiable;
use crate::store::StoreError;

use super::rows::{self, demote_changed_rows, new_finding};

/// Where and for whom [`super::record_observations`] writes, built once per
/// job from its settings: the outbox of repair commands, `payments.id`'s
/// type (the reconciler's key columns hold it, docs/keys.md),
/// the job whose UNVERIFIABLE streaks are counted and after how many cycles
/// they become a finding, and how `payments`' times are stored.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// `RECONCILER_OUTBOX_*`.
    pub outbox: &'a OutboxSettings,
    /// Detected at start (`SchemaSettings::key`).
    pub key: &'a KeyType,
    /// `RECONCILER_JOB`: the job whose cycle counts UNVERIFIABLE rows.
    pub job: &'a str,
    /// `RECONCILER_UNVERIFIABLE_CYCLES`.
    pub unverifiable_cycles: u32,
    /// How `payments`' `created_at`/`updated_at` are stored.
    pub times: &'a PaymentTimes,
}

/// What [`super::record_observations`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recorded {
    /// Findings newly opened.
    pub findings_created: u64,
    /// Open findings resolved because the read no longer sees them.
    pub findings_cleared: u64,
    /// Repair commands enqueued in the outbox.
    pub commands_enqueued: u64,
    /// Rows the database refused to write, each now with a `write_refused`
    /// finding (counted in `findings_created` when it is new).
    pub writes_refused: u64,
}

impl Recorded {
    pub(super) fn add(&mut self, other: &Recorded) {
        self.findings_created += other.findings_created;
        self.findings_cleared += other.findings_cleared;
        self.commands_enqueued += other.commands_enqueued;
        self.writes_refused += other.writes_refused;
    }
}

/// Which of phase 3's writes the database refused. The label is about the
/// statement, not the table it writes, so it stays right wherever the
/// reconciler keeps its stamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Locking the payment row (`FOR NO KEY UPDATE`) before writing for it.
    LockPayment,
    /// The "verified" stamp (observed status, last confirmed).
    Stamp,
    /// Resolving or recording the row's findings.
    Finding,
    /// The row's UNVERIFIABLE streak.
    Unverifiable,
    /// Closing or enqueueing the row's repair commands.
    Outbox,
}

impl Write {
    /// The label in a `write_refused` finding's `details.write`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::LockPayment => "lock_payment",
            Self::Stamp => "stamp",
            Self::Finding => "finding",
            Self::Unverifiable => "unverifiable",
            Self::Outbox => "outbox",
        }
    }
}

/// A write of phase 3 that failed, and which one.
#[derive(Debug)]
pub(super) struct Failed {
    pub write: Write,
    pub error: StoreError,
}

/// Tags a store error with the write it came from.
pub(super) fn at(write: Write) -> impl FnOnce(StoreError) -> Failed {
    move |error| Failed { write, error }
}

/// Phase 3's statements over one set of rows, each failure tagged with the
/// write it came from so [`super::isolate`] can classify and label it. Payments
/// first (in id order), then findings, then the outbox: the one lock order
/// of every writer, so the scan and repair workers never deadlock.
pub(super) async fn record_set(
    tx: &mut sqlx::PgConnection,
    target: Target<'_>,
    observations: &mut [Observation],
) -> Result<Recorded, Failed> {
    demote_changed_rows(tx, target.key, observations, target.times)
        .await
        .map_err(at(Write::LockPayment))?;
    let observations: &[Observation] = observations;
    let (answered_ids, findings_cleared) = stamp_and_clear(tx, target, observations).await?;
    close_unproven(tx, target, observations).await?;
    let touched = open_findings(tx, target, observations, &answered_ids).await?;
    let findings_created = touched.iter().filter(|f| f.created).count() as u64;
    let commands_enqueued = enqueue_commands(tx, target, &touched, observations).await?;
    Ok(Recorded {
        findings_created,
        findings_cleared,
        commands_enqueued,
        writes_refused: 0,
    })
}

/// Every row read gets its state row (so it is seen, and counts in the lag
/// from `created_at` until confirmed); answered rows are confirmed. A
/// finding the scan no longer sees is resolved, with its commands. Returns
/// the answered rows' ids and the findings resolved.
async fn stamp_and_clear(
    tx: &mut sqlx::PgConnection,
    target: Target<'_>,
    observations: &[Observation],
) -> Result<(Vec<PaymentKey>, u64), Failed> {
    // Answered: rows Stripe answered definitively. A 404 or a malformed id is
    // an answer too (its finding carries the problem), so those rows do not
    // hold the reconciliation lag forever; UNVERIFIABLE rows never are.
    let answered: Vec<&Observation> = observations.iter().filter(|o| is_answer(o)).collect();
    let answered_ids: Vec<PaymentKey> = answered.iter().map(|o| o.payment_id.clone()).collect();
    let current_kinds: Vec<Option<String>> = answered
        .iter()
        .map(|o| o.decision.kind.as_ref().map(|k| k.as_str().into_owned()))
        .collect();
    let all_ids: Vec<PaymentKey> = observations.iter().map(|o| o.payment_id.clone()).collect();
    let confirmed: Vec<bool> = observations.iter().map(is_answer).collect();
    let statuses: Vec<Option<String>> = observations
        .iter()
        .map(|o| o.observed.as_ref().map(|s| s.as_str().to_owned()))
        .collect();
    let times = target.times;
    payment_state::record(tx, target.key, &all_ids, &confirmed, &statuses, times)
        .await
        .map_err(at(Write::Stamp))?;
    let with_status: Vec<bool> = answered.iter().map(|o| o.observed.is_some()).collect();
    let stale =
        findings::resolve_stale(tx, target.key, &answered_ids, &current_kinds, &with_status)
            .await
            .map_err(at(Write::Finding))?;
    outbox::close_for_findings(
        tx,
        target.outbox,
        &RepairCommand::EVENT_TYPES,
        &stale,
        "finding resolved by a later scan",
    )
    .await
    .map_err(at(Write::Outbox))?;
    Ok((answered_ids, stale.len() as u64))
}

/// A repair is applied only while the newest read supports it: a row
/// Stripe could not answer for now (or whose money could not be proven
/// kept) has its pending repair command closed; the next read that proves
/// the drift enqueues one again (`findings_without_command`).
async fn close_unproven(
    tx: &mut sqlx::PgConnection,
    target: Target<'_>,
    observations: &[Observation],
) -> Result<(), Failed> {
    let unproven: Vec<PaymentKey> = observations
        .iter()
        .filter(|o| o.unverifiable_read())
        .map(|o| o.payment_id.clone())
        .collect();
    let held = findings::open_repairable(tx, target.key, &unproven)
        .await
        .map_err(at(Write::Finding))?;
    outbox::close_for_findings(
        tx,
        target.outbox,
        &RepairCommand::EVENT_TYPES,
        &held,
        "a later read could not confirm the drift with Stripe; enqueued again once one does",
    )
    .await
    .map_err(at(Write::Outbox))?;
    Ok(())
}

/// The findings the rows call for, opened once: each row's own, and
/// `persistently_unverifiable` for rows Stripe could not answer for in
/// `target.unverifiable_cycles` cycles (counted once per cycle). Returns
/// every finding touched (new or already open).
async fn open_findings(
    tx: &mut sqlx::PgConnection,
    target: Target<'_>,
    observations: &[Observation],
    answered_ids: &[PaymentKey],
) -> Result<Vec<CreatedFinding>, Failed> {
    let (failed_ids, errors): (Vec<PaymentKey>, Vec<Option<String>>) = observations
        .iter()
        .filter(|o| o.unverifiable_read())
        .map(|o| (o.payment_id.clone(), o.error.clone()))
        .unzip();
    let (job, key, unverifiable_cycles) = (target.job, target.key, target.unverifiable_cycles);
    let failing = unverifiable::record(tx, (job, key), answered_ids, &failed_ids, &errors)
        .await
        .map_err(at(Write::Unverifiable))?;
    let by_payment: HashMap<&PaymentKey, &Observation> =
        observations.iter().map(|o| (&o.payment_id, o)).collect();
    let mut new_findings: Vec<NewFinding> = observations.iter().filter_map(new_finding).collect();
    new_findings.extend(
        failing
            .iter()
            .filter(|u| u.cycles >= i32::try_from(unverifiable_cycles).unwrap_or(i32::MAX))
            .filter_map(|u| {
                let o = by_payment.get(&u.payment_id)?;
                Some(NewFinding {
                    payment_id: u.payment_id.clone(),
                    kind: FindingKind::PersistentlyUnverifiable.as_str().into_owned(),
                    local_status: o.local.as_str().to_owned(),
                    external_status: None,
                    details: Some(serde_json::json!({
                        "last_error": u.last_error,
                        "cycles": u.cycles,
                        "failing_since": u.first_failed_at.to_rfc3339(),
                    })),
                    acknowledgeable: false,
                    stripe_account_id: o.stripe_account.clone(),
                    checkout_session_id: o.checkout_session.clone(),
                    stripe_payment_intent_id: rows::session_payment_intent(o),
                })
            }),
    );
    findings::upsert_open(tx, key, &new_findings)
        .await
        .map_err(at(Write::Finding))
}

/// One live command per open repairable finding: enqueued when the finding
/// is new, or again when its command was lost or skipped while a money
/// finding blocked the payment; never for a payment that is blocked now.
/// Returns the commands enqueued.
async fn enqueue_commands(
    tx: &mut sqlx::PgConnection,
    target: Target<'_>,
    touched: &[CreatedFinding],
    observations: &[Observation],
) -> Result<u64, Failed> {
    let by_payment: HashMap<&PaymentKey, &Observation> =
        observations.iter().map(|o| (&o.payment_id, o)).collect();
    let repairable: Vec<(&CreatedFinding, RepairCommand, &Observation)> = touched
        .iter()
        .filter_map(|f| {
            let o = by_payment.get(&f.payment_id)?;
            let command = o.decision.command?;
            (command.finding_kind().as_str() == f.kind).then_some((f, command, *o))
        })
        .collect();
    let candidate_payments: Vec<PaymentKey> = repairable
        .iter()
        .map(|(f, ..)| f.payment_id.clone())
        .collect();
    let blocked: HashSet<PaymentKey> =
        findings::blocked_payments(tx, target.key, &candidate_payments)
            .await
            .map_err(at(Write::Finding))?
            .into_iter()
            .collect();
    let candidate_findings: Vec<i64> = repairable
        .iter()
        .filter(|(f, ..)| !blocked.contains(&f.payment_id))
        .map(|(f, ..)| f.id)
        .collect();
    let without: HashSet<i64> = outbox::findings_without_command(
        tx,
        target.outbox,
        &RepairCommand::EVENT_TYPES,
        &candidate_findings,
    )
    .await
    .map_err(at(Write::Outbox))?
    .into_iter()
    .collect();
    let repairs: Vec<RepairRow> = repairable
        .iter()
        .filter(|(f, ..)| without.contains(&f.id))
        .filter_map(|(f, command, o)| repair_row(f, *command, o))
        .collect();
    outbox::enqueue_repairs(tx, target.outbox, target.key, &repairs)
        .await
        .map_err(at(Write::Outbox))
}

/// The outbox row of `finding`'s `command`. A PaymentIntent row's command
/// carries its id; a session row's its session, and the session's
/// PaymentIntent when it has one (the writer fills it in; an expired session
/// may have none); `None` for a row with neither.
fn repair_row(
    finding: &CreatedFinding,
    command: RepairCommand,
    o: &Observation,
) -> Option<RepairRow> {
    let checkout_session_id = o.checkout_session.clone();
    if checkout_session_id.is_none() && o.payment_intent.is_none() {
        return None;
    }
    Some(RepairRow {
        payment_id: finding.payment_id.clone(),
        finding_id: finding.id,
        command: command.as_str(),
        expected_local_status: o.local.as_str().to_owned(),
        stripe_payment_intent_id: o.payment_intent.clone(),
        stripe_account_id: o.stripe_account.clone(),
        checkout_session_id,
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
        Some(
            FindingKind::MissingExternally
                | FindingKind::InvalidPaymentIntentId
                | FindingKind::InvalidCheckoutSessionId
        )
    )
}
