//! One batch, in the design note's three phases: (1) a short transaction reads
//! the cursor and the rows; (2) Stripe is asked with no transaction open;
//! (3) one transaction records everything and moves the cursor by
//! compare-and-set, or rolls back on a lost race.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::detect::{observe_batch, Observation, Observed, Pacing};
use super::report::BatchReport;
use super::ScanError;
use crate::config::{JobSettings, OutboxSettings};
use crate::reconcile::{classify_status, FindingKind, RepairCommand, Verdict};
use crate::store::findings::{self, CreatedFinding, NewFinding};
use crate::store::outbox::{self, RepairRow};
use crate::store::payments::{self, MoneyColumns, PaymentRow};
use crate::store::unverifiable;
use crate::store::{cursor, Context};
use crate::stripe::{GatewayError, RetryPolicy, StripeGateway};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// A batch aborts instead of skipping rows as UNVERIFIABLE when more than half
/// of at least this many Stripe reads failed: Stripe is down, and the next run
/// should retry these rows rather than leave them unchecked for a whole cycle.
pub const STRIPE_DOWN_MIN_READS: usize = 5;

/// This run's hold on the cursor (`reconciliation_cursor.lease_owner`),
/// renewed in every batch's write transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    /// `host:pid:random`, unique per run.
    pub owner: String,
    /// How long the lease lives without renewal, in seconds: the slowest batch
    /// the settings allow (every read timing out on every attempt, or all of
    /// them at the rate limit), at least 5 minutes. Renewed in every phase 1
    /// and phase 3. A crashed run's lease is free again after this.
    pub ttl_seconds: f64,
}

impl Lease {
    /// A fresh lease identity for this process.
    pub fn new(settings: &JobSettings) -> Self {
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown-host".into());
        // The slowest batch the settings allow: every read at the rate limit,
        // or every read timing out on all its attempts, in_flight at a time.
        let reads = f64::from(settings.batch_size);
        let at_rate = reads / f64::from(settings.rate_limit_rps.max(1));
        let attempts = f64::from(RetryPolicy::default().max_attempts);
        let all_timing_out = (reads / f64::from(settings.max_in_flight.max(1))).ceil()
            * (attempts * settings.http_timeout.as_secs_f64() + 6.0);
        let batch_seconds = at_rate.max(all_timing_out) + 10.0;
        Lease {
            owner: format!("{host}:{}:{:08x}", std::process::id(), fastrand::u32(..)),
            ttl_seconds: batch_seconds.max(300.0),
        }
    }
}

/// Where the batch starts and whether it may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Read the persistent cursor, write findings, commands and the cursor.
    Write,
    /// Start after this id, write nothing (`run --dry-run`).
    DryRun {
        /// In-memory cursor.
        after_id: i64,
    },
}

/// Runs one batch.
///
/// # Errors
/// - [`ScanError::ConcurrentRun`]: the cursor moved under us; nothing written.
/// - [`ScanError::StripeRejected`]: 401/403 or a wrong base URL; nothing written.
/// - [`ScanError::StripeWrongAccount`]: every read 404s; nothing written.
/// - [`ScanError::StripeDown`]: most reads failed; nothing written.
/// - [`ScanError::Store`]: a database failure; the transaction rolled back.
pub async fn run_batch(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    mode: Mode,
    lease: Option<&Lease>,
) -> Result<BatchReport, ScanError> {
    run_batch_until(
        pool,
        gateway,
        settings,
        mode,
        lease,
        &CancellationToken::new(),
    )
    .await
}

/// [`run_batch`], abandoned without a write when `shutdown` fires during
/// phases 1 and 2. Phase 3 is never interrupted: once it starts, the batch
/// commits or rolls back as a whole, and the caller learns which.
///
/// # Errors
/// As [`run_batch`], and [`ScanError::Interrupted`].
#[tracing::instrument(name = "batch", skip_all, fields(job = %settings.job))]
pub async fn run_batch_until(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    mode: Mode,
    lease: Option<&Lease>,
    shutdown: &CancellationToken,
) -> Result<BatchReport, ScanError> {
    let in_flight = Semaphore::new((settings.max_in_flight as usize).max(1));
    let prepared = prepare(pool, settings, mode, lease, &Start::Cursor).await?;
    let pacing = Pacing {
        in_flight: &in_flight,
        all_started: None,
    };
    let read = read_stripe(pool, gateway, settings, prepared, shutdown, pacing).await?;
    commit(pool, settings, mode, lease, read).await
}

