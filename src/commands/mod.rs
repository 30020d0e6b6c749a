//! What each subcommand does. Each returns `Ok(())` or a [`CommandError`]
//! that knows its exit code (README.md, "Exit codes"); each layer's error
//! ([`LifecycleError`], [`MigrateError`], [`ReviewError`], ...) is mapped to
//! it here, at the command's edge; `main` logs the error once.

mod events;
mod findings;
mod migrate;
mod repair;
mod run;
mod status;

use crate::cli::Command;
use crate::config::Settings;
use crate::config::{ConfigError, ConnectError, GatewaySetupError};
use crate::db::DbError;
use crate::exit;
use crate::lifecycle::{JobFailure, LifecycleError};
use crate::migrate::MigrateError;
use crate::preflight::PreflightError;
use crate::review::ReviewError;
use crate::store::StoreError;
use crate::stripe::BuildError;

/// A pool and one connection from it, for the commands that read or write a
/// little (`status`, `findings`).
async fn connect(
    settings: &Settings,
) -> Result<(sqlx::PgPool, sqlx::pool::PoolConnection<sqlx::Postgres>), CommandError> {
    let pool = settings.database.connect().await?;
    let conn = pool.acquire().await.map_err(|source| {
        CommandError::Store(StoreError {
            action: "connecting",
            source,
        })
    })?;
    Ok((pool, conn))
}

/// Runs one subcommand.
///
/// # Errors
/// [`CommandError`], whose [`CommandError::exit_code`] is the process's.
pub async fn dispatch(command: Command, settings: Settings) -> Result<(), CommandError> {
    match command {
        Command::Migrate {
            unique_payment_intent_index,
        } => migrate::migrate(&settings, unique_payment_intent_index).await,
        Command::Run { dry_run, object } => run::run(&settings, dry_run, object).await,
        Command::Events => events::events(&settings).await,
        Command::Repair => repair::repair(&settings).await,
        Command::Status { json } => status::status(&settings, json).await,
        Command::Findings { command } => findings::findings(&settings, command).await,
    }
}

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
    /// A job's run stopped early (exit code per [`crate::lifecycle::Failure::exit_code`]).
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

impl From<LifecycleError> for CommandError {
    /// A scheduled job's command at the command's edge: the same exit codes
    /// ([`LifecycleError::exit_code`]).
    fn from(e: LifecycleError) -> Self {
        match e {
            LifecycleError::Config(e) => CommandError::Config(e),
            LifecycleError::Http(e) => CommandError::Http(e),
            LifecycleError::Db(e) => CommandError::Db(e),
            LifecycleError::Preflight(e) => e.into(),
            LifecycleError::Job(e) => CommandError::Job(e),
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
            CommandError::Job(e) => e.exit_code(),
            CommandError::Review(e) => e.exit_code(),
        }
    }
}
