//! The job's state as gauges (docs/operations.md, "Metrics"), from [`Status`].

use prometheus::Registry;

use super::gauge::{Figure, Labelled};
use crate::capacity::{Capacity, RunPlan};
use crate::reconcile::open_findings_by_label;
use crate::status::Status;

/// Lag, cycle, cursor, table size, outbox backlog, capacity and
/// `open_findings{kind}`.
pub(super) struct StatusGauges {
    lag: Figure,
    cycle_last_completed: Figure,
    cycle_age: Figure,
    cycle_progress: Figure,
    cursor_position: Figure,
    payments_rows: Figure,
    outbox_pending: Figure,
    outbox_oldest_pending_age: Figure,
    capacity_ratio: Figure,
    expected_cycle: Figure,
    scanned_rows_per_hour: Figure,
    new_rows_per_hour: Figure,
    last_success: Figure,
    open_findings: Labelled,
}

impl StatusGauges {
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let figure = |name, help| Figure::register(registry, name, help);
        Ok(StatusGauges {
            lag: figure(
                "lag_seconds",
                "Reconciliation lag: oldest time since a payment was last confirmed with Stripe.",
            )?,
            cycle_last_completed: figure(
                "cycle_last_completed_timestamp_seconds",
                "When the cursor last reached the end of the table (Unix time).",
            )?,
            cycle_age: figure("cycle_age_seconds", "Age of the current cycle.")?,
            cycle_progress: figure(
                "cycle_progress_ratio",
                "Share of the id range behind the cursor (0 to 1).",
            )?,
            cursor_position: figure(
                "cursor_position",
                "The cursor: last payments.id scanned in this cycle.",
            )?,
            payments_rows: figure(
                "payments_rows",
                "Rows in payments (planner estimate on large tables).",
            )?,
            outbox_pending: figure("outbox_pending", "Repair commands not yet processed.")?,
            outbox_oldest_pending_age: figure(
                "outbox_oldest_pending_age_seconds",
                "Age of the oldest unprocessed repair command (0 when none).",
            )?,
            capacity_ratio: figure(
                "capacity_ratio",
                "B*R/G: rows scanned per hour over new rows per hour (+Inf when none arrive).",
            )?,
            expected_cycle: figure(
                "expected_cycle_seconds",
                "Expected cycle time N/(B*R-G); absent when B*R <= G.",
            )?,
            scanned_rows_per_hour: figure(
                "scanned_rows_per_hour",
                "B*R measured from the job's run history.",
            )?,
            new_rows_per_hour: figure(
                "new_rows_per_hour",
                "G: new payments per hour measured from the run history.",
            )?,
            last_success: figure(
                "last_success_timestamp_seconds",
                "When a run last completed (Unix time).",
            )?,
            open_findings: Labelled::register(
                registry,
                "open_findings",
                "Open findings per kind (bounded label values).",
                "kind",
            )?,
        })
    }

    /// The cursor as the run left it (`payments.id`); the state, when it is
    /// read afterwards, overwrites it.
    pub(super) fn observe_cursor(&self, position: i64) {
        self.cursor_position.set(position as f64);
    }

    /// The run's plan against the measured capacity (docs/operations.md, "Sizing (`auto`)"): a plan that
    /// cannot meet the target pulls `capacity_ratio` below 1 (its planned
    /// over needed rows), so the capacity alert fires; its expected cycle
    /// stands in while the history has none.
    pub(super) fn observe_plan(&self, p: &RunPlan, measured: Option<&Capacity>) {
        if measured.and_then(|c| c.expected_cycle_seconds).is_none() {
            if let Some(e) = p.expected_cycle_seconds {
                self.expected_cycle.set(e);
            }
        }
        if p.shortfall.is_some() {
            let ratio = measured.map_or(f64::INFINITY, |c| c.ratio);
            self.capacity_ratio.set(ratio.min(p.target_ratio));
        }
    }

    /// The state; a figure that is `None` (no run history yet, or no backlog
    /// of ours in a `debezium` or `plain` outbox) stays absent, so no alert reads a
    /// wrong 0 (README, "Your schema").
    pub(super) fn observe(&self, st: &Status) {
        self.lag.set(st.lag_seconds);
        self.observe_cursor(st.cursor_position);
        self.cycle_progress.set(st.cycle_progress_percent / 100.0);
        self.payments_rows.set(st.rows);
        if let Some(n) = st.outbox_pending {
            self.outbox_pending.set(n as f64);
        }
        if let Some(age) = st.outbox_oldest_pending_seconds {
            self.outbox_oldest_pending_age.set(age);
        }
        if let Some(age) = st.cycle_age_seconds {
            self.cycle_age.set(age);
        }
        if let Some(t) = st.cycle_last_completed_unix {
            self.cycle_last_completed.set(t);
        }
        if let Some(t) = st.last_success_unix {
            self.last_success.set(t);
        }
        if let Some(c) = &st.capacity {
            self.capacity_ratio.set(c.ratio);
            self.scanned_rows_per_hour.set(c.scanned_rows_per_hour);
            self.new_rows_per_hour.set(c.new_rows_per_hour);
            if let Some(e) = c.expected_cycle_seconds {
                self.expected_cycle.set(e);
            }
        }
        // Bounded labels: undocumented statuses collapse onto `unknown` /
        // `other` and their counts are summed (the raw kinds stay in the rows).
        let by_kind: Vec<(&String, i64)> = st.open_findings.iter().map(|(k, n)| (k, *n)).collect();
        for (kind, n) in open_findings_by_label(&by_kind) {
            self.open_findings.set(kind, n as f64);
        }
    }

    /// The state of a job over another object (the subscriptions scan):
    /// its lag (absent before any row was confirmed), its open findings by
    /// kind and its pending repair commands (absent for a relayed outbox).
    pub(super) fn observe_object(
        &self,
        lag_seconds: Option<f64>,
        open_findings: &[(String, i64)],
        outbox_pending: Option<i64>,
    ) {
        if let Some(lag) = lag_seconds {
            self.lag.set(lag);
        }
        if let Some(n) = outbox_pending {
            self.outbox_pending.set(n as f64);
        }
        for (kind, n) in open_findings_by_label(open_findings) {
            self.open_findings.set(kind, n as f64);
        }
    }
}
