//! The `run` loop: up to `RECONCILER_BATCHES_PER_RUN` batches, stopping early
//! at the end of the table once rows were read (each row is read at most once
//! per run), on a second consecutive wrap (an empty table), or on a shutdown
//! signal. A run that starts at the end of the table wraps and goes on from
//! the start.

use std::time::Instant;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::batch::{prepare, read_stripe, Mode, Prepared, Start};
use super::commit::commit;
use super::progress::{cycle_progress, CycleProgress, Pace, TableExtent};
use super::report::{BatchReport, RunSummary};
use crate::config::JobSettings;
use crate::lease::Lease;
use crate::outcome::{RunError, RunOutcome};
use crate::read::Pacing;
use crate::status::human_duration;
use crate::store::lease::LeaseTable;
use crate::store::{cursor, runs, stats, Context};
use crate::stripe::StripeGateway;

/// How to run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Read and classify, write nothing (not even the cursor or run history).
    pub dry_run: bool,
}

/// Runs the job. Always returns the summary of what was committed, with the
/// error that stopped the run, if any.
#[tracing::instrument(name = "run", skip_all, fields(job = %settings.job, dry_run = options.dry_run))]
pub async fn run(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    options: RunOptions,
    shutdown: CancellationToken,
) -> (RunSummary, Result<(), RunError>) {
    let started = Instant::now();
    let requests_before = gateway.request_counts();
    let mut summary = RunSummary {
        job: settings.job.clone(),
        dry_run: options.dry_run,
        ..RunSummary::default()
    };
    let lease = if options.dry_run {
        None
    } else {
        match Lease::new(settings, LeaseTable::Cursor, &settings.job)
            .take(pool)
            .await
        {
            Ok(lease) => Some(lease),
            Err(e) => {
                summary.outcome = e.outcome();
                summary.cursor_position = real_cursor(pool, settings).await;
                summary.duration_seconds = started.elapsed().as_secs_f64();
                return (summary, Err(e));
            }
        }
    };
    let run_id = match lease {
        Some(_) => start_record(pool, settings).await,
        None => None,
    };
    let result = batches(
        pool,
        gateway,
        settings,
        options,
        lease.as_ref(),
        &shutdown,
        &mut summary,
    )
    .await;
    if let Some(lease) = &lease {
        lease.give_back(pool).await;
        // The real cursor, whatever stopped the run: a failed batch leaves it
        // where the last committed one (or an earlier run) put it.
        summary.cursor_position = real_cursor(pool, settings).await;
    }
    summary.duration_seconds = started.elapsed().as_secs_f64();
    summary.stripe_requests = gateway.request_counts().since(&requests_before);
    summary.outcome = match &result {
        Ok(()) => RunOutcome::Completed,
        Err(e) => e.outcome(),
    };
    if let Some(id) = run_id {
        finish_record(pool, id, &summary).await;
    }
    (summary, result)
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
async fn batches(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    options: RunOptions,
    lease: Option<&Lease>,
    shutdown: &CancellationToken,
    summary: &mut RunSummary,
) -> Result<(), RunError> {
    let mode = if options.dry_run {
        let mut conn = crate::store::begin(pool).await.context("connecting")?;
        let start = cursor::read(&mut conn, &settings.job)
            .await?
            .map_or(0, |c| c.last_id);
        summary.cursor_position = Some(start);
        Mode::DryRun { after_id: start }
    } else {
        Mode::Write
    };
    let table = table_extent(pool, settings).await;
    let run_started = Instant::now();
    let in_flight = Semaphore::new((settings.max_in_flight as usize).max(1));
    // A batch holds a slot from its phase 1 to the end of its commit.
    let slots = Semaphore::new(BATCHES_IN_PROGRESS);
    let (sender, mut receiver) = mpsc::unbounded_channel();

    let producer = async {
        let reads = futures::stream::unfold(Plan::new(), |mut plan| {
            let (slots, in_flight) = (&slots, &in_flight);
            async move {
                let start = plan.next_start(settings, shutdown, run_started)?;
                let Ok(slot) = slots.acquire().await else {
                    return None;
                };
                // The previous batch has started every read (or ended).
                if let Some(gate) = plan.gate.take() {
                    let _ = gate.await;
                }
                let (all_started, gate) = oneshot::channel();
                plan.gate = Some(gate);
                let read: BoxFuture<'_, _> = match start {
                    Err(e) => {
                        plan.done = true;
                        futures::future::ready(Err(e)).boxed()
                    }
                    Ok(start) => match prepare(pool, settings, mode, lease, &start).await {
                        Err(e) => {
                            plan.done = true;
                            futures::future::ready(Err(e)).boxed()
                        }
                        Ok(prepared) => {
                            plan.prepared(&prepared, options);
                            let pacing = Pacing {
                                in_flight,
                                all_started: Some(all_started),
                            };
                            read_stripe(pool, gateway, settings, prepared, shutdown, pacing)
                                .map(move |r| r.map(|read| (read, slot)))
                                .boxed()
                        }
                    },
                };
                Some((read, plan))
            }
        })
        .buffered(BATCHES_IN_PROGRESS);
        let mut reads = std::pin::pin!(reads);
        while let Some(read) = reads.next().await {
            let failed = read.is_err();
            if sender.send(read).is_err() || failed {
                break;
            }
        }
        drop(sender);
    };

    let consumer = async {
        let mut number = 0u32;
        let mut boundary = Instant::now();
        while let Some(read) = receiver.recv().await {
            let (read, slot) = read?;
            number += 1;
            let report = commit(pool, settings, mode, lease, read).await?;
            drop(slot);
            summary.add_batch(&report);
            let rows_per_batch = u64::from(settings.batch_size);
            let pace = Pace {
                rows_scanned: summary.rows_scanned,
                elapsed_seconds: run_started.elapsed().as_secs_f64(),
                rows_left_in_run: u64::from(settings.batches_per_run.saturating_sub(number))
                    * rows_per_batch,
                rows_per_run: u64::from(settings.batches_per_run) * rows_per_batch,
            };
            let progress = cycle_progress(table, report.cursor_to, pace);
            log_batch(number, &report, boundary.elapsed().as_secs_f64(), &progress);
            boundary = Instant::now();
        }
        Ok(())
    };
    let mut producer = std::pin::pin!(producer);
    let mut consumer = std::pin::pin!(consumer);
    tokio::select! {
        result = &mut consumer => result,
        () = &mut producer => consumer.await,
    }
}

