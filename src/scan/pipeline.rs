//! The batches of a run, pipelined: up to the planned batches (`plan`), stopping early at the end of the table once rows were read (each
//! row is read at most once per run), on a second consecutive wrap (an empty
//! table), or on a shutdown signal (`schedule`). A run that starts at
//! the end of the table wraps and goes on from the start.

use std::time::Instant;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, Semaphore, SemaphorePermit};

use super::batch::{prepare, read_stripe, Mode, ReadBatch};
use super::commit::commit;
use super::groups::ScanContext;
use super::progress::{cycle_progress, CycleProgress, Pace, TableExtent};
use super::report::{BatchReport, RunSummary};
use super::schedule::{Plan, BATCHES_IN_PROGRESS};
use crate::config::ScanSettings;
use crate::outcome::RunError;
use crate::read::Pacing;
use crate::store::{cursor, stats, Context};
use crate::terminal::human_duration;

/// How to run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Read and classify, write nothing (not even the cursor or run history).
    pub dry_run: bool,
}

/// The batches of a run, pipelined so that Stripe is never idle at a batch
/// boundary: as soon as batch k has started its last Stripe read, batch k+1
/// reads its rows (phase 1, starting right after batch k's last id, without
/// waiting for the cursor to move) and starts its own reads, so they queue at
/// the rate limiter while batch k's last answers arrive and batch k commits. At most
/// [`BATCHES_IN_PROGRESS`] batches are between phase 1 and their commit; commits happen in order, each
/// with the compare-and-set `last_id = previous batch's last id`, so a lost
/// race still rolls its batch back and stops the run (exit 75), and the batch
/// being read is abandoned without a write. Every Stripe request of the run
/// holds one of `RECONCILER_MAX_IN_FLIGHT` permits.
pub(super) async fn batches(
    ctx: &ScanContext<'_>,
    options: RunOptions,
    summary: &mut RunSummary,
) -> Result<(), RunError> {
    let mode = start_mode(ctx, options, summary).await?;
    let table = table_extent(ctx).await;
    let run_started = Instant::now();
    let pipeline = Pipeline {
        ctx,
        options,
        mode,
        // Planned by `run` before the batches (`plan`); one batch without a plan.
        planned_batches: summary.plan.map_or(1, |p| p.batches),
        run_started,
        in_flight: Semaphore::new((ctx.settings.stripe.max_in_flight as usize).max(1)),
        slots: Semaphore::new(BATCHES_IN_PROGRESS),
    };
    let (sender, receiver) = mpsc::unbounded_channel();
    let consumer = pipeline.commit_in_order(receiver, table, summary);
    let mut producer = std::pin::pin!(pipeline.read_ahead(sender));
    let mut consumer = std::pin::pin!(consumer);
    tokio::select! {
        result = &mut consumer => result,
        () = &mut producer => consumer.await,
    }
}

/// A batch read from Stripe, with the slot it holds until its commit ends.
type ReadResult<'p> = Result<(ReadBatch, SemaphorePermit<'p>), RunError>;

/// What the batches of one run share: the run's context, how it runs, where
/// the batches start, how many are planned, and the permits that bound
/// them.
struct Pipeline<'a, 'c> {
    ctx: &'a ScanContext<'c>,
    options: RunOptions,
    mode: Mode,
    planned_batches: u32,
    run_started: Instant,
    /// Every Stripe request of the run holds one (`RECONCILER_MAX_IN_FLIGHT`).
    in_flight: Semaphore,
    /// A batch holds one from its phase 1 to the end of its commit.
    slots: Semaphore,
}

