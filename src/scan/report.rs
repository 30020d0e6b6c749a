//! Counters of a batch and of a run.

use serde::Serialize;

use crate::read::VerdictCounts;

/// What one batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BatchReport {
    /// Rows read from `payments` (0 for a wrap).
    pub scanned: u64,
    /// Of those, the cursor's rows (not the rows behind it): what the batch
    /// added to the cycle's rows done (`cycle_rows_done`, docs/keys.md).
    pub walked: u64,
    /// Rows per verdict.
    pub verdicts: VerdictCounts,
    /// Findings newly recorded (in a dry run: findings a real run would
    /// record, i.e. only those not already open).
    pub findings_created: u64,
    /// Repair commands enqueued (dry run: that would be enqueued).
    pub commands_enqueued: u64,
    /// Open findings resolved as `cleared` because the payment is now in sync.
    pub findings_cleared: u64,
    /// Open findings resolved as `payment_deleted`: the application deleted
    /// their payment.
    pub findings_payment_deleted: u64,
    /// Rows the database refused to write (each with a `write_refused` finding).
    pub writes_refused: u64,
    /// `pending` rows with no PaymentIntent id and no Checkout Session (a
    /// checkout never confirmed): nothing at Stripe to verify; counted, no
    /// finding (also counted `in_sync` in `verdicts`).
    pub pending_without_payment_intent: u64,
    /// The batch reached the end of the table (its rows were the last, or
    /// it read none) and reset the cursor to 0: the cycle ended.
    pub wrapped: bool,
    /// Cursor before the batch: its key when a whole number (integer keys),
    /// else 0, as at the cycle's start.
    pub cursor_from: i64,
    /// Cursor after the batch.
    pub cursor_to: i64,
    /// The key of the cursor after the batch (any key type, docs/keys.md);
    /// `None`: the cycle's start.
    pub cursor_key: Option<crate::key::PaymentKey>,
}

/// What a whole `run` did, also when it failed part-way.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunSummary {
    /// `RECONCILER_JOB`
    pub job: String,
    /// Nothing was written.
    pub dry_run: bool,
    /// Batches committed (a wrap counts as one).
    pub batches: u64,
    /// Rows read in committed batches.
    pub rows_scanned: u64,
    /// Rows per verdict in committed batches.
    pub verdicts: VerdictCounts,
    /// Findings newly recorded.
    pub findings_created: u64,
    /// Repair commands enqueued.
    pub commands_enqueued: u64,
    /// Findings cleared by a verified in-sync row.
    pub findings_cleared: u64,
    /// Open findings resolved as `payment_deleted` (their payment is gone).
    pub findings_payment_deleted: u64,
    /// Rows the database refused to write, left with a `write_refused`
    /// finding while the rest of their batch committed.
    pub writes_refused: u64,
    /// `pending` rows with no PaymentIntent id and no Checkout Session read
    /// in committed batches: checkouts never confirmed, nothing at Stripe to
    /// verify; counted, never a finding (gauge
    /// `stripe_reconciler_pending_without_payment_intent`).
    pub pending_without_payment_intent: u64,
    /// The cursor reached the end of the table during the run.
    pub wrapped: bool,
    /// Where the cursor is at the end of the run, read back from the
    /// database (also after a failure, which leaves it where the last
    /// committed batch put it); a dry run's in-memory position. `None` (JSON
    /// `null`) when it could not be read (database unreachable).
    pub cursor_position: Option<i64>,
    /// The cursor's key at the end of the run as text (`payments.id::text`,
    /// any key type); `null` at the cycle's start or when it could not be
    /// read. Added beside `cursor_position` (docs/keys.md), which holds only
    /// integer keys (0 at the start and for other key types).
    pub cursor_key: Option<crate::key::PaymentKey>,
    /// Wall time of the run, in seconds.
    pub duration_seconds: f64,
    /// How the run ended (see [`crate::outcome::RunError::outcome`]).
    pub outcome: crate::outcome::RunOutcome,
    /// Stripe requests the run sent, per endpoint (retries included).
    pub stripe_requests: crate::stripe::RequestCounts,
    /// Connected accounts found unreachable this run (no access: a 403 such
    /// as a revoked application; or every read a 404), whose rows stayed
    /// UNVERIFIABLE (docs/connect.md; gauge `stripe_accounts_unreachable`).
    pub stripe_accounts_unreachable: u64,
    /// The batches the run planned at its start and the cycle they lead to
    /// (docs/operations.md, "Sizing"); `None` when the run stopped before planning (lease lost).
    pub plan: Option<crate::capacity::RunPlan>,
}

impl crate::lifecycle::Ended for RunSummary {
    fn ended(&mut self, outcome: crate::outcome::RunOutcome, duration_seconds: f64) {
        self.outcome = outcome;
        self.duration_seconds = duration_seconds;
    }
}

impl RunSummary {
    /// Adds a committed batch.
    pub fn add_batch(&mut self, batch: &BatchReport) {
        self.batches += 1;
        self.rows_scanned += batch.scanned;
        self.verdicts.merge(&batch.verdicts);
        self.findings_created += batch.findings_created;
        self.commands_enqueued += batch.commands_enqueued;
        self.findings_cleared += batch.findings_cleared;
        self.findings_payment_deleted += batch.findings_payment_deleted;
        self.writes_refused += batch.writes_refused;
        self.pending_without_payment_intent += batch.pending_without_payment_intent;
        self.wrapped |= batch.wrapped;
        self.cursor_position = Some(batch.cursor_to);
        self.cursor_key = batch.cursor_key.clone();
    }
}