/// Where phase 1 of a batch starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Start {
    /// At the persistent cursor (a dry run: at its in-memory position).
    Cursor,
    /// Right after the previous batch of this run, whose commit may still be
    /// under way: after `id` (its last id, which its compare-and-set will
    /// store), leaving its rows `pending` out of the rows behind the cursor.
    After {
        /// The previous batch's last id.
        id: i64,
        /// The previous batch's row ids.
        pending: Vec<i64>,
    },
}

/// Phase 1's outcome: the batch's rows.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The cursor the batch starts from (its compare-and-set expects it).
    pub cursor_from: i64,
    /// Rows behind the cursor first, then the cursor's rows, in id order.
    pub rows: Vec<PaymentRow>,
    /// The last id of the cursor's rows; `None` at the end of the table.
    pub last_id: Option<i64>,
}

/// Phase 2's outcome: the batch ready to commit.
#[derive(Debug)]
pub(crate) struct ReadBatch {
    cursor_from: i64,
    last_id: Option<i64>,
    observations: Vec<Observation>,
}

/// Phase 1 of a batch starting at `start`.
///
/// # Errors
/// As [`run_batch`].
pub(crate) async fn prepare(
    pool: &PgPool,
    settings: &JobSettings,
    mode: Mode,
    lease: Option<&Lease>,
    start: &Start,
) -> Result<Prepared, ScanError> {
    let (cursor_from, rows, last_id) = read_phase(pool, settings, mode, lease, start).await?;
    Ok(Prepared {
        cursor_from,
        rows,
        last_id,
    })
}

/// Phase 2 of a prepared batch, with the outage rule; abandoned when
/// `shutdown` fires.
///
/// # Errors
/// As [`run_batch_until`] (never `ConcurrentRun` or `Store` from here).
pub(crate) async fn read_stripe(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    prepared: Prepared,
    shutdown: &CancellationToken,
    pacing: Pacing<'_>,
) -> Result<ReadBatch, ScanError> {
    let Prepared {
        cursor_from,
        rows,
        last_id,
    } = prepared;
    if last_id.is_none() {
        return Ok(ReadBatch {
            cursor_from,
            last_id,
            observations: Vec::new(),
        });
    }
    // 2. Stripe, with no transaction open.
    let observed = tokio::select! {
        biased;
        () = shutdown.cancelled() => return Err(ScanError::Interrupted),
        observed = observe_batch(pool, gateway, rows, cursor_from, settings, Utc::now(), pacing) => observed?,
    };
    if shutdown.is_cancelled() {
        return Err(ScanError::Interrupted);
    }
    check_stripe_reachable(gateway, &observed).await?;
    Ok(ReadBatch {
        cursor_from,
        last_id,
        observations: observed.observations,
    })
}

/// Phase 3 of a read batch (or the wrap at the end of the table). Never
/// interrupted: it commits or rolls back as a whole.
///
/// # Errors
/// As [`run_batch`].
pub(crate) async fn commit(
    pool: &PgPool,
    settings: &JobSettings,
    mode: Mode,
    lease: Option<&Lease>,
    read: ReadBatch,
) -> Result<BatchReport, ScanError> {
    let ReadBatch {
        cursor_from: cursor_id,
        last_id,
        mut observations,
    } = read;
    let mut report = BatchReport {
        cursor_from: cursor_id,
        ..BatchReport::default()
    };
    let Some(last_id) = last_id else {
        return wrap(pool, settings, mode, lease, report).await;
    };
    report.scanned = observations.len() as u64;
    report.cursor_to = last_id;

    // 3. Record and advance, in one transaction.
    match mode {
        Mode::DryRun { .. } => dry_run_counts(pool, &observations, &mut report).await?,
        Mode::Write => {
            let job = &settings.job;
            write_phase(
                pool,
                &settings.outbox,
                job,
                settings.unverifiable_cycles,
                lease,
                (cursor_id, last_id),
                &mut observations,
                &mut report,
            )
            .await?;
        }
    }
    for o in &observations {
        report.verdicts.add(o.decision.verdict);
    }
    Ok(report)
}