impl Pipeline<'_, '_> {
    /// Phases 1 and 2 of the batches, in order, up to
    /// [`BATCHES_IN_PROGRESS`] ahead of the commits; each read goes to
    /// `sender`; stops after the first that failed.
    async fn read_ahead<'p>(&'p self, sender: mpsc::UnboundedSender<ReadResult<'p>>) {
        let reads = futures::stream::unfold(Plan::new(), |mut plan| async move {
            let settings = &self.ctx.settings;
            let (shutdown, started) = (&self.ctx.shutdown, self.run_started);
            let start = plan.next_start(settings.run, self.planned_batches, shutdown, started)?;
            let Ok(slot) = self.slots.acquire().await else {
                return None;
            };
            let all_started = plan.after_previous_started().await;
            let prepared = match start {
                Ok(start) => prepare(self.ctx, &self.mode, &start).await,
                Err(e) => Err(e),
            };
            let read: BoxFuture<'_, _> = match prepared {
                Err(e) => {
                    plan.done = true;
                    futures::future::ready(Err(e)).boxed()
                }
                Ok(prepared) => {
                    plan.prepared(&prepared, self.options.dry_run);
                    let pacing = Pacing {
                        in_flight: &self.in_flight,
                        all_started: Some(all_started),
                    };
                    read_stripe(self.ctx, prepared, pacing)
                        .map(move |r| r.map(|read| (read, slot)))
                        .boxed()
                }
            };
            Some((read, plan))
        })
        .buffered(BATCHES_IN_PROGRESS);
        let mut reads = std::pin::pin!(reads);
        while let Some(read) = reads.next().await {
            let failed = read.is_err();
            if sender.send(read).is_err() || failed {
                break;
            }
        }
    }

    /// Phase 3 of the batches read, in order, each counted in `summary` and
    /// logged with the cycle's progress over `table`.
    async fn commit_in_order(
        &self,
        mut receiver: mpsc::UnboundedReceiver<ReadResult<'_>>,
        table: TableExtent,
        summary: &mut RunSummary,
    ) -> Result<(), RunError> {
        let scan = self.ctx.settings.scan;
        let mut progress = Progress::new(table, self.run_started, scan, self.planned_batches);
        while let Some(read) = receiver.recv().await {
            let (read, slot) = read?;
            // A batch whose reads ended before a shutdown signal but whose
            // transaction has not begun is abandoned like one still reading
            // (docs/scan.md, "Signals"): only a batch already writing
            // finishes, and no batch starts writing after the signal.
            if self.ctx.shutdown.is_cancelled() {
                return Err(RunError::Interrupted);
            }
            let report = commit(self.ctx, &self.mode, read).await?;
            drop(slot);
            summary.add_batch(&report);
            progress.committed(&report, summary.rows_scanned);
        }
        Ok(())
    }
}

/// Where the batches start: the persistent cursor, or for a dry run its
/// stored position held in memory (also the summary's cursor).
async fn start_mode(
    ctx: &ScanContext<'_>,
    options: RunOptions,
    summary: &mut RunSummary,
) -> Result<Mode, RunError> {
    if !options.dry_run {
        return Ok(Mode::Write);
    }
    let mut conn = crate::store::begin(ctx.pool).await.context("connecting")?;
    let start = cursor::read(&mut conn, &ctx.settings.run.job)
        .await?
        .and_then(|c| c.position);
    summary.cursor_position = Some(start.as_ref().and_then(|p| p.key.as_i64()).unwrap_or(0));
    summary.cursor_key = start.as_ref().map(|p| p.key.clone());
    Ok(Mode::DryRun { after: start })
}

/// The run's rows left and planned after `done` of `planned` batches of
/// `batch_size` rows (the scanned rows and elapsed time are the caller's).
/// The cycle progress logged after each committed batch.
struct Progress {
    table: TableExtent,
    run_started: Instant,
    batch_size: u32,
    planned_batches: u32,
    /// Batches committed so far.
    number: u32,
    /// Rows of the cycle walked: at the run's start, plus this run's
    /// batches (0 again after a wrap).
    walked: u64,
    /// When the previous batch was committed (or the batches started).
    boundary: Instant,
}