/// Batches between their phase 1 and the end of their commit, at most. Three,
/// not two: in list mode a batch's few fallback retrieves queue at the rate
/// limiter behind the next batch's pages, so it may still be committing when
/// that next batch has sent its pages and the one after it should start.
const BATCHES_IN_PROGRESS: usize = 3;

/// Which batches the producer starts: the loop rules of a run (at most
/// `RECONCILER_BATCHES_PER_RUN`, the run deadline, shutdown, and stopping at
/// the end of the table once rows were read or on a second wrap in a row).
struct Plan {
    start: Start,
    /// Fires when the previous batch has started all its reads.
    gate: Option<oneshot::Receiver<()>>,
    /// Row ids of the last batches prepared (some may still be committing).
    recent: std::collections::VecDeque<Vec<i64>>,
    started: u32,
    rows_read: u64,
    previous_wrapped: bool,
    done: bool,
}

impl Plan {
    fn new() -> Self {
        Plan {
            start: Start::Cursor,
            gate: None,
            recent: std::collections::VecDeque::new(),
            started: 0,
            rows_read: 0,
            previous_wrapped: false,
            done: false,
        }
    }

    /// The next batch's start; `None` when no batch is to start;
    /// `Some(Err(Interrupted))` on shutdown.
    fn next_start(
        &mut self,
        settings: &JobSettings,
        shutdown: &CancellationToken,
        run_started: Instant,
    ) -> Option<Result<Start, RunError>> {
        if self.done || self.started >= settings.batches_per_run {
            return None;
        }
        if shutdown.is_cancelled() {
            self.done = true;
            return Some(Err(RunError::Interrupted));
        }
        if settings
            .run_deadline
            .is_some_and(|d| run_started.elapsed() >= d)
        {
            tracing::info!(
                batches_started = self.started,
                "run deadline reached; no new batch started"
            );
            return None;
        }
        self.started += 1;
        Some(Ok(self.start.clone()))
    }

