//! The notification figures (docs/review.md), pushed to `job=<group>-notify` after
//! each `run` and `events` when `RECONCILER_NOTIFY_URL` is set.

use super::gauge::Figure;
use super::RunMetrics;

/// `notify_sent` and `notify_failures` of one run.
pub struct NotifyMetrics {
    figures: RunMetrics,
    sent: Figure,
    failures: Figure,
}

impl NotifyMetrics {
    /// Registers the two gauges.
    ///
    /// # Errors
    /// [`prometheus::Error`] for an invalid or already registered name.
    pub fn new() -> Result<Self, prometheus::Error> {
        let figures = RunMetrics::new()?;
        let sent = Figure::register(
            &figures.registry,
            "notify_sent",
            "Findings the last run posted to RECONCILER_NOTIFY_URL.",
        )?;
        let failures = Figure::register(
            &figures.registry,
            "notify_failures",
            "Posts to RECONCILER_NOTIFY_URL that failed in the last run (timeout, refused, non-2xx); their findings are posted by the next run.",
        )?;
        Ok(NotifyMetrics {
            figures,
            sent,
            failures,
        })
    }

    /// Sets this run's figures: findings posted, posts failed.
    pub fn observe(&self, sent: u64, failures: u64) {
        self.sent.set(sent as f64);
        self.failures.set(failures as f64);
    }

    /// The figures to push.
    pub fn figures(&self) -> &RunMetrics {
        &self.figures
    }
}
