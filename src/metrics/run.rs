//! The gauges every run pushes, the scan's and the events job's alike
//! (`run_outcome` and `run_duration_seconds` keep one name for both; the
//! grouping key tells the jobs apart).

use prometheus::Registry;

use super::gauge::{Figure, Labelled};
use crate::outcome::RunOutcome;

/// `run_duration_seconds`, `last_run_timestamp_seconds`, `run_outcome{outcome}`
/// and `concurrent_run_timestamp_seconds`.
pub(super) struct RunGauges {
    duration: Figure,
    last_run: Figure,
    outcome: Labelled,
    concurrent_run: Figure,
}

impl RunGauges {
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(RunGauges {
            duration: Figure::register(
                registry,
                "run_duration_seconds",
                "Wall time of the last run.",
            )?,
            last_run: Figure::register(
                registry,
                "last_run_timestamp_seconds",
                "When the last run ended (Unix time).",
            )?,
            outcome: Labelled::register(
                registry,
                "run_outcome",
                "1 for the last run's outcome, 0 for the others.",
                "outcome",
            )?,
            concurrent_run: Figure::register(
                registry,
                "concurrent_run_timestamp_seconds",
                "When a run last stopped because another run held the cursor.",
            )?,
        })
    }

    /// A finished run: its wall time in seconds, its end (Unix seconds) and
    /// its outcome label.
    pub(super) fn observe(&self, duration_seconds: f64, now_unix: f64, outcome: RunOutcome) {
        self.duration.set(duration_seconds);
        self.last_run.set(now_unix);
        // Every label, 1 for the run's and 0 for the others, so an alert can
        // match on the label.
        for o in RunOutcome::ALL {
            self.outcome
                .set(o.as_str(), f64::from(u8::from(o == outcome)));
        }
    }

    /// The moment (Unix seconds) a run lost the cursor to another run.
    pub(super) fn observe_concurrent_run(&self, now_unix: f64) {
        self.concurrent_run.set(now_unix);
    }
}
