//! One batch, in the design note's three phases: (1) a short transaction reads
//! the cursor and the rows; (2) Stripe is asked with no transaction open;
//! (3) one transaction records everything and moves the cursor by
//! compare-and-set, or rolls back on a lost race.

use sqlx::PgPool;

use super::detect::{observe_all, Observation};
use super::report::BatchReport;
use super::ScanError;
use crate::config::JobSettings;
use crate::reconcile::Verdict;
use crate::store::findings::{self, NewFinding};
use crate::store::outbox::{self, RepairRow};
use crate::store::payments::{self, PaymentRow};
use crate::store::{cursor, Context};
use crate::stripe::StripeGateway;

/// A batch aborts instead of skipping rows as UNVERIFIABLE when more than half
/// of at least this many Stripe reads failed: Stripe is down, and the next run
/// should retry these rows rather than leave them unchecked for a whole cycle.
pub const STRIPE_DOWN_MIN_READS: usize = 5;

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
/// - [`ScanError::StripeRejected`]: 401/403; nothing written.
/// - [`ScanError::StripeDown`]: most reads failed; nothing written.
/// - [`ScanError::Store`]: a database failure; the transaction rolled back.
#[tracing::instrument(name = "batch", skip_all, fields(job = %settings.job))]
pub async fn run_batch(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    mode: Mode,
) -> Result<BatchReport, ScanError> {
    // 1. Cursor and rows, in a short transaction.
    let (cursor_id, rows) = read_phase(pool, settings, mode).await?;
    let mut report = BatchReport {
        cursor_from: cursor_id,
        ..BatchReport::default()
    };
    if rows.is_empty() {
        return wrap(pool, settings, mode, report).await;
    }
    let last_id = rows.last().map_or(cursor_id, |r| r.id);

    // 2. Stripe, with no transaction open.
    let observations = observe_all(gateway, rows, settings.max_in_flight as usize).await?;
    check_stripe_reachable(&observations)?;
    report.scanned = observations.len() as u64;
    report.cursor_to = last_id;
    for o in &observations {
        report.verdicts.add(o.decision.verdict);
    }

    // 3. Record and advance, in one transaction.
    if matches!(mode, Mode::DryRun { .. }) {
        report.findings_created = observations
            .iter()
            .filter(|o| o.decision.kind.is_some())
            .count() as u64;
        report.commands_enqueued = observations
            .iter()
            .filter(|o| o.decision.command.is_some())
            .count() as u64;
        return Ok(report);
    }
    write_phase(
        pool,
        &settings.job,
        cursor_id,
        last_id,
        &observations,
        &mut report,
    )
    .await?;
    Ok(report)
}

async fn read_phase(
    pool: &PgPool,
    settings: &JobSettings,
    mode: Mode,
) -> Result<(i64, Vec<PaymentRow>), ScanError> {
    let mut tx = pool.begin().await.context("opening the read transaction")?;
    let cursor_id = match mode {
        Mode::Write => {
            cursor::ensure(&mut tx, &settings.job).await?;
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

async fn wrap(
    pool: &PgPool,
    settings: &JobSettings,
    mode: Mode,
    mut report: BatchReport,
) -> Result<BatchReport, ScanError> {
    report.wrapped = true;
    report.cursor_to = 0;
    if mode == Mode::Write {
        let mut tx = pool.begin().await.context("opening the wrap transaction")?;
        if !cursor::wrap(&mut tx, &settings.job, report.cursor_from).await? {
            return Err(ScanError::ConcurrentRun {
                job: settings.job.clone(),
            });
        }
        tx.commit().await.context("committing the wrap")?;
    }
    Ok(report)
}

fn check_stripe_reachable(observations: &[Observation]) -> Result<(), ScanError> {
    let asked = observations.iter().filter(|o| o.asked_stripe).count();
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
    cursor_id: i64,
    last_id: i64,
    observations: &[Observation],
    report: &mut BatchReport,
) -> Result<(), ScanError> {
    let (verified_ids, verified_statuses): (Vec<i64>, Vec<String>) = observations
        .iter()
        .filter_map(|o| {
            o.observed
                .as_ref()
                .map(|s| (o.payment_id, s.as_str().to_owned()))
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

    let mut tx = pool
        .begin()
        .await
        .context("opening the write transaction")?;
    payments::mark_reconciled(&mut tx, &verified_ids, &verified_statuses).await?;
    report.findings_cleared = findings::clear_in_sync(&mut tx, &in_sync).await?;
    let created = findings::insert_open(&mut tx, &new_findings).await?;
    report.findings_created = created.len() as u64;
    // A command only for a finding created now: an open finding already has one.
    let repairs: Vec<RepairRow> = created
        .iter()
        .filter_map(|f| {
            let o = observations.iter().find(|o| o.payment_id == f.payment_id)?;
            Some(RepairRow {
                payment_id: f.payment_id,
                finding_id: f.id,
                command: o.decision.command?.as_str(),
                expected_local_status: o.local.as_str().to_owned(),
            })
        })
        .collect();
    report.commands_enqueued = outbox::enqueue_repairs(&mut tx, &repairs).await?;
    if !cursor::advance(&mut tx, job, cursor_id, last_id).await? {
        // Dropping `tx` rolls back everything above.
        return Err(ScanError::ConcurrentRun {
            job: job.to_owned(),
        });
    }
    tx.commit().await.context("committing the batch")?;
    Ok(())
}
