//! The two gauge shapes every group is built from. Both are `GaugeVec`s
//! registered once, when their group is built: a vec without children is left
//! out of the gather, so a figure that was never set (no run history yet,
//! database down) is absent from the push, not 0. The Pushgateway's POST
//! merge relies on that to keep the last known state in place.

use prometheus::{GaugeVec, Opts, Registry};

/// Every metric's name starts with `stripe_reconciler_` (docs/operations.md, "Metrics").
const NAMESPACE: &str = "stripe_reconciler";

fn register(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<GaugeVec, prometheus::Error> {
    let vec = GaugeVec::new(Opts::new(name, help).namespace(NAMESPACE), labels)?;
    registry.register(Box::new(vec.clone()))?;
    Ok(vec)
}

/// A gauge without labels, pushed once it has a value.
pub(super) struct Figure(GaugeVec);

impl Figure {
    /// Registers `stripe_reconciler_<name>`.
    ///
    /// # Errors
    /// [`prometheus::Error`] for an invalid or already registered name.
    pub(super) fn register(
        registry: &Registry,
        name: &str,
        help: &str,
    ) -> Result<Self, prometheus::Error> {
        register(registry, name, help, &[]).map(Figure)
    }

    pub(super) fn set(&self, value: f64) {
        set(&self.0, &[], value);
    }
}

/// A gauge with one label; each label value is pushed once it has a value.
/// Values are `&'static str` from an enum or a fixed list, so the label's
/// cardinality stays bounded.
pub(super) struct Labelled(GaugeVec);

impl Labelled {
    /// Registers `stripe_reconciler_<name>{<label>}`.
    ///
    /// # Errors
    /// [`prometheus::Error`] for an invalid or already registered name.
    pub(super) fn register(
        registry: &Registry,
        name: &str,
        help: &str,
        label: &str,
    ) -> Result<Self, prometheus::Error> {
        register(registry, name, help, &[label]).map(Labelled)
    }

    pub(super) fn set(&self, label_value: &'static str, value: f64) {
        set(&self.0, &[label_value], value);
    }
}

fn set(vec: &GaugeVec, label_values: &[&str], value: f64) {
    // Only a label count other than the one registered fails, and both
    // shapes above fix it.
    match vec.get_metric_with_label_values(label_values) {
        Ok(gauge) => gauge.set(value),
        Err(e) => tracing::error!(error = %e, "cannot set metric"),
    }
}
