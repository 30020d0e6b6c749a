//! One batch, in the design note's three phases: (1) a short transaction reads
//! the cursor and the rows; (2) Stripe is asked with no transaction open;
//! (3) one transaction records everything and moves the cursor by
//! compare-and-set, or rolls back on a lost race. This file holds phases 1
//! and 2; phase 3 is [`super::commit`], the three in a row `one`.

use chrono::Utc;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::groups::ScanGroups;
use crate::key::{PaymentKey, Position, Walk};
use crate::lease::Lease;
use crate::outcome::RunError;
use crate::read::outage::check_stripe_reachable;
use crate::read::{observe_batch, Observation, Pacing, ReadGroups};
use crate::store::payments::{self, MoneyColumns, PaymentRow};
use crate::store::{cursor, Context};
use crate::stripe::StripeGateway;

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
    /// size were there): the batch ends the cycle (DESIGN.md, Turn 4: a
    /// batch that reads fewer rows than it asked for ends the cycle).
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

/// Phase 1 of a batch starting at `start`.
///
/// # Errors
/// As [`run_batch`](crate::scan::run_batch).
pub(crate) async fn prepare(
    pool: &PgPool,
    settings: &ScanGroups<'_>,
    mode: &Mode,
    lease: Option<&Lease>,
    start: &Start,
) -> Result<Prepared, RunError> {
    let (cursor_from, rows, last_id, reached_end) =
        read_phase(pool, settings, mode, lease, start).await?;
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
    pool: &PgPool,
    gateway: &StripeGateway,
    reads: &ReadGroups<'_>,
    prepared: Prepared,
    shutdown: &CancellationToken,
    pacing: Pacing<'_>,
) -> Result<ReadBatch, RunError> {
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
        observed = observe_batch(pool, gateway, rows, reads, Utc::now(), pacing) => observed?,
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

/// Phase 1's parts: the cursor, the rows, the last of the cursor's rows and
/// whether they were the table's last.
type PhaseOne = (Option<Position>, Vec<PaymentRow>, Option<Position>, bool);

/// Phase 1: the cursor, the next rows after it and a few rows behind it never
/// confirmed (late commits). Returns the cursor, the rows (behind-cursor rows
/// first, all in id order), the last id of the cursor's rows (`None` at
/// the end of the table) and whether they are the table's last rows (one row
/// more than the batch is asked for, so a batch that ends exactly at the end
/// knows it too).
async fn read_phase(
    pool: &PgPool,
    settings: &ScanGroups<'_>,
    mode: &Mode,
    lease: Option<&Lease>,
    start: &Start,
) -> Result<PhaseOne, RunError> {
    let mut tx = crate::store::begin(pool)
        .await
        .context("opening the read transaction")?;
    let (cursor_id, pending): (Option<Position>, &[PaymentKey]) = match (mode, start) {
        (Mode::Write, Start::After { position, pending }) => {
            crate::lease::renew_held(&mut tx, lease).await?;
            (position.clone(), pending)
        }
        (Mode::DryRun { .. }, Start::After { position, pending }) => (position.clone(), pending),
        (Mode::Write, Start::Cursor) => {
            cursor::ensure(&mut tx, &settings.run.job).await?;
            // A run whose lease expired learns it here, before spending reads.
            crate::lease::renew_held(&mut tx, lease).await?;
            let position = cursor::read(&mut tx, &settings.run.job)
                .await?
                .and_then(|c| c.position);
            (position, &[])
        }
        (Mode::DryRun { after }, Start::Cursor) => (after.clone(), &[]),
    };
    let columns = MoneyColumns::of(settings.schema, settings.facts);
    let mut ahead = payments::read_batch(
        &mut tx,
        cursor_id.as_ref(),
        settings.scan.batch_size.saturating_add(1),
        settings.run.grace,
        columns,
    )
    .await?;
    let reached_end = ahead.len() <= settings.scan.batch_size as usize;
    ahead.truncate(settings.scan.batch_size as usize);
    let last_id = ahead.last().map(|r| Position {
        key: r.id.clone(),
        created_at: (settings.facts.key.walk() == Walk::CreatedAt).then_some(r.created_at),
    });
    let mut rows = Vec::with_capacity(ahead.len());
    let behind = cursor_id
        .as_ref()
        .filter(|_| last_id.is_some() && mode.writes());
    if let Some(behind) = behind {
        rows = payments::read_behind_cursor(
            &mut tx,
            &settings.run.job,
            behind,
            behind_cursor_limit(settings.scan.batch_size),
            settings.run.grace,
            columns,
            pending,
        )
        .await?;
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
    }
    rows.extend(ahead);
    tx.commit().await.context("closing the read transaction")?;
    Ok((cursor_id, rows, last_id, reached_end))
}
