//! How a run ends, for both jobs (the scan's `run` and `events`): the
//! [`RunOutcome`] label it reports, and the [`RunError`] that stopped it early.

use std::fmt;

use serde::Serialize;

use crate::exit;
use crate::store::StoreError;
use crate::stripe::GatewayError;

/// Every label a run can end with (run history `reconciliation_runs.outcome`,
/// the `run_outcome` gauge, the printed summary; README.md, "Exit codes").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum RunOutcome {
    /// Every batch it started committed. A summary is `Completed` until the
    /// run ends otherwise.
    #[default]
    Completed,
    /// Another run holds the lease or moved the cursor (exit 75).
    ConcurrentRun,
    /// Stripe refused the key, or the key is for another account (exit 78).
    StripeRejectedKey,
    /// Stripe did not answer most reads, nor a probe (exit 1).
    StripeDown,
    /// The database failed (exit 1).
    DatabaseError,
    /// SIGTERM/SIGINT (exit 1).
    Interrupted,
}

impl RunOutcome {
    /// Every outcome, in report order.
    pub const ALL: [RunOutcome; 6] = [
        RunOutcome::Completed,
        RunOutcome::ConcurrentRun,
        RunOutcome::StripeRejectedKey,
        RunOutcome::StripeDown,
        RunOutcome::DatabaseError,
        RunOutcome::Interrupted,
    ];

    /// The label as stored, pushed and printed.
    pub const fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Completed => "completed",
            RunOutcome::ConcurrentRun => "concurrent_run",
            RunOutcome::StripeRejectedKey => "stripe_rejected_key",
            RunOutcome::StripeDown => "stripe_down",
            RunOutcome::DatabaseError => "database_error",
            RunOutcome::Interrupted => "interrupted",
        }
    }
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for RunOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Compares with a label, as read back from JSON or the database.
impl PartialEq<&str> for RunOutcome {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Why a batch or a run (scan or events) stopped early. Each maps to an exit
/// code and an outcome label.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Another run moved the cursor or the events position (the
    /// compare-and-set hit no row); this batch was rolled back.
    #[error("another run moved the cursor of job {job:?}; this batch was rolled back")]
    ConcurrentRun {
        /// `RECONCILER_JOB` (`<RECONCILER_JOB>-events` for the events job).
        job: String,
    },
    /// Another run holds the lease: this run stopped before any batch and
    /// wrote nothing.
    #[error("another run holds the lease on job {job:?} (owner {owner}, expires {}); this run did nothing", expires_at.map_or_else(|| "now".to_owned(), |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))]
    LeaseHeld {
        /// `RECONCILER_JOB` (`<RECONCILER_JOB>-events` for the events job).
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

impl crate::store::retry::Transient for RunError {
    fn store_error(&self) -> Option<&StoreError> {
        match self {
            RunError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl RunError {
    /// The process exit code (README.md, "Exit codes").
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::ConcurrentRun { .. } | RunError::LeaseHeld { .. } => exit::CONCURRENT_RUN,
            RunError::StripeRejected(_) | RunError::StripeWrongAccount { .. } => exit::CONFIG,
            RunError::StripeDown { .. } | RunError::Store(_) | RunError::Interrupted => {
                exit::FAILURE
            }
        }
    }

    /// The run's outcome (logs, run history, metrics).
    pub fn outcome(&self) -> RunOutcome {
        match self {
            RunError::ConcurrentRun { .. } | RunError::LeaseHeld { .. } => {
                RunOutcome::ConcurrentRun
            }
            RunError::StripeRejected(_) | RunError::StripeWrongAccount { .. } => {
                RunOutcome::StripeRejectedKey
            }
            RunError::StripeDown { .. } => RunOutcome::StripeDown,
            RunError::Store(_) => RunOutcome::DatabaseError,
            RunError::Interrupted => RunOutcome::Interrupted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_has_its_own_label() {
        let labels: std::collections::HashSet<&str> =
            RunOutcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(labels.len(), RunOutcome::ALL.len());
        assert_eq!(
            serde_json::to_value(RunOutcome::ConcurrentRun).ok(),
            Some(serde_json::json!("concurrent_run"))
        );
    }
}
