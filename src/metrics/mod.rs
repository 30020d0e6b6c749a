//! The run's figures as Prometheus gauges (docs/operations.md, "Metrics"),
//! encoded with the text format and pushed to the Pushgateway. Each push
//! replaces the previous run's group `job=<RECONCILER_JOB>` (the events job's:
//! `job=<RECONCILER_JOB>-events`).
//!
//! Each gauge is a typed field of its group, registered once in the push's
//! private [`Registry`] when the group is built (a misspelt gauge does not
//! compile). A gauge is pushed only once it has a value: a figure that is
//! unknown (no run history yet, database down) is absent, not 0.
//!
//! - `gauge`: the two gauge shapes (plain, one bounded label).
//! - `run`: the gauges of every run (outcome, duration, last run).
//! - `scan`: the scan run's figures (rows, batches, verdicts, Stripe requests, plan).
//! - `status`: the job's state (lag, cycle, cursor, findings, outbox, capacity).
//! - `events`: the events job's figures and [`EventsState`].
//! - `notify`: [`NotifyMetrics`], the notification figures.
//! - `push`: [`Pusher`], the async PUT/POST to the Pushgateway.

mod events;
mod gauge;
mod notify;
mod push;
mod run;
mod scan;
mod status;

use prometheus::{Encoder, Registry, TextEncoder};

pub use events::{EventsFigures, EventsState};
pub use notify::NotifyMetrics;
pub use push::{PushError, PushMethod, Pusher, PUSH_TIMEOUT};
pub use scan::ScanFigures;

use crate::capacity::RunPlan;
use crate::status::Status;

/// The figures of one push: a private registry and the gauges every run
/// pushes. Built through [`ScanMetrics`] or [`EventsMetrics`].
pub struct RunMetrics {
    registry: Registry,
    run: run::RunGauges,
}

impl RunMetrics {
    fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let run = run::RunGauges::register(&registry)?;
        Ok(RunMetrics { registry, run })
    }

    /// The figures in Prometheus text format.
    ///
    /// # Errors
    /// [`prometheus::Error`] from the encoder.
    pub fn encode(&self) -> Result<String, prometheus::Error> {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

/// The scan's push (`stripe-reconciler run`): the run's figures and the job's
/// state.
pub struct ScanMetrics {
    figures: RunMetrics,
    scan: scan::ScanGauges,
    status: status::StatusGauges,
    plan: Option<RunPlan>,
}

impl ScanMetrics {
    /// Registers every gauge of the scan's push; none has a value yet.
    ///
    /// # Errors
    /// [`prometheus::Error`] when a gauge cannot be registered (a name
    /// registered twice: a bug, caught by this module's tests).
    pub fn new() -> Result<Self, prometheus::Error> {
        let figures = RunMetrics::new()?;
        let scan = scan::ScanGauges::register(&figures.registry)?;
        let status = status::StatusGauges::register(&figures.registry)?;
        Ok(ScanMetrics {
            figures,
            scan,
            status,
            plan: None,
        })
    }

    /// Records a run's figures; `now_unix` is the end of the run.
    pub fn observe_run(&mut self, s: &ScanFigures, now_unix: f64) {
        self.figures
            .run
            .observe(s.duration_seconds, now_unix, s.outcome);
        self.scan.observe(s);
        if let Some(c) = s.cursor_position {
            self.status.observe_cursor(c);
        }
        self.plan = s.plan;
        if let Some(p) = &self.plan {
            self.status.observe_plan(p, None);
        }
    }

    /// Records the job's state (after [`ScanMetrics::observe_run`]: its
    /// cursor position wins).
    pub fn observe_status(&mut self, st: &Status) {
        self.status.observe(st);
        if let Some(p) = &self.plan {
            self.status.observe_plan(p, st.capacity.as_ref());
        }
    }

    /// Records the state of a scan over another object (the subscriptions
    /// scan, docs/subscriptions.md): lag, open findings by kind, pending
    /// repair commands (`None`: not ours to count).
    pub fn observe_object(
        &mut self,
        lag_seconds: Option<f64>,
        open_findings: &[(String, i64)],
        outbox_pending: Option<i64>,
    ) {
        self.status
            .observe_object(lag_seconds, open_findings, outbox_pending);
    }

    /// Marks the moment a run lost the cursor to another run.
    pub fn observe_concurrent_run(&mut self, now_unix: f64) {
        self.figures.run.observe_concurrent_run(now_unix);
    }

    /// What to encode and push.
    pub fn figures(&self) -> &RunMetrics {
        &self.figures
    }

    /// What to encode and push, owned.
    pub fn into_figures(self) -> RunMetrics {
        self.figures
    }
}

/// The events job's push (`stripe-reconciler events`).
pub struct EventsMetrics {
    figures: RunMetrics,
    events: events::EventsGauges,
}

impl EventsMetrics {
    /// Registers every gauge of the events job's push; none has a value yet.
    ///
    /// # Errors
    /// [`prometheus::Error`] when a gauge cannot be registered (a name
    /// registered twice: a bug, caught by this module's tests).
    pub fn new() -> Result<Self, prometheus::Error> {
        let figures = RunMetrics::new()?;
        let events = events::EventsGauges::register(&figures.registry)?;
        Ok(EventsMetrics { figures, events })
    }

    /// Records an events run's figures and the events job's state; `now_unix`
    /// is the end of the run. The last success is
    /// `events_last_success_timestamp_seconds`, not the scan's name, so the
    /// scan's staleness alert never judges the events job by the scan's
    /// schedule; `run_outcome` and `run_duration_seconds` keep the scan's
    /// names (the group `job=..-events` tells them apart).
    pub fn observe_events(
        &mut self,
        s: &EventsFigures,
        state: Option<&EventsState>,
        now_unix: f64,
    ) {
        self.events.observe(s, state, now_unix);
        self.figures
            .run
            .observe(s.duration_seconds, now_unix, s.outcome);
    }

    /// Marks the moment an events run lost its position to another run.
    pub fn observe_concurrent_run(&mut self, now_unix: f64) {
        self.figures.run.observe_concurrent_run(now_unix);
    }

    /// What to encode and push.
    pub fn figures(&self) -> &RunMetrics {
        &self.figures
    }

    /// What to encode and push, owned.
    pub fn into_figures(self) -> RunMetrics {
        self.figures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metric names in an encoded push, in order.
    fn names(text: &str) -> Vec<&str> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect()
    }

    #[test]
    fn every_gauge_of_a_push_registers_once() {
        assert!(ScanMetrics::new().is_ok());
        assert!(EventsMetrics::new().is_ok());
    }

    #[test]
    fn a_figure_never_set_is_absent_from_the_push() {
        let mut m = ScanMetrics::new().unwrap();
        assert_eq!(m.figures().encode().unwrap(), "");
        m.observe_concurrent_run(1_700_000_000.0);
        let text = m.figures().encode().unwrap();
        assert_eq!(
            names(&text),
            ["stripe_reconciler_concurrent_run_timestamp_seconds"]
        );
        assert!(text.ends_with("stripe_reconciler_concurrent_run_timestamp_seconds 1700000000\n"));
    }
}
