//! What each subcommand does. Each returns `Ok(())` or a [`CommandError`]
//! that knows its exit code; `main` logs the error once.

mod events;
mod findings;
mod migrate;
mod repair;
mod run;
mod status;

use crate::cli::Command;
use crate::config::Settings;
pub use crate::lifecycle::CommandError;
use crate::store::StoreError;

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
        Command::Run { dry_run } => run::run(&settings, dry_run).await,
        Command::Events => events::events(&settings).await,
        Command::Repair => repair::repair(&settings).await,
        Command::Status { json } => status::status(&settings, json).await,
        Command::Findings { command } => findings::findings(&settings, command).await,
    }
}
