//! Which batches a run starts: at most the planned batches (`plan`), until
//! the run deadline or a shutdown, stopping at the end of the table once rows
//! were read or on a second wrap in a row; each batch starts right after the
//! previous one, leaving rows of batches still committing out of its rows
//! behind the cursor.

use std::time::Instant;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::batch::{Prepared, Start};
use crate::config::RunSettings;
use crate::outcome::RunError;

/// Batches between their phase 1 and the end of their commit, at most. Three,
/// not two: in list mode a batch's few fallback retrieves queue at the rate
/// limiter behind the next batch's pages, so it may still be committing when
/// that next batch has sent its pages and the one after it should start.
pub(super) const BATCHES_IN_PROGRESS: usize = 3;

/// Which batches the producer starts: the loop rules of a run (at most
/// the planned batches, the run deadline, shutdown, and stopping at
/// the end of the table once rows were read or on a second wrap in a row).
pub(super) struct Plan {
    start: Start,
    /// Fires when the previous batch has started all its reads.
    gate: Option<oneshot::Receiver<()>>,
    /// Row ids of the last batches prepared (some may still be committing).
    recent: std::collections::VecDeque<Vec<crate::key::PaymentKey>>,
    started: u32,
    rows_read: u64,
    previous_wrapped: bool,
    pub(super) done: bool,
}

impl Plan {
    pub(super) fn new() -> Self {
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

    /// Waits until the previous batch has started every read (or ended),
    /// then sets the gate of the next batch: the returned sender fires when
    /// that batch has started all its reads.
    pub(super) async fn after_previous_started(&mut self) -> oneshot::Sender<()> {
        if let Some(gate) = self.gate.take() {
            let _ = gate.await;
        }
        let (all_started, gate) = oneshot::channel();
        self.gate = Some(gate);
        all_started
    }

    /// The next batch's start; `None` when no batch is to start;
    /// `Some(Err(Interrupted))` on shutdown.
    pub(super) fn next_start(
        &mut self,
        run: &RunSettings,
        planned_batches: u32,
        shutdown: &CancellationToken,
        run_started: Instant,
    ) -> Option<Result<Start, RunError>> {
        if self.done || self.started >= planned_batches {
            return None;
        }
        if shutdown.is_cancelled() {
            self.done = true;
            return Some(Err(RunError::Interrupted));
        }
        if run.run_deadline.is_some_and(|d| run_started.elapsed() >= d) {
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
    /// `dry_run`: a dry run reads to the end of the table once.
    pub(super) fn prepared(&mut self, p: &Prepared, dry_run: bool) {
        match &p.last_id {
            Some(last) => {
                self.rows_read += p.rows.len() as u64;
                self.previous_wrapped = false;
                // Rows of the batches that may still be uncommitted are left
                // out of the next batch's rows behind the cursor.
                self.recent
                    .push_back(p.rows.iter().map(|r| r.id.clone()).collect());
                while self.recent.len() > BATCHES_IN_PROGRESS - 1 {
                    self.recent.pop_front();
                }
                self.start = Start::After {
                    position: (!p.reached_end).then(|| last.clone()),
                    pending: self.recent.iter().flatten().cloned().collect(),
                    sweep: p.sweep_next.clone(),
                };
                // The batch read the table's last rows and ends the cycle: a
                // run reads each row at most once, so it stops here (below).
                if p.reached_end {
                    self.done = true;
                }
            }
            None => {
                // A run reads each row at most once: it stops at the end of
                // the table once it has read rows (a small table is not
                // re-read up to RECONCILER_BATCHES_PER_RUN times, spending the
                // Stripe budget the application shares and multiplying the
                // verdict gauges). Two wraps in a row: the table is empty.
                if self.previous_wrapped || dry_run || self.rows_read > 0 {
                    self.done = true;
                }
                self.previous_wrapped = true;
                self.start = Start::After {
                    position: None,
                    pending: self.recent.iter().flatten().cloned().collect(),
                    sweep: None,
                };
            }
        }
    }
}
