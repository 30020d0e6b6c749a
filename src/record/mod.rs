//! Phase 3's write path, one for the scan's batches and the events job:
//! what a read of Stripe observed becomes stamps, findings and repair
//! commands, inside the caller's write transaction (which also moves the
//! caller's cursor or position). Lock order: payments, findings, outbox.
//!
//! - [`rows`]: the rows phase 3 writes for, locked and demoted when they
//!   changed meanwhile, and the finding each records.
//! - [`isolate`]: savepoints and bisection, so a row the database refuses
//!   to write gets a `write_refused` finding instead of failing the batch.

pub mod isolate;
pub mod rows;

use std::collections::{HashMap, HashSet};

use crate::config::{OutboxSettings, PaymentTimes};
use crate::key::{KeyType, PaymentKey};
use crate::outcome::RunError;
use crate::read::Observation;
use sqlx::Connection;

use crate::reconcile::{Decision, FindingKind, RepairCommand};
use crate::store::findings::{self, CreatedFinding, NewFinding};
use crate::store::outbox::{self, RepairRow};
use crate::store::payment_state;
use crate::store::refusal::FailureClass;
use crate::store::unverifiable;
use crate::store::{Context, StoreError};
use isolate::{at, Failed, Refusal, Write};
pub use rows::new_finding;
use rows::{demote_changed_rows, writes_for};

/// Where [`record_observations`] writes: the outbox of repair commands and
/// `payments.id`'s type (the reconciler's key columns hold it, issue 31).
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// `RECONCILER_OUTBOX_*`.
    pub outbox: &'a OutboxSettings,
    /// Detected at start (`SchemaSettings::key`).
    pub key: &'a KeyType,
}

/// What [`record_observations`] wrote.
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
    fn add(&mut self, other: &Recorded) {
        self.findings_created += other.findings_created;
        self.findings_cleared += other.findings_cleared;
        self.commands_enqueued += other.commands_enqueued;
        self.writes_refused += other.writes_refused;
    }
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
/// and not blocked. Returns what it created, cleared, enqueued and refused.
///
/// A row whose write the database refuses (a trigger, a constraint, a lock
/// or statement timeout; [`isolate`]) gets nothing written but a
/// `write_refused` finding, recorded after the other rows, and its
/// observation becomes NEEDS_REVIEW; the rest of the batch is written.
///
/// # Errors
/// [`RunError::Store`] when the database as a whole fails. A batch refused
/// as a whole is such a failure too: when phase 3 writes for two or more
/// rows and every one of them is refused, the refusal is taken to be the
/// database's, not the rows' (a trigger refusing every update, a lock on the
/// table), and the caller rolls back; the run exits 1 and the next run
/// retries the same rows.
pub async fn record_observations(
    tx: &mut sqlx::PgConnection,
    target: Target<'_>,
    job: &str,
    unverifiable_cycles: u32,
    observations: &mut [Observation],
    times: &PaymentTimes,
) -> Result<Recorded, RunError> {
    let writing: Vec<usize> = (0..observations.len())
        .filter(|&i| writes_for(&observations[i]))
        .collect();
    let writing_rows = writing.len();
    let (mut recorded, refused) = isolate::record_isolating(
        tx,
        target,
        job,
        unverifiable_cycles,
        observations,
        writing,
        times,
    )
    .await?;
    if refused.is_empty() {
        return Ok(recorded);
    }
    if writing_rows >= 2 && refused.len() == writing_rows {
        return Err(whole_batch_refused(refused, observations));
    }
    recorded.writes_refused = refused.len() as u64;
    recorded.findings_created += record_refusals(tx, target.key, &refused, observations).await?;
    Ok(recorded)
}

