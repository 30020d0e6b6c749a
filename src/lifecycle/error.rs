//! [`CommandError`]: why a subcommand failed, and its exit code; [`Failure`],
//! what a job's error tells the command (README.md, "Exit codes").

use crate::config::{ConfigError, ConnectError, GatewaySetupError};
use crate::db::DbError;
use crate::exit;
use crate::migrate::MigrateError;
use crate::outcome::RunError;
use crate::preflight::PreflightError;
use crate::review::ReviewError;
use crate::store::StoreError;
use crate::stripe::BuildError;

/// Why a subcommand failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// A missing or malformed setting (exit 78).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The database could not be reached or migrated (exit 1).
    #[error(transparent)]
    Db(#[from] DbError),
    /// The HTTP client could not be built (exit 1).
    #[error(transparent)]
    Http(#[from] BuildError),
    /// A database failure outside a run (exit 1).
    #[error(transparent)]
    Store(StoreError),
    /// The output could not be serialised (exit 1).
    #[error("cannot serialise the output")]
    Output(#[from] serde_json::Error),
    /// A job's run stopped early (exit code per [`Failure::exit_code`]).
    #[error(transparent)]
    Job(#[from] JobFailure),
    /// `findings list|show|resolve` failed, its command line included
    /// (exit code per [`ReviewError::exit_code`]).
    #[error(transparent)]
    Review(#[from] ReviewError),
}

impl From<ConnectError> for CommandError {
    /// The pool could not be opened: a database failure (exit 1).
    fn from(e: ConnectError) -> Self {
        CommandError::Db(DbError::Open(e))
    }
}

impl From<GatewaySetupError> for CommandError {
    /// No key (exit 78) or no HTTP client (exit 1).
    fn from(e: GatewaySetupError) -> Self {
        match e {
            GatewaySetupError::Config(e) => CommandError::Config(e),
            GatewaySetupError::Http(e) => CommandError::Http(e),
        }
    }
}

impl From<PreflightError> for CommandError {
    /// A setting or the schema does not fit (exit 78), or the database
    /// failed (exit 1).
    fn from(e: PreflightError) -> Self {
        match e {
            PreflightError::Config(e) => CommandError::Config(e),
            PreflightError::Store(e) => CommandError::Store(e),
        }
    }
}

impl From<MigrateError> for CommandError {
    /// `migrate`'s error at the command's edge: the same exit codes
    /// ([`MigrateError::exit_code`]).
    fn from(e: MigrateError) -> Self {
        match e {
            MigrateError::Preflight(e) => e.into(),
            MigrateError::Db(e) => CommandError::Db(e),
            MigrateError::Store(e) => CommandError::Store(e),
        }
    }
}

impl CommandError {
    /// The process exit code (README.md, "Exit codes").
    pub fn exit_code(&self) -> u8 {
        match self {
            CommandError::Config(_) => exit::CONFIG,
            CommandError::Db(_)
            | CommandError::Http(_)
            | CommandError::Store(_)
            | CommandError::Output(_) => exit::FAILURE,
            CommandError::Job(e) => e.0.exit_code(),
            CommandError::Review(e) => e.exit_code(),
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