    /// Records a prepared batch: the next one starts after it.
    fn prepared(&mut self, p: &Prepared, options: RunOptions) {
        match p.last_id {
            Some(id) => {
                self.rows_read += p.rows.len() as u64;
                self.previous_wrapped = false;
                // Rows of the batches that may still be uncommitted are left
                // out of the next batch's rows behind the cursor.
                self.recent.push_back(p.rows.iter().map(|r| r.id).collect());
                while self.recent.len() > BATCHES_IN_PROGRESS - 1 {
                    self.recent.pop_front();
                }
                self.start = Start::After {
                    id,
                    pending: self.recent.iter().flatten().copied().collect(),
                };
            }
            None => {
                // A run reads each row at most once: it stops at the end of
                // the table once it has read rows (a small table is not
                // re-read up to RECONCILER_BATCHES_PER_RUN times, spending the
                // Stripe budget the application shares and multiplying the
                // verdict gauges). Two wraps in a row: the table is empty.
                if self.previous_wrapped || options.dry_run || self.rows_read > 0 {
                    self.done = true;
                }
                self.previous_wrapped = true;
                self.start = Start::After {
                    id: 0,
                    pending: self.recent.iter().flatten().copied().collect(),
                };
            }
        }
    }
}

/// The table's size and id range for the progress line, read once per run;
/// unknown (zeros) when it cannot be read, which only blanks the estimate.
async fn table_extent(pool: &PgPool, settings: &JobSettings) -> TableExtent {
    let types = crate::reconcile::RepairCommand::EVENT_TYPES;
    let figures = match pool.acquire().await {
        Ok(mut conn) => stats::table_figures(&mut conn, &settings.job, &types)
            .await
            .ok(),
        Err(_) => None,
    };
    figures.map_or_else(TableExtent::default, |t| TableExtent {
        rows: t.rows_estimate,
        min_id: t.min_id,
        max_id: t.max_id,
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

/// The job's cursor as stored; `None` when it cannot be read.
async fn real_cursor(pool: &PgPool, settings: &JobSettings) -> Option<i64> {
    let mut conn = pool.acquire().await.ok()?;
    match cursor::read(&mut conn, &settings.job).await {
        Ok(row) => Some(row.map_or(0, |c| c.last_id)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the cursor for the summary");
            None
        }
    }
}

async fn start_record(pool: &PgPool, settings: &JobSettings) -> Option<i64> {
    let mut conn = pool.acquire().await.ok()?;
    match runs::start(&mut conn, &settings.job, settings.batch_size).await {
        Ok(id) => Some(id),
        Err(e) => {
            tracing::warn!(error = %e, "could not record the run start");
            None
        }
    }
}

async fn finish_record(pool: &PgPool, run_id: i64, s: &RunSummary) {
    let record = runs::RunRecord {
        batches: i32::try_from(s.batches).unwrap_or(i32::MAX),
        rows_scanned: i64::try_from(s.rows_scanned).unwrap_or(i64::MAX),
        verdicts: s.verdicts.to_json(),
        findings_created: i64::try_from(s.findings_created).unwrap_or(i64::MAX),
        commands_enqueued: i64::try_from(s.commands_enqueued).unwrap_or(i64::MAX),
        wrapped: s.wrapped,
        outcome: s.outcome.as_str(),
    };
    let result = match pool.acquire().await {
        Ok(mut conn) => runs::finish(&mut conn, run_id, &record)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = result {
        tracing::warn!(error = %e, "could not record the run end");
    }
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
