//! Phase 3 of a batch: one transaction records what phase 2 observed
//! ([`crate::record`]), renews the lease and moves the cursor by
//! compare-and-set, or rolls back on a lost race; a dry run counts instead.

use std::collections::HashSet;

use sqlx::PgPool;

use super::batch::{Mode, ReadBatch};
use super::groups::{ScanContext, ScanGroups};
use super::report::BatchReport;
use crate::key::{KeyType, PaymentKey, Position};
use crate::outcome::RunError;
use crate::read::Observation;
use crate::reconcile::{RepairCommand, PAYMENT_DELETED_NOTE};
use crate::record::{new_finding, record_observations};
use crate::store::findings::{self, NewFinding};
use crate::store::{cursor, outbox, payment_state, retry, Context};

/// Phase 3 of a read batch (or the wrap at the end of the table). Never
/// interrupted: it commits or rolls back as a whole.
///
/// # Errors
/// As [`run_batch`](crate::scan::run_batch).
pub(crate) async fn commit(
    ctx: &ScanContext<'_>,
    mode: &Mode,
    read: ReadBatch,
) -> Result<BatchReport, RunError> {
    let ReadBatch {
        cursor_from: cursor_id,
        last_id,
        reached_end,
        walked,
        mut observations,
    } = read;
    let mut report = BatchReport {
        cursor_from: number(cursor_id.as_ref()),
        ..BatchReport::default()
    };
    let Some(last_id) = last_id else {
        return wrap(ctx, mode, report, cursor_id).await;
    };
    report.scanned = observations.len() as u64;
    report.walked = walked;
    report.cursor_to = number(Some(&last_id));
    report.cursor_key = Some(last_id.key.clone());
    // The table's last rows: this batch ends the cycle, and the next batch
    // (of this run or the next) starts the new one at the table's start.
    if reached_end {
        report.wrapped = true;
        if mode.writes() {
            report.cursor_to = 0;
            report.cursor_key = None;
        }
    }

    // 3. Record and advance, in one transaction.
    match mode {
        Mode::DryRun { .. } => {
            let key = &ctx.settings.facts.key;
            dry_run_counts(ctx.pool, key, &observations, &mut report).await?
        }
        Mode::Write => {
            let range = (cursor_id.as_ref(), &last_id, reached_end, walked);
            observations = write_retrying(ctx, range, observations, &mut report).await?;
        }
    }
    for o in &observations {
        report.verdicts.add(o.decision.verdict);
        report.pending_without_payment_intent += u64::from(o.nothing_to_verify);
    }
    Ok(report)
}

/// What a real run would create: only findings not already open (the same
/// dedup rule), and a command only with such a new finding.
async fn dry_run_counts(
    pool: &PgPool,
    key: &KeyType,
    observations: &[Observation],
    report: &mut BatchReport,
) -> Result<(), RunError> {
    let wanted: Vec<NewFinding> = observations.iter().filter_map(new_finding).collect();
    let mut conn = pool.acquire().await.context("connecting")?;
    let new: HashSet<(PaymentKey, String)> = findings::not_yet_open(&mut conn, key, &wanted)
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
                .is_some_and(|k| new.contains(&(o.payment_id.clone(), k.as_str().into_owned())))
        })
        .count() as u64;
    Ok(())
}

/// The batch at the end of the table: the cursor wraps to the cycle's start
/// (compare-and-set from `from`, the lease renewed); a dry run only counts.
async fn wrap(
    ctx: &ScanContext<'_>,
    mode: &Mode,
    mut report: BatchReport,
    from: Option<Position>,
) -> Result<BatchReport, RunError> {
    let (job, lease) = (ctx.settings.run.job.as_str(), ctx.lease.as_ref());
    report.wrapped = true;
    report.cursor_to = 0;
    if mode.writes() {
        let mut tx = crate::store::begin(ctx.pool)
            .await
            .context("opening the wrap transaction")?;
        crate::lease::renew_held(&mut tx, lease).await?;
        if !cursor::wrap(&mut tx, job, from.as_ref()).await? {
            tx.rollback().await.context("rolling back the lost wrap")?;
            return Err(RunError::ConcurrentRun {
                job: job.to_owned(),
            });
        }
        tx.commit().await.context("committing the wrap")?;
    }
    Ok(report)
}

/// [`write_phase`], run again from its start when another job on the same
/// rows (another partition's, the events job) won a race with it (a
/// deadlock or a serialization failure, [`retry::again`]): from the
/// observations phase 2 made, so Stripe is not asked again. Returns the
/// observations as the committed attempt left them.
async fn write_retrying(
    ctx: &ScanContext<'_>,
    range: (Option<&Position>, &Position, bool, u64),
    observations: Vec<Observation>,
    report: &mut BatchReport,
) -> Result<Vec<Observation>, RunError> {
    let mut attempt = 1;
    loop {
        let mut tried = observations.clone();
        match write_phase(ctx, range, &mut tried, report).await {
            Err(e) if retry::again(&e, attempt, "committing the batch").await => attempt += 1,
            Err(e) => return Err(e),
            Ok(()) => return Ok(tried),
        }
    }
}

