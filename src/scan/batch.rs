//! One batch, in the design note's three phases: (1) a short transaction reads
//! the cursor and the rows; (2) Stripe is asked with no transaction open;
//! (3) one transaction records everything and moves the cursor by
//! compare-and-set, or rolls back on a lost race.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::detect::{observe_all, Observation};
use super::report::BatchReport;
use super::ScanError;
use crate::config::JobSettings;
use crate::reconcile::{FindingKind, Verdict};
use crate::store::findings::{self, NewFinding};
use crate::store::outbox::{self, RepairRow};
use crate::store::payments::{self, PaymentRow};
use crate::store::{cursor, Context};
use crate::stripe::{RetryPolicy, StripeGateway};
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
    // 1. Cursor and rows, in a short transaction.
    let (cursor_id, rows) = read_phase(pool, settings, mode, lease).await?;
    let mut report = BatchReport {
        cursor_from: cursor_id,
        ..BatchReport::default()
    };
    if rows.is_empty() {
        return wrap(pool, settings, mode, lease, report).await;
    }
    let last_id = rows.last().map_or(cursor_id, |r| r.id);

    // 2. Stripe, with no transaction open.
    let mut observations = tokio::select! {
        biased;
        () = shutdown.cancelled() => return Err(ScanError::Interrupted),
        observed = observe_all(pool, gateway, rows, settings.max_in_flight as usize) => observed?,
    };
    if shutdown.is_cancelled() {
        return Err(ScanError::Interrupted);
    }
    check_stripe_reachable(&observations)?;
    report.scanned = observations.len() as u64;
    report.cursor_to = last_id;

    // 3. Record and advance, in one transaction.
    match mode {
        Mode::DryRun { .. } => {
            report.findings_created = count(&observations, |o| o.decision.kind.is_some());
            report.commands_enqueued = count(&observations, |o| o.decision.command.is_some());
        }
        Mode::Write => {
            let job = &settings.job;
            write_phase(
                pool,
                job,
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

fn count(observations: &[Observation], pred: impl Fn(&Observation) -> bool) -> u64 {
    observations.iter().filter(|o| pred(o)).count() as u64
}

async fn read_phase(
    pool: &PgPool,
    settings: &JobSettings,
    mode: Mode,
    lease: Option<&Lease>,
) -> Result<(i64, Vec<PaymentRow>), ScanError> {
    let mut tx = crate::store::begin(pool)
        .await
        .context("opening the read transaction")?;
    let cursor_id = match mode {
        Mode::Write => {
            cursor::ensure(&mut tx, &settings.job).await?;
            // A run whose lease expired learns it here, before spending reads.
            hold_lease(&mut tx, &settings.job, lease).await?;
            cursor::read(&mut tx, &settings.job)
                .await?
                .map_or(0, |c| c.last_id)
        }
        Mode::DryRun { after_id } => after_id,
    };
    let rows =
        payments::read_batch(&mut tx, cursor_id, settings.batch_size, settings.grace).await?;
    tx.commit().await.context("closing the read transaction")?;
    Ok((cursor_id, rows))
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

fn check_stripe_reachable(observations: &[Observation]) -> Result<(), ScanError> {
    let asked = observations.iter().filter(|o| o.asked_stripe).count();
    // Any failure counts, an outage or answers that are not Stripe's (a proxy's
    // HTML, a wrong base URL): one bad answer is UNVERIFIABLE, most of a batch
    // is a fault to fix, not rows to skip.
    let failed = observations
        .iter()
        .filter(|o| o.decision.verdict == Verdict::Unverifiable)
        .count();
    if asked >= STRIPE_DOWN_MIN_READS && failed * 2 > asked {
        return Err(ScanError::StripeDown { failed, asked });
    }
    Ok(())
}

async fn write_phase(
    pool: &PgPool,
    job: &str,
    lease: Option<&Lease>,
    (cursor_id, last_id): (i64, i64),
    observations: &mut [Observation],
    report: &mut BatchReport,
) -> Result<(), ScanError> {
    let mut tx = crate::store::begin(pool)
        .await
        .context("opening the write transaction")?;
    demote_changed_rows(&mut tx, observations).await?;
    // Stamped: rows Stripe answered definitively. A 404 or a malformed id is
    // an answer too (its finding carries the problem), so those rows do not
    // hold the reconciliation lag forever; UNVERIFIABLE rows never are.
    let (verified_ids, verified_statuses): (Vec<i64>, Vec<Option<String>>) = observations
        .iter()
        .filter(|o| o.observed.is_some() || definitive_without_status(o))
        .map(|o| {
            (
                o.payment_id,
                o.observed.as_ref().map(|s| s.as_str().to_owned()),
            )
        })
        .unzip();
    let in_sync: Vec<i64> = observations
        .iter()
        .filter(|o| o.decision.verdict == Verdict::InSync && o.observed.is_some())
        .map(|o| o.payment_id)
        .collect();
    let new_findings: Vec<NewFinding> = observations
        .iter()
        .filter_map(|o| {
            o.decision.kind.as_ref().map(|kind| NewFinding {
                payment_id: o.payment_id,
                kind: kind.as_str().into_owned(),
                local_status: o.local.as_str().to_owned(),
                external_status: o.observed.as_ref().map(|s| s.as_str().to_owned()),
            })
        })
        .collect();

    payments::mark_reconciled(&mut tx, &verified_ids, &verified_statuses).await?;
    report.findings_cleared = findings::clear_in_sync(&mut tx, &in_sync).await?;
    let created = findings::insert_open(&mut tx, &new_findings).await?;
    report.findings_created = created.len() as u64;
    // A command only for a finding created now: an open finding already has one.
    let by_payment: HashMap<i64, &Observation> =
        observations.iter().map(|o| (o.payment_id, o)).collect();
    let repairs: Vec<RepairRow> = created
        .iter()
        .filter_map(|f| {
            let o = by_payment.get(&f.payment_id)?;
            Some(RepairRow {
                payment_id: f.payment_id,
                finding_id: f.id,
                command: o.decision.command?.as_str(),
                expected_local_status: o.local.as_str().to_owned(),
            })
        })
        .collect();
    report.commands_enqueued = outbox::enqueue_repairs(&mut tx, &repairs).await?;
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

/// Locks the rows phase 3 writes for (in id order) and demotes to IN_FLIGHT
/// those that changed since phase 1: a webhook that moved a payment while
/// Stripe was being asked must not produce a finding about the old status.
async fn demote_changed_rows(
    tx: &mut sqlx::PgConnection,
    observations: &mut [Observation],
) -> Result<(), ScanError> {
    let touched: Vec<&Observation> = observations
        .iter()
        .filter(|o| o.observed.is_some() || o.decision.kind.is_some())
        .collect();
    let ids: Vec<i64> = touched.iter().map(|o| o.payment_id).collect();
    let versions: Vec<i64> = touched.iter().map(|o| o.version).collect();
    let updated: Vec<DateTime<Utc>> = touched.iter().map(|o| o.updated_at).collect();
    let unchanged: HashSet<i64> = payments::lock_unchanged(tx, &ids, &versions, &updated)
        .await?
        .into_iter()
        .collect();
    for o in observations.iter_mut() {
        if (o.observed.is_some() || o.decision.kind.is_some()) && !unchanged.contains(&o.payment_id)
        {
            tracing::info!(
                payment_id = o.payment_id,
                "payment changed while Stripe was asked; left for the next cycle"
            );
            o.changed_meanwhile();
        }
    }
    Ok(())
}