/// The finding an observation records, if any. Its acknowledgement (a manual
/// resolution of the same drift keeps it closed) holds only where the status
/// table alone sees no drift: a `pending` payment whose PaymentIntent
/// succeeded stays in the review queue until its status is dealt with.
fn new_finding(o: &Observation) -> Option<NewFinding> {
    let kind = o.decision.kind.as_ref()?;
    let acknowledgeable = o
        .observed
        .as_ref()
        .is_some_and(|external| classify_status(&o.local, external).kind.is_none());
    Some(NewFinding {
        payment_id: o.payment_id,
        kind: kind.as_str().into_owned(),
        local_status: o.local.as_str().to_owned(),
        external_status: o.observed.as_ref().map(|s| s.as_str().to_owned()),
        details: o.decision.details.clone(),
        acknowledgeable,
    })
}

/// What a real run would create: only findings not already open (the same
/// dedup rule), and a command only with such a new finding.
async fn dry_run_counts(
    pool: &PgPool,
    observations: &[Observation],
    report: &mut BatchReport,
) -> Result<(), ScanError> {
    let wanted: Vec<NewFinding> = observations.iter().filter_map(new_finding).collect();
    let mut conn = pool.acquire().await.context("connecting")?;
    let new: HashSet<(i64, String)> = findings::not_yet_open(&mut conn, &wanted)
        .await?
        .into_iter()
        .collect();
    report.findings_created = new.len() as u64;
    report.commands_enqueued = observations
        .iter()
        .filter(|o| o.decision.command.is_some())
        .filter(|o| {
            o.decision
                .kind
                .as_ref()
                .is_some_and(|k| new.contains(&(o.payment_id, k.as_str().into_owned())))
        })
        .count() as u64;
    Ok(())
}

/// Rows behind the cursor never confirmed with Stripe, read per batch beside
/// the cursor's rows: a tenth of the batch, at least one.
pub fn behind_cursor_limit(batch_size: u32) -> u32 {
    (batch_size / 10).max(1)
}

/// Phase 1: the cursor, the next rows after it and a few rows behind it never
/// confirmed (late commits). Returns the cursor, the rows (behind-cursor rows
/// first, all in id order) and the last id of the cursor's rows (`None` at
/// the end of the table).
async fn read_phase(
    pool: &PgPool,
    settings: &JobSettings,
    mode: Mode,
    lease: Option<&Lease>,
    start: &Start,
) -> Result<(i64, Vec<PaymentRow>, Option<i64>), ScanError> {
    let mut tx = crate::store::begin(pool)
        .await
        .context("opening the read transaction")?;
    let (cursor_id, pending): (i64, &[i64]) = match (mode, start) {
        (Mode::Write, Start::After { id, pending }) => {
            hold_lease(&mut tx, &settings.job, lease).await?;
            (*id, pending)
        }
        (Mode::DryRun { .. }, Start::After { id, pending }) => (*id, pending),
        (Mode::Write, Start::Cursor) => {
            cursor::ensure(&mut tx, &settings.job).await?;
            // A run whose lease expired learns it here, before spending reads.
            hold_lease(&mut tx, &settings.job, lease).await?;
            let id = cursor::read(&mut tx, &settings.job)
                .await?
                .map_or(0, |c| c.last_id);
            (id, &[])
        }
        (Mode::DryRun { after_id }, Start::Cursor) => (after_id, &[]),
    };
    let columns = MoneyColumns {
        amount: settings.amount_column.as_ref(),
        currency: settings.currency_column.as_ref(),
    };
    let ahead = payments::read_batch(
        &mut tx,
        cursor_id,
        settings.batch_size,
        settings.grace,
        columns,
    )
    .await?;
    let last_id = ahead.last().map(|r| r.id);
    let mut rows = Vec::with_capacity(ahead.len());
    if last_id.is_some() && cursor_id > 0 && mode == Mode::Write {
        rows = payments::read_behind_cursor(
            &mut tx,
            &settings.job,
            cursor_id,
            behind_cursor_limit(settings.batch_size),
            settings.grace,
            columns,
            pending,
        )
        .await?;
        if !rows.is_empty() {
            tracing::info!(
                rows = rows.len(),
                first = rows[0].id,
                "rows behind the cursor never confirmed with Stripe (committed late or in the grace window when passed); checked in this batch"
            );
        }
    }
    rows.extend(ahead);
    tx.commit().await.context("closing the read transaction")?;
    Ok((cursor_id, rows, last_id))
}