/// Phase 3's statements over one set of rows, each failure tagged with the
/// write it came from so [`isolate`] can classify and label it. Payments
/// first (in id order), then findings, then the outbox: the one lock order
/// of every writer, so the scan and repair workers never deadlock.
async fn record_set(
    tx: &mut sqlx::PgConnection,
    target: Target<'_>,
    job: &str,
    unverifiable_cycles: u32,
    observations: &mut [Observation],
    times: &PaymentTimes,
) -> Result<Recorded, Failed> {
    demote_changed_rows(tx, target.key, observations, times)
        .await
        .map_err(at(Write::LockPayment))?;
    let observations: &[Observation] = observations;
    let (answered_ids, findings_cleared) = stamp_and_clear(tx, target, observations, times).await?;
    close_unproven(tx, target, observations).await?;
    let touched = open_findings(
        tx,
        (job, target.key),
        unverifiable_cycles,
        observations,
        &answered_ids,
    )
    .await?;
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
    times: &PaymentTimes,
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
/// `unverifiable_cycles` cycles (counted once per cycle). Returns every
/// finding touched (new or already open).
async fn open_findings(
    tx: &mut sqlx::PgConnection,
    (job, key): (&str, &KeyType),
    unverifiable_cycles: u32,
    observations: &[Observation],
    answered_ids: &[PaymentKey],
) -> Result<Vec<CreatedFinding>, Failed> {
    let (failed_ids, errors): (Vec<PaymentKey>, Vec<Option<String>>) = observations
        .iter()
        .filter(|o| o.unverifiable_read())
        .map(|o| (o.payment_id.clone(), o.error.clone()))
        .unzip();
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
        .filter_map(|(f, command, o)| {
            // A PaymentIntent row's command carries its id; a session row's
            // its session, and the session's PaymentIntent when it has one
            // (the writer fills it in; an expired session may have none).
            let checkout_session_id = o.checkout_session.clone();
            if checkout_session_id.is_none() && o.payment_intent.is_none() {
                return None;
            }
            Some(RepairRow {
                payment_id: f.payment_id.clone(),
                finding_id: f.id,
                command: command.as_str(),
                expected_local_status: o.local.as_str().to_owned(),
                stripe_payment_intent_id: o.payment_intent.clone(),
                stripe_account_id: o.stripe_account.clone(),
                checkout_session_id,
            })
        })
        .collect();
    outbox::enqueue_repairs(tx, target.outbox, target.key, &repairs)
        .await
        .map_err(at(Write::Outbox))
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

/// The error of a batch whose every row was refused (see
/// [`record_observations`]): the first refusal's driver error.
fn whole_batch_refused(refused: Vec<Refusal>, observations: &[Observation]) -> RunError {
    let rows = refused.len();
    let mut refused = refused.into_iter();
    let first = refused.next();
    tracing::error!(
        rows,
        first_payment_id = first
            .as_ref()
            .map(|r| observations[r.index].payment_id.to_string()),
        "the database refused the write of every row of the batch: not a row's problem"
    );
    match first {
        Some(first) => RunError::Store(StoreError {
            action: "writing a batch the database refused for every row",
            source: first.error.source,
        }),
        None => RunError::Store(StoreError {
            action: "writing a batch the database refused for every row",
            source: sqlx::Error::Protocol("no refusal recorded".into()),
        }),
    }
}

/// Turns each refused row into NEEDS_REVIEW `write_refused` (not stamped,
/// nothing else written for it) and records the findings, after the rows
/// that were written: the findings are our table's rows, so an
/// application's trigger on `payments` cannot refuse them. Returns how many
/// were new.
///
/// A finding references its payment, so PostgreSQL checks the reference
/// with a `FOR KEY SHARE` row lock: while someone holds the row `FOR
/// UPDATE`, even the finding must wait. It is recorded under a savepoint,
/// and when that is refused for a row-level reason too the row is only
/// logged and counted: the next cycle tries it again.
async fn record_refusals(
    tx: &mut sqlx::PgConnection,
    key: &KeyType,
    refused: &[Refusal],
    observations: &mut [Observation],
) -> Result<u64, RunError> {
    let mut wanted = Vec::with_capacity(refused.len());
    for r in refused {
        let o = &mut observations[r.index];
        tracing::warn!(
            payment_id = %o.payment_id,
            write = r.write.as_str(),
            sqlstate = %r.sqlstate,
            message = %r.message,
            "the database refused this row's write; recorded as write_refused, batch committed without it"
        );
        let details = serde_json::json!({
            "sqlstate": r.sqlstate,
            "message": r.message,
            "write": r.write.as_str(),
            "observed_external_status": o.observed.as_ref().map(|s| s.as_str().to_owned()),
        });
        o.decision = Decision::review_with(FindingKind::WriteRefused, details);
        o.observed = None;
        wanted.extend(new_finding(o));
    }
    let mut created = 0;
    for finding in &wanted {
        let mut savepoint = tx.begin().await.context("opening a savepoint")?;
        match findings::upsert_open(&mut savepoint, key, std::slice::from_ref(finding)).await {
            Ok(touched) => {
                savepoint.commit().await.context("releasing a savepoint")?;
                created += touched.iter().filter(|f| f.created).count() as u64;
            }
            Err(e) if FailureClass::of_store(&e) != FailureClass::WholeDatabase => {
                savepoint
                    .rollback()
                    .await
                    .context("rolling back to a savepoint")?;
                tracing::warn!(
                    payment_id = %finding.payment_id,
                    error = %e.source,
                    "could not record write_refused for this row either (its row is locked against references); the next cycle tries again"
                );
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(created)
}
