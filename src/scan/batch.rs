//! One batch, in the three phases of docs/scan.md: (1) a short transaction reads
//! the cursor and the rows; (2) Stripe is asked with no transaction open;
//! (3) one transaction records everything and moves the cursor by
//! compare-and-set, or rolls back on a lost race. This file holds phases 1
//! and 2; phase 3 is [`super::commit`], the three in a row `one`.

use chrono::Utc;

use super::groups::{ScanContext, ScanGroups};
use crate::key::{PaymentKey, Position, Walk};
use crate::outcome::RunError;
use crate::read::outage::check_stripe_reachable;
use crate::read::{observe_batch, Observation, Pacing};
use crate::store::payments::{self, Behind, MoneyColumns, PaymentRow};
use crate::store::{cursor, Context};

/// Where the batch starts and whether it may write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Read the persistent cursor, write findings, commands and the cursor.
    Write,
    /// Start after this position (`None`: the cycle's start), write nothing
    /// (`run --dry-run`).
    DryRun {
        /// In-memory cursor.
        after: Option<Position>,
    },
}

impl Mode {
    /// Whether the batch writes.
    pub fn writes(&self) -> bool {
        matches!(self, Mode::Write)
    }
}

/// Where phase 1 of a batch starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Start {
    /// At the persistent cursor (a dry run: at its in-memory position).
    Cursor,
    /// Right after the previous batch of this run, whose commit may still be
    /// under way: after `position` (its last row, which its compare-and-set
    /// will store; `None`: it ended the cycle), leaving its rows `pending`
    /// out of the rows behind the cursor.
    After {
        /// The previous batch's last row.
        position: Option<Position>,
        /// The previous batch's row keys.
        pending: Vec<PaymentKey>,
    },
}

/// Phase 1's outcome: the batch's rows.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The cursor the batch starts from (its compare-and-set expects it).
    pub cursor_from: Option<Position>,
    /// Rows behind the cursor first, then the cursor's rows, in walk order.
    pub rows: Vec<PaymentRow>,
    /// The last of the cursor's rows; `None` at the end of the table.
    pub last_id: Option<Position>,
    /// The cursor's rows are the last of the table (fewer than the batch
    /// size were there): the batch ends the cycle (docs/scan.md: a batch
    /// that reads fewer rows than it asked for ends the cycle).
    pub reached_end: bool,
}

/// Phase 2's outcome: the batch ready to commit.
#[derive(Debug)]
pub(crate) struct ReadBatch {
    pub(super) cursor_from: Option<Position>,
    pub(super) last_id: Option<Position>,
    pub(super) reached_end: bool,
    pub(super) observations: Vec<Observation>,
}

/// Phase 1 of a batch starting at `start`: in one short transaction, the
/// cursor, the next rows after it and a few rows behind it never confirmed
/// (late commits). Its rows are the behind-cursor rows first, all in walk
/// order; its last id is the last of the cursor's rows (`None` at the end
/// of the table), and it reached the end when those were the table's last
/// rows (one row more than the batch is read, so a batch that ends exactly
/// at the end knows it too).
///
/// # Errors
/// As [`run_batch`](crate::scan::run_batch).
pub(crate) async fn prepare(
    ctx: &ScanContext<'_>,
    mode: &Mode,
    start: &Start,
) -> Result<Prepared, RunError> {
    let settings = &ctx.settings;
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("opening the read transaction")?;
    let (cursor_from, pending) = cursor_start(&mut tx, ctx, mode, start).await?;
    let columns = MoneyColumns::of(settings.schema);
    let batch_size = settings.scan.batch_size;
    let mut ahead = payments::read_batch(
        &mut tx,
        cursor_from.as_ref(),
        batch_size.saturating_add(1),
        settings.run.grace,
        columns,
    )
    .await?;
    let reached_end = ahead.len() <= batch_size as usize;
    ahead.truncate(batch_size as usize);
    let last_id = ahead.last().map(|r| Position {
        key: r.id.clone(),
        created_at: (settings.schema.key.walk() == Walk::CreatedAt).then_some(r.created_at),
    });
    let behind = cursor_from
        .as_ref()
        .filter(|_| last_id.is_some() && mode.writes());
    let mut rows = match behind {
        Some(behind) => read_behind(&mut tx, settings, behind, pending).await?,
        None => Vec::with_capacity(ahead.len()),
    };
    rows.extend(ahead);
    tx.commit().await.context("closing the read transaction")?;
    Ok(Prepared {
        cursor_from,
        rows,
        last_id,
        reached_end,
    })
}