impl Progress {
    fn new(table: TableExtent, run_started: Instant, scan: &ScanSettings, planned: u32) -> Self {
        Progress {
            table,
            run_started,
            batch_size: scan.batch_size,
            planned_batches: planned,
            number: 0,
            walked: table.rows_done,
            boundary: Instant::now(),
        }
    }

    /// Logs batch `report` (the next in order) with the cycle's progress.
    fn committed(&mut self, report: &BatchReport, rows_scanned: u64) {
        self.number += 1;
        self.walked = if report.wrapped {
            0
        } else {
            self.walked + report.walked
        };
        let pace = Pace {
            rows_scanned,
            elapsed_seconds: self.run_started.elapsed().as_secs_f64(),
            ..pace_of(self.batch_size, self.planned_batches, self.number)
        };
        let progress = cycle_progress(self.table, (report.cursor_to, self.walked), pace);
        let seconds = self.boundary.elapsed().as_secs_f64();
        log_batch(self.number, report, seconds, &progress);
        self.boundary = Instant::now();
    }
}

fn pace_of(batch_size: u32, planned: u32, done: u32) -> Pace {
    let rows_per_batch = u64::from(batch_size);
    Pace {
        rows_scanned: 0,
        elapsed_seconds: 0.0,
        rows_left_in_run: u64::from(planned.saturating_sub(done)) * rows_per_batch,
        rows_per_run: u64::from(planned) * rows_per_batch,
    }
}

/// The table's size and id range for the progress line, read once per run;
/// unknown (zeros) when it cannot be read, which only blanks the estimate.
async fn table_extent(ctx: &ScanContext<'_>) -> TableExtent {
    let (run, facts) = (ctx.settings.run, ctx.settings.facts);
    // A read transaction (pooler-safe: docs/schema.md); rolled back on drop.
    let figures = match crate::store::begin(ctx.pool).await {
        Ok(mut conn) => stats::table_figures(
            &mut conn,
            &run.job,
            facts.partition.as_ref(),
            &facts.key,
            &facts.times,
        )
        .await
        .ok(),
        Err(_) => None,
    };
    figures.map_or_else(TableExtent::default, |t| TableExtent {
        rows: t.rows_estimate,
        min_id: t.min_id,
        max_id: t.max_id,
        rows_done: u64::try_from(t.cycle_rows_done).unwrap_or(0),
    })
}

fn log_batch(number: u32, r: &BatchReport, seconds: f64, p: &CycleProgress) {
    let v = &r.verdicts;
    use crate::reconcile::Verdict as V;
    tracing::info!(
        batch = number,
        cursor_from = r.cursor_from,
        cursor_to = r.cursor_to,
        rows = r.scanned,
        in_sync = v.get(V::InSync),
        in_flight = v.get(V::InFlight),
        repairable = v.get(V::Repairable),
        needs_review = v.get(V::NeedsReview),
        unverifiable = v.get(V::Unverifiable),
        findings_created = r.findings_created,
        commands_enqueued = r.commands_enqueued,
        findings_cleared = r.findings_cleared,
        findings_payment_deleted = r.findings_payment_deleted,
        writes_refused = r.writes_refused,
        wrapped = r.wrapped,
        seconds,
        cycle_rows_done = p.rows_done,
        cycle_rows_total = p.rows_total,
        cycle_eta_seconds = p.eta_seconds.map(f64::round),
        cycle_more_runs = p.more_runs,
        "batch done: {} / {} rows of the cycle, {}",
        p.rows_done,
        p.rows_total,
        eta_text(p)
    );
}

/// "about 2m 5s of scanning to the end of the cycle (this run and 3 more)".
fn eta_text(p: &CycleProgress) -> String {
    let runs = match p.more_runs {
        0 => "within this run".to_owned(),
        1 => "this run and 1 more".to_owned(),
        n => format!("this run and {n} more"),
    };
    match p.eta_seconds {
        Some(s) => format!(
            "about {} of scanning to the end of the cycle ({runs})",
            human_duration(s)
        ),
        None => format!("end of the cycle: {runs}"),
    }
}