/// Renews this run's lease in `tx`; [`ScanError::ConcurrentRun`] when another
/// run has taken it.
async fn hold_lease(
    tx: &mut sqlx::PgConnection,
    job: &str,
    lease: Option<&Lease>,
) -> Result<(), ScanError> {
    match lease {
        Some(lease) if !cursor::renew_lease(tx, job, &lease.owner, lease.ttl_seconds).await? => {
            Err(ScanError::ConcurrentRun {
                job: job.to_owned(),
            })
        }
        _ => Ok(()),
    }
}

async fn wrap(
    pool: &PgPool,
    settings: &JobSettings,
    mode: Mode,
    lease: Option<&Lease>,
    mut report: BatchReport,
) -> Result<BatchReport, ScanError> {
    report.wrapped = true;
    report.cursor_to = 0;
    if mode == Mode::Write {
        let mut tx = crate::store::begin(pool)
            .await
            .context("opening the wrap transaction")?;
        hold_lease(&mut tx, &settings.job, lease).await?;
        if !cursor::wrap(&mut tx, &settings.job, report.cursor_from).await? {
            tx.rollback().await.context("rolling back the lost wrap")?;
            return Err(ScanError::ConcurrentRun {
                job: settings.job.clone(),
            });
        }
        tx.commit().await.context("committing the wrap")?;
    }
    Ok(report)
}

fn definitive_without_status(o: &Observation) -> bool {
    matches!(
        o.decision.kind,
        Some(FindingKind::MissingExternally | FindingKind::InvalidPaymentIntentId)
    )
}

/// When more than half of at least [`STRIPE_DOWN_MIN_READS`] reads failed,
/// asks Stripe whether it answers at all ([`StripeGateway::probe`]) before
/// abandoning the batch: if it does, the failures belong to those rows (one
/// PaymentIntent that always answers 500, a body Stripe cannot give whole):
/// they stay UNVERIFIABLE and the cursor moves on, so a few bad rows at the
/// head of a small batch can never stall the scan.
async fn check_stripe_reachable(
    gateway: &StripeGateway,
    observed: &Observed,
) -> Result<(), ScanError> {
    let observations = &observed.observations;
    // A list page that failed after retries is a failed read too.
    let asked = observations.iter().filter(|o| o.asked_stripe).count() + observed.failed_pages;
    let failed = observations
        .iter()
        .filter(|o| o.decision.verdict == Verdict::Unverifiable)
        .count()
        + observed.failed_pages;
    stripe_reachable(gateway, asked, failed).await
}

