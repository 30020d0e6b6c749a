//! The scan run's own figures (docs/operations.md, "Metrics"), from the
//! [`ScanFigures`] the scan job fills.

use prometheus::Registry;

use super::gauge::{Figure, Labelled};
use crate::capacity::RunPlan;
use crate::outcome::RunOutcome;
use crate::reconcile::Verdict;
use crate::stripe::RequestCounts;

/// What a scan run pushes, filled by the scan job from its summary.
#[derive(Debug, Clone, Default)]
pub struct ScanFigures {
    /// Wall time of the run, in seconds.
    pub duration_seconds: f64,
    /// How the run ended.
    pub outcome: RunOutcome,
    /// Rows read from `payments`.
    pub rows_scanned: u64,
    /// Batches committed (a wrap counts as one).
    pub batches: u64,
    /// Findings newly recorded.
    pub findings_created: u64,
    /// Repair commands enqueued.
    pub commands_enqueued: u64,
    /// Whether the run reached the end of the table.
    pub wrapped: bool,
    /// Rows per verdict, every verdict listed.
    pub verdicts: Vec<(Verdict, u64)>,
    /// Stripe requests the run sent, per endpoint.
    pub stripe_requests: RequestCounts,
    /// Connected accounts the run could not read.
    pub accounts_unreachable: u64,
    /// Pending rows with no PaymentIntent id and no Checkout Session to
    /// verify: counted, not flagged (docs/scan.md).
    pub pending_without_payment_intent: u64,
    /// The cursor as the run left it (`payments.id`), when it was read.
    pub cursor_position: Option<i64>,
    /// The run's plan, when it was made.
    pub plan: Option<RunPlan>,
}

/// `rows_scanned`, `batches`, `findings_created`, `commands_enqueued`,
/// `wrapped`, `verdicts{verdict}`, `stripe_requests{endpoint}`, and the
/// run's plan: `planned_batches`, `target_cycle_seconds`, and
/// `stripe_accounts_unreachable` (no per-account label: the accounts are in
/// the log and the findings; docs/connect.md).
pub(super) struct ScanGauges {
    planned_batches: Figure,
    target_cycle: Figure,
    rows_scanned: Figure,
    batches: Figure,
    findings_created: Figure,
    commands_enqueued: Figure,
    wrapped: Figure,
    verdicts: Labelled,
    stripe_requests: Labelled,
    accounts_unreachable: Figure,
    pending_without_payment_intent: Figure,
}

/// `stripe_reconciler_pending_without_payment_intent`: its name and help.
const PENDING: (&str, &str) = (
    "pending_without_payment_intent",
    "Pending payments the last run read with no PaymentIntent id and no Checkout Session (checkouts never confirmed): nothing at Stripe to verify, counted, no finding.",
);

impl ScanGauges {
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(ScanGauges {
            planned_batches: Figure::register(
                registry,
                "planned_batches",
                "Batches the last run planned at its start (RECONCILER_BATCHES_PER_RUN, or sized by auto).",
            )?,
            target_cycle: Figure::register(
                registry,
                "target_cycle_seconds",
                "RECONCILER_TARGET_CYCLE_SECONDS: the cycle time auto plans for.",
            )?,
            rows_scanned: Figure::register(
                registry,
                "rows_scanned",
                "Rows read from payments by the last run.",
            )?,
            batches: Figure::register(
                registry,
                "batches",
                "Batches committed by the last run (a wrap counts as one).",
            )?,
            findings_created: Figure::register(
                registry,
                "findings_created",
                "Findings newly recorded by the last run.",
            )?,
            commands_enqueued: Figure::register(
                registry,
                "commands_enqueued",
                "Repair commands enqueued by the last run.",
            )?,
            wrapped: Figure::register(
                registry,
                "wrapped",
                "1 if the last run reached the end of the table.",
            )?,
            verdicts: Labelled::register(
                registry,
                "verdicts",
                "Rows per verdict in the last run.",
                "verdict",
            )?,
            stripe_requests: Labelled::register(
                registry,
                "stripe_requests",
                "Stripe requests sent by the last run, per endpoint (retries included).",
                "endpoint",
            )?,
            accounts_unreachable: Figure::register(
                registry,
                "stripe_accounts_unreachable",
                "Connected accounts the last run could not read (no access, or every read a 404); their rows stayed UNVERIFIABLE.",
            )?,
            pending_without_payment_intent: Figure::register(registry, PENDING.0, PENDING.1)?,
        })
    }

    pub(super) fn observe(&self, s: &ScanFigures) {
        if let Some(p) = &s.plan {
            self.planned_batches.set(f64::from(p.batches));
            self.target_cycle.set(p.target_cycle_seconds);
        }
        self.rows_scanned.set(s.rows_scanned as f64);
        self.batches.set(s.batches as f64);
        self.findings_created.set(s.findings_created as f64);
        self.commands_enqueued.set(s.commands_enqueued as f64);
        self.wrapped.set(f64::from(u8::from(s.wrapped)));
        for (v, rows) in &s.verdicts {
            self.verdicts.set(v.as_str(), *rows as f64);
        }
        for (endpoint, n) in s.stripe_requests.by_endpoint() {
            self.stripe_requests.set(endpoint, n as f64);
        }
        self.accounts_unreachable.set(s.accounts_unreachable as f64);
        self.pending_without_payment_intent
            .set(s.pending_without_payment_intent as f64);
    }
}