/// Phase 3 of a writing batch over `(cursor_id, last_id]` (`walked` of the
/// cursor's rows): records the observations, the reconciler's own state,
/// renews the lease and moves the cursor by compare-and-set, in one
/// transaction.
async fn write_phase(
    ctx: &ScanContext<'_>,
    (cursor_id, last_id, reached_end, walked): (Option<&Position>, &Position, bool, u64),
    observations: &mut [Observation],
    report: &mut BatchReport,
) -> Result<(), RunError> {
    let settings = &ctx.settings;
    let job = settings.run.job.as_str();
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("opening the write transaction")?;
    // At the end of the table the walked range runs to its end.
    let through = (!reached_end).then_some(last_id);
    let read: Vec<PaymentKey> = observations.iter().map(|o| o.payment_id.clone()).collect();
    let forgotten = own_state_before(&mut tx, settings, (cursor_id, through), &read).await?;
    let recorded = record_observations(&mut tx, settings.record_target(), observations).await?;
    let key = &settings.facts.key;
    payment_state::register_new(
        &mut tx,
        key,
        settings.scan.batch_size,
        &settings.facts.times,
    )
    .await?;
    let range = (cursor_id, through);
    let outbox = settings.outbox;
    let deleted = close_deleted(&mut tx, outbox, key, range, observations, forgotten).await?;
    report.findings_payment_deleted = deleted;
    report.findings_created = recorded.findings_created;
    report.findings_cleared = recorded.findings_cleared;
    report.commands_enqueued = recorded.commands_enqueued;
    report.writes_refused = recorded.writes_refused;
    if let Err(lost) = crate::lease::renew_held(&mut tx, ctx.lease.as_ref()).await {
        tx.rollback().await.context("rolling back the lost batch")?;
        return Err(lost);
    }
    let moved = if reached_end {
        cursor::complete_cycle(&mut tx, job, cursor_id).await?
    } else {
        cursor::advance(&mut tx, job, cursor_id, (Some(last_id), walked)).await?
    };
    if !moved {
        // Roll back everything above now, not lazily when the connection is reused.
        tx.rollback().await.context("rolling back the lost batch")?;
        return Err(RunError::ConcurrentRun {
            job: job.to_owned(),
        });
    }
    tx.commit().await.context("committing the batch")?;
    Ok(())
}

/// The reconciler's own state over the walked range `(after, through]`,
/// before the batch's rows are recorded: forgets payments deleted in it
/// (returns their keys; the batch's rows, `read`, existed at its phase 1
/// and are not looked up) and, for a partition's batch, registers the other
/// partitions' rows in it too, or they would be below the highest seen id
/// without a state row, invisible to their job's lag (store::payment_state).
/// The range is registered first, in key order: every state row the
/// transaction writes is then taken in ascending key order, like another
/// partition's job on the same range.
async fn own_state_before(
    tx: &mut sqlx::PgConnection,
    settings: &ScanGroups<'_>,
    (after, through): (Option<&Position>, Option<&Position>),
    read: &[PaymentKey],
) -> Result<Vec<PaymentKey>, RunError> {
    let (key, times) = (&settings.facts.key, &settings.facts.times);
    let forgotten = payment_state::forget_deleted(&mut *tx, key, (after, through), read).await?;
    // A walk of the own copy registered every partition's rows at the run's start.
    if settings.schema.partition.is_some() && !key.own_copy() {
        payment_state::register_range(&mut *tx, key, after, through, times).await?;
    }
    Ok(forgotten)
}

/// A position as the report's number: the key when it is a whole number
/// (integer keys), else 0 (also the cycle's start; `cursor_key` says which).
fn number(position: Option<&Position>) -> i64 {
    position.and_then(|p| p.key.as_i64()).unwrap_or(0)
}

/// Payments the application deleted in the walked range `(after, through]`
/// (or between this batch's read and now; `forgotten`: the keys whose state
/// rows the batch forgot in that range): their open findings close as
/// `payment_deleted`, their commands are skipped with that reason. Returns
/// the findings resolved.
async fn close_deleted(
    tx: &mut sqlx::PgConnection,
    outbox: &crate::config::OutboxSettings,
    key: &KeyType,
    range: (Option<&Position>, Option<&Position>),
    observations: &[Observation],
    forgotten: Vec<PaymentKey>,
) -> Result<u64, RunError> {
    let mut keys = forgotten;
    keys.extend(observations.iter().map(|o| o.payment_id.clone()));
    let deleted = findings::resolve_deleted(&mut *tx, key, range, &keys).await?;
    if !deleted.is_empty() {
        outbox::close_for_findings(
            tx,
            outbox,
            &RepairCommand::EVENT_TYPES,
            &deleted,
            PAYMENT_DELETED_NOTE,
        )
        .await?;
        tracing::info!(
            findings = deleted.len(),
            "open findings of payments the application deleted resolved as payment_deleted; their repair commands skipped"
        );
    }
    Ok(deleted.len() as u64)
}
