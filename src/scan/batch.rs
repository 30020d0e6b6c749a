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
use crate::store::payments::{self, Behind, BehindRows, MoneyColumns, PaymentRow};
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
        /// Where the previous batch's sweep of the rows behind the cursor
        /// stopped (`None`: start it again).
        sweep: Option<Position>,
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
    /// Where the next batch's sweep of the rows behind the cursor starts
    /// ([`payments::BehindRows::sweep_next`]).
    pub sweep_next: Option<Position>,
    /// The cursor's rows (not those behind it): what the batch adds to the
    /// cycle's rows done.
    pub walked: u64,
}

/// Phase 2's outcome: the batch ready to commit.
#[derive(Debug)]
pub(crate) struct ReadBatch {
    pub(super) cursor_from: Option<Position>,
    pub(super) last_id: Option<Position>,
    pub(super) reached_end: bool,
    pub(super) walked: u64,
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
    if mode.writes() {
        renew_alone(ctx).await?;
    }
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("opening the read transaction")?;
    let (cursor_from, pending, sweep) = cursor_start(&mut tx, ctx, mode, start).await?;
    let columns = MoneyColumns::of(settings.schema, settings.facts);
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
    let walked = ahead.len() as u64;
    let last_id = ahead.last().map(|(r, created_at)| Position {
        key: r.id.clone(),
        created_at: (settings.facts.key.walk() == Walk::CreatedAt).then_some(*created_at),
    });
    let ahead = ahead.into_iter().map(|(r, _)| r);
    let behind = cursor_from
        .as_ref()
        .filter(|_| last_id.is_some() && mode.writes());
    let (mut rows, sweep_next) = match behind {
        Some(behind) => {
            let read = read_behind(&mut tx, settings, behind, pending, sweep).await?;
            (read.rows, read.sweep_next)
        }
        None => (Vec::with_capacity(ahead.len()), None),
    };
    rows.extend(ahead);
    tx.commit().await.context("closing the read transaction")?;
    Ok(Prepared {
        cursor_from,
        rows,
        last_id,
        reached_end,
        sweep_next,
        walked,
    })
}

/// Renews the run's lease in a transaction of its own, before phase 1's
/// read transaction: one short `UPDATE` of the cursor row that never waits
/// behind a batch's reads (the read transaction takes no lock on the row),
/// and a read transaction that holds no lock a committing batch waits for.
/// A run whose lease expired learns it here, before spending reads.
async fn renew_alone(ctx: &ScanContext<'_>) -> Result<(), RunError> {
    let Some(lease) = ctx.lease.as_ref() else {
        return Ok(());
    };
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("opening the lease transaction")?;
    lease.renew(&mut tx).await?;
    tx.commit().await.context("committing the lease renewal")?;
    Ok(())
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
        walked,
        ..
    } = prepared;
    if last_id.is_none() {
        return Ok(ReadBatch {
            cursor_from,
            last_id,
            reached_end,
            walked,
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
        walked,
        observations: observed.observations,
    })
}

/// Rows behind the cursor never confirmed with Stripe, read per batch beside
/// the cursor's rows: a tenth of the batch, at least one.
pub fn behind_cursor_limit(batch_size: u32) -> u32 {
    (batch_size / 10).max(1)
}

/// Where phase 1 starts: the cursor (the persistent one, or a dry run's in
/// memory), or right after the previous batch of the run, whose rows
/// (`pending`) are left out of the rows behind the cursor; with where the
/// sweep of the rows behind the cursor goes on (`None`: from its start).
async fn cursor_start<'s>(
    tx: &mut sqlx::PgConnection,
    ctx: &ScanContext<'_>,
    mode: &Mode,
    start: &'s Start,
) -> Result<(Option<Position>, &'s [PaymentKey], Option<&'s Position>), RunError> {
    let job = &ctx.settings.run.job;
    Ok(match (mode, start) {
        (
            _,
            Start::After {
                position,
                pending,
                sweep,
            },
        ) => (position.clone(), pending, sweep.as_ref()),
        (Mode::Write, Start::Cursor) => {
            cursor::ensure(&mut *tx, job).await?;
            let position = cursor::read(&mut *tx, job).await?.and_then(|c| c.position);
            (position, &[], None)
        }
        (Mode::DryRun { after }, Start::Cursor) => (after.clone(), &[], None),
    })
}

/// A few rows behind the cursor `behind` never confirmed with Stripe (late
/// commits, or in the grace window when the cursor passed), read beside the
/// cursor's rows, `pending` left out, the sweep going on from `sweep_from`;
/// marked `behind_cursor`.
async fn read_behind(
    tx: &mut sqlx::PgConnection,
    settings: &ScanGroups<'_>,
    behind: &Position,
    pending: &[PaymentKey],
    sweep_from: Option<&Position>,
) -> Result<BehindRows, RunError> {
    let wanted = Behind {
        cursor: behind,
        limit: behind_cursor_limit(settings.scan.batch_size),
        excluded: pending,
        sweep_from,
    };
    let (job, grace, columns) = (
        &settings.run.job,
        settings.run.grace,
        MoneyColumns::of(settings.schema, settings.facts),
    );
    let mut read = payments::read_behind_cursor(tx, job, wanted, grace, columns).await?;
    let rows = &mut read.rows;
    for row in rows.iter_mut() {
        row.behind_cursor = true;
    }
    if !rows.is_empty() {
        tracing::info!(
            rows = rows.len(),
            first = %rows[0].id,
            "rows behind the cursor never confirmed with Stripe (committed late or in the grace window when passed); checked in this batch"
        );
    }
    Ok(read)
}
