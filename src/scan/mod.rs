//! The scan: one batch ([`batch`]) and the run loop over batches ([`run`]).

pub mod batch;
pub mod detect;
pub mod list;
pub mod progress;
pub mod report;
pub mod run;

pub use batch::{record_observations, run_batch, run_batch_until, stripe_reachable, Lease, Mode};
pub use report::{BatchReport, RunSummary, VerdictCounts};
pub use run::{run, RunOptions};

use crate::exit;
use crate::store::StoreError;
use crate::stripe::GatewayError;

/// Why a batch or a run stopped early. Each maps to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// Another run moved the cursor (the compare-and-set hit no row); this
    /// batch was rolled back.
    #[error("another run moved the cursor of job {job:?}; this batch was rolled back")]
    ConcurrentRun {
        /// `RECONCILER_JOB`
        job: String,
    },
    /// Another run holds the cursor lease: this run stopped before any
    /// batch and wrote nothing.
    #[error("another run holds the lease on job {job:?} (owner {owner}, expires {}); this run did nothing", expires_at.map_or_else(|| "now".to_owned(), |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))]
    LeaseHeld {
        /// `RECONCILER_JOB`
        job: String,
        /// The holder's `lease_owner` (`host:pid:random`).
        owner: String,
        /// When the holder's lease expires unless renewed (UTC).
        expires_at: Option<chrono::DateTime<chrono::Utc>>,
    },
    /// Stripe rejected the key (401/403) or the URL (a 404 that is not
    /// `resource_missing`): a configuration fault.
    #[error("Stripe rejected the request; nothing was written for this batch")]
    StripeRejected(#[source] GatewayError),
    /// Every read answered 404 and none found a PaymentIntent: the key is for
    /// another account or mode (test vs live). Nothing was written.
    #[error("{not_found} PaymentIntents in a row are unknown to Stripe and none was found: STRIPE_API_KEY is probably for another account or mode (test vs live); nothing was written for this batch")]
    StripeWrongAccount {
        /// 404 answers before the batch stopped.
        not_found: usize,
    },
    /// Most reads of a batch failed after retries; the batch was abandoned
    /// without moving the cursor.
    #[error("Stripe unreachable: {failed} of {asked} reads in the batch failed; batch abandoned, cursor not moved")]
    StripeDown {
        /// Reads that ended UNVERIFIABLE.
        failed: usize,
        /// Reads attempted.
        asked: usize,
    },
    /// A database failure.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// SIGTERM/SIGINT: the batch in progress was abandoned (nothing written).
    #[error("interrupted by a shutdown signal; the batch in progress was abandoned")]
    Interrupted,
}

impl ScanError {
    /// The process exit code (DESIGN.md, Interface).
    pub fn exit_code(&self) -> u8 {
        match self {
            ScanError::ConcurrentRun { .. } | ScanError::LeaseHeld { .. } => exit::CONCURRENT_RUN,
            ScanError::StripeRejected(_) | ScanError::StripeWrongAccount { .. } => exit::CONFIG,
            ScanError::StripeDown { .. } | ScanError::Store(_) | ScanError::Interrupted => {
                exit::FAILURE
            }
        }
    }

    /// The run's outcome label (logs, run history, metrics).
    pub fn outcome(&self) -> &'static str {
        match self {
            ScanError::ConcurrentRun { .. } | ScanError::LeaseHeld { .. } => "concurrent_run",
            ScanError::StripeRejected(_) | ScanError::StripeWrongAccount { .. } => {
                "stripe_rejected_key"
            }
            ScanError::StripeDown { .. } => "stripe_down",
            ScanError::Store(_) => "database_error",
            ScanError::Interrupted => "interrupted",
        }
    }
}