/// Phase 2 of a prepared batch, with the outage rule; abandoned when
/// `shutdown` fires.
///
/// # Errors
/// As [`run_batch_until`](crate::scan::run_batch_until) (never `ConcurrentRun` or `Store` from here).
pub(crate) async fn read_stripe(
    ctx: &ScanContext<'_>,
    prepared: Prepared,
    pacing: Pacing<'_>,
) -> Result<ReadBatch, RunError> {
    let (gateway, shutdown, reads) = (ctx.gateway, &ctx.shutdown, &ctx.settings.read());
    let Prepared {
        cursor_from,
        rows,
        last_id,
        reached_end,
    } = prepared;
    if last_id.is_none() {
        return Ok(ReadBatch {
            cursor_from,
            last_id,
            reached_end,
            observations: Vec::new(),
        });
    }
    // 2. Stripe, with no transaction open.
    let observed = tokio::select! {
        biased;
        () = shutdown.cancelled() => return Err(RunError::Interrupted),
        observed = observe_batch(ctx.pool, gateway, rows, reads, Utc::now(), pacing) => observed?,
    };
    if shutdown.is_cancelled() {
        return Err(RunError::Interrupted);
    }
    check_stripe_reachable(gateway, &observed).await?;
    Ok(ReadBatch {
        cursor_from,
        last_id,
        reached_end,
        observations: observed.observations,
    })
}

/// Rows behind the cursor never confirmed with Stripe, read per batch beside
/// the cursor's rows: a tenth of the batch, at least one.
pub fn behind_cursor_limit(batch_size: u32) -> u32 {
    (batch_size / 10).max(1)
}

/// Where phase 1 starts: the cursor (the persistent one, taken with the
/// lease renewed, or a dry run's in memory), or right after the previous
/// batch of the run, whose rows (`pending`) are left out of the rows behind
/// the cursor. A run whose lease expired learns it here, before spending
/// reads.
async fn cursor_start<'s>(
    tx: &mut sqlx::PgConnection,
    ctx: &ScanContext<'_>,
    mode: &Mode,
    start: &'s Start,
) -> Result<(Option<Position>, &'s [PaymentKey]), RunError> {
    let (lease, job) = (ctx.lease.as_ref(), &ctx.settings.run.job);
    Ok(match (mode, start) {
        (Mode::Write, Start::After { position, pending }) => {
            crate::lease::renew_held(&mut *tx, lease).await?;
            (position.clone(), pending)
        }
        (Mode::DryRun { .. }, Start::After { position, pending }) => (position.clone(), pending),
        (Mode::Write, Start::Cursor) => {
            cursor::ensure(&mut *tx, job).await?;
            crate::lease::renew_held(&mut *tx, lease).await?;
            let position = cursor::read(&mut *tx, job).await?.and_then(|c| c.position);
            (position, &[])
        }
        (Mode::DryRun { after }, Start::Cursor) => (after.clone(), &[]),
    })
}

/// A few rows behind the cursor `behind` never confirmed with Stripe (late
/// commits, or in the grace window when the cursor passed), read beside the
/// cursor's rows, `pending` left out; marked `behind_cursor`.
async fn read_behind(
    tx: &mut sqlx::PgConnection,
    settings: &ScanGroups<'_>,
    behind: &Position,
    pending: &[PaymentKey],
) -> Result<Vec<PaymentRow>, RunError> {
    let wanted = Behind {
        cursor: behind,
        limit: behind_cursor_limit(settings.scan.batch_size),
        excluded: pending,
    };
    let (job, grace, columns) = (
        &settings.run.job,
        settings.run.grace,
        MoneyColumns::of(settings.schema),
    );
    let mut rows = payments::read_behind_cursor(tx, job, wanted, grace, columns).await?;
    for row in &mut rows {
        row.behind_cursor = true;
    }
    if !rows.is_empty() {
        tracing::info!(
            rows = rows.len(),
            first = %rows[0].id,
            "rows behind the cursor never confirmed with Stripe (committed late or in the grace window when passed); checked in this batch"
        );
    }
    Ok(rows)
}