/// The outage rule of a batch, for any set of reads: `failed` of `asked`
/// reads ended UNVERIFIABLE. Ok when few failed, or when Stripe answers a
/// probe (the failures belong to those reads).
///
/// # Errors
/// [`ScanError::StripeDown`] when Stripe does not answer the probe either;
/// [`ScanError::StripeRejected`] when the probe is refused.
pub async fn stripe_reachable(
    gateway: &StripeGateway,
    asked: usize,
    failed: usize,
) -> Result<(), ScanError> {
    if asked < STRIPE_DOWN_MIN_READS || failed * 2 <= asked {
        return Ok(());
    }
    match gateway.probe().await {
        Ok(()) => {
            tracing::warn!(
                failed,
                asked,
                "most reads of the batch failed but Stripe answers: those rows are UNVERIFIABLE and the cursor moves on"
            );
            Ok(())
        }
        Err(
            e @ (GatewayError::Rejected { .. }
            | GatewayError::Misconfigured { .. }
            | GatewayError::Redirected { .. }),
        ) => Err(ScanError::StripeRejected(e)),
        Err(e) => {
            tracing::error!(error = %e, "Stripe does not answer a probe either");
            Err(ScanError::StripeDown { failed, asked })
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn write_phase(
    pool: &PgPool,
    outbox: &OutboxSettings,
    job: &str,
    unverifiable_cycles: u32,
    lease: Option<&Lease>,
    (cursor_id, last_id): (i64, i64),
    observations: &mut [Observation],
    report: &mut BatchReport,
) -> Result<(), ScanError> {
    let mut tx = crate::store::begin(pool)
        .await
        .context("opening the write transaction")?;
    record_observations(
        &mut tx,
        outbox,
        job,
        unverifiable_cycles,
        observations,
        report,
    )
    .await?;
    if let Err(lost) = hold_lease(&mut tx, job, lease).await {
        tx.rollback().await.context("rolling back the lost batch")?;
        return Err(lost);
    }
    if !cursor::advance(&mut tx, job, cursor_id, last_id).await? {
        // Roll back everything above now, not lazily when the connection is reused.
        tx.rollback().await.context("rolling back the lost batch")?;
        return Err(ScanError::ConcurrentRun {
            job: job.to_owned(),
        });
    }
    tx.commit().await.context("committing the batch")?;
    Ok(())
}

/// Records what phase 2 observed, inside the caller's transaction `tx`,
/// exactly as a scan batch does (the events job calls it too): locks the
/// payments (demoting rows that changed meanwhile), stamps
/// `observed_external_status`/`last_reconciled_at` for rows Stripe answered,
/// resolves stale findings with their commands, counts UNVERIFIABLE rows
/// against `job`'s cycle, upserts findings once per open (payment, kind),
/// and enqueues one command per open repairable finding without a live one
/// and not blocked. Fills `report`'s findings and commands counts.
///
/// # Errors
/// [`ScanError::Store`]; the caller rolls back.
pub async fn record_observations(
    tx: &mut sqlx::PgConnection,
    outbox: &OutboxSettings,
    job: &str,
    unverifiable_cycles: u32,
    observations: &mut [Observation],
    report: &mut BatchReport,
) -> Result<(), ScanError> {
    // Payments first (in id order), then findings, then the outbox: the one
    // lock order of every writer, so the scan and repair workers never deadlock.
    demote_changed_rows(tx, observations).await?;
    // Answered: rows Stripe answered definitively. A 404 or a malformed id is
    // an answer too (its finding carries the problem), so those rows do not
    // hold the reconciliation lag forever; UNVERIFIABLE rows never are.
    let answered: Vec<&Observation> = observations
        .iter()
        .filter(|o| o.observed.is_some() || definitive_without_status(o))
        .collect();
    let answered_ids: Vec<i64> = answered.iter().map(|o| o.payment_id).collect();
    let statuses: Vec<Option<String>> = answered
        .iter()
        .map(|o| o.observed.as_ref().map(|s| s.as_str().to_owned()))
        .collect();
    let current_kinds: Vec<Option<String>> = answered
        .iter()
        .map(|o| o.decision.kind.as_ref().map(|k| k.as_str().into_owned()))
        .collect();
    payments::mark_reconciled(tx, &answered_ids, &statuses).await?;
    // A finding the scan no longer sees is resolved, with its commands.
    let with_status: Vec<bool> = answered.iter().map(|o| o.observed.is_some()).collect();
    let stale = findings::resolve_stale(tx, &answered_ids, &current_kinds, &with_status).await?;
    report.findings_cleared = stale.len() as u64;
    outbox::close_for_findings(
        tx,
        outbox,
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
        outbox,
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
    report.findings_created = touched.iter().filter(|f| f.created).count() as u64;

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
    let without: HashSet<i64> = outbox::findings_without_command(
        tx,
        outbox,
        &RepairCommand::EVENT_TYPES,
        &candidate_findings,
    )
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
    report.commands_enqueued = outbox::enqueue_repairs(tx, outbox, &repairs).await?;
    Ok(())
}
/// Phase 3 writes something for this row: a stamp, a finding, or an
/// UNVERIFIABLE count (which may become a `persistently_unverifiable` finding).
fn writes_for(o: &Observation) -> bool {
    o.observed.is_some()
        || o.decision.kind.is_some()
        || (o.asked_stripe && o.decision.verdict == Verdict::Unverifiable)
}

/// Locks the rows phase 3 writes for (in id order) and demotes to IN_FLIGHT
/// those that changed since phase 1: a webhook that moved a payment while
/// Stripe was being asked must not produce a finding about the old status.
async fn demote_changed_rows(
    tx: &mut sqlx::PgConnection,
    observations: &mut [Observation],
) -> Result<(), ScanError> {
    let touched: Vec<&Observation> = observations.iter().filter(|o| writes_for(o)).collect();
    let ids: Vec<i64> = touched.iter().map(|o| o.payment_id).collect();
    let versions: Vec<i64> = touched.iter().map(|o| o.version).collect();
    let updated: Vec<DateTime<Utc>> = touched.iter().map(|o| o.updated_at).collect();
    let unchanged: HashSet<i64> = payments::lock_unchanged(tx, &ids, &versions, &updated)
        .await?
        .into_iter()
        .collect();
    for o in observations.iter_mut() {
        if writes_for(o) && !unchanged.contains(&o.payment_id) {
            tracing::info!(
                payment_id = o.payment_id,
                "payment changed while Stripe was asked; left for the next cycle"
            );
            o.changed_meanwhile();
        }
    }
    Ok(())
}
