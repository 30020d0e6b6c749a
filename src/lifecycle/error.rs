//! [`LifecycleError`]: why a scheduled job's command stopped, and its exit
//! code; [`Failure`], what a job's error tells the command (README.md,
//! "Exit codes").

use crate::config::{ConfigError, ConnectError, GatewaySetupError};
use crate::db::DbError;
use crate::exit;
use crate::outcome::RunError;
use crate::preflight::PreflightError;
use crate::stripe::BuildError;

/// Why a scheduled job's command stopped.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// No Stripe key, or a malformed setting (exit 78).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The HTTP client could not be built (exit 1).
    #[error(transparent)]
    Http(#[from] BuildError),
    /// The database could not be reached (exit 1).
    #[error(transparent)]
    Db(#[from] DbError),
    /// The start-up checks refused (exit 78) or the database failed (exit 1).
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// The job's run stopped early (exit code per [`Failure::exit_code`]).
    #[error(transparent)]
    Job(#[from] JobFailure),
}

impl From<ConnectError> for LifecycleError {
    /// The pool could not be opened: a database failure (exit 1).
    fn from(e: ConnectError) -> Self {
        LifecycleError::Db(DbError::Open(e))
    }
}

impl From<GatewaySetupError> for LifecycleError {
    /// No key (exit 78) or no HTTP client (exit 1).
    fn from(e: GatewaySetupError) -> Self {
        match e {
            GatewaySetupError::Config(e) => LifecycleError::Config(e),
            GatewaySetupError::Http(e) => LifecycleError::Http(e),
        }
    }
}

impl LifecycleError {
    /// The process exit code (README.md, "Exit codes").
    pub fn exit_code(&self) -> u8 {
        match self {
            LifecycleError::Config(_) => exit::CONFIG,
            LifecycleError::Http(_) | LifecycleError::Db(_) => exit::FAILURE,
            LifecycleError::Preflight(e) => e.exit_code(),
            LifecycleError::Job(e) => e.exit_code(),
        }
    }
}

/// A job's error as the command sees it: its message and causes, and the
/// exit code it maps to.
pub trait Failure: std::error::Error + Send + Sync + 'static {
    /// The process exit code (README.md, "Exit codes").
    fn exit_code(&self) -> u8;
}

impl Failure for RunError {
    fn exit_code(&self) -> u8 {
        RunError::exit_code(self)
    }
}

/// The error that stopped a job's run, whatever the job: it reads as the
/// job's own error (same message, same causes).
#[derive(Debug)]
pub struct JobFailure(Box<dyn Failure>);

impl JobFailure {
    /// `error` as the command's failure.
    pub fn new(error: impl Failure) -> Self {
        JobFailure(Box::new(error))
    }

    /// The process exit code ([`Failure::exit_code`]).
    pub fn exit_code(&self) -> u8 {
        self.0.exit_code()
    }
}

impl std::fmt::Display for JobFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for JobFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    /// Every message of `e`'s chain, as `main` reports it.
    fn chain(e: &dyn std::error::Error) -> Vec<String> {
        std::iter::successors(Some(e), |e| e.source())
            .map(ToString::to_string)
            .collect()
    }

    /// The job errors compared: with a cause, with fields, a config fault.
    fn job_error(which: usize) -> RunError {
        match which {
            0 => RunError::Store(StoreError {
                action: "reading the batch",
                source: sqlx::Error::PoolTimedOut,
            }),
            1 => RunError::LeaseHeld {
                job: "payments-vs-stripe".into(),
                owner: "host:1:abc".into(),
                expires_at: None,
            },
            _ => RunError::StripeWrongAccount { not_found: 20 },
        }
    }

    #[test]
    fn a_job_failure_reads_as_the_jobs_own_error_with_its_exit_code() {
        for which in 0..3 {
            let own = job_error(which);
            let failure = LifecycleError::from(JobFailure::new(job_error(which)));
            assert_eq!(chain(&failure), chain(&own));
            assert_eq!(failure.exit_code(), own.exit_code());
        }
        assert_eq!(chain(&job_error(0)).len(), 2, "the cause is kept");
    }
}
