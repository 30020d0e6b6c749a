//! What each subcommand does. Each returns `Ok(())` or a [`CommandError`]
//! that knows its exit code; `main` logs the error once.

mod events;
mod findings;
mod migrate;
mod partition;
mod repair;
mod review;
mod run;
mod status;

use crate::cli::{Command, FindingsCommand};
use crate::config::{ConfigError, Settings};
use crate::db::DbError;
use crate::events::EventsError;
use crate::exit;
use crate::metrics;
use crate::outcome::{RunError, RunOutcome};
use crate::store::StoreError;
use crate::stripe::BuildError;
use url::Url;

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
    /// The command line is wrong in a way clap cannot see, e.g. an empty
    /// note (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The request was refused and nothing changed (exit 65), e.g. resolving
    /// a finding that is already resolved.
    #[error("{0}")]
    Refused(String),
    /// The output could not be serialised (exit 1).
    #[error("cannot serialise the output")]
    Output(#[from] serde_json::Error),
    /// The run stopped early (exit code per [`RunError::exit_code`]).
    #[error(transparent)]
    Scan(#[from] RunError),
    /// The events run stopped early (exit code per [`EventsError::exit_code`]).
    #[error(transparent)]
    Events(#[from] EventsError),
}

impl CommandError {
    /// The process exit code (DESIGN.md, Interface).
    pub fn exit_code(&self) -> u8 {
        match self {
            CommandError::Config(_) => exit::CONFIG,
            CommandError::Db(_)
            | CommandError::Http(_)
            | CommandError::Store(_)
            | CommandError::Output(_) => exit::FAILURE,
            CommandError::Usage(_) => exit::USAGE,
            CommandError::Refused(_) => exit::REFUSED,
            CommandError::Scan(e) => e.exit_code(),
            CommandError::Events(e) => e.exit_code(),
        }
    }
}

/// A pool and one connection from it, for the commands that read or write a
/// little (`status`, `findings`).
async fn connect(
    settings: &Settings,
) -> Result<(sqlx::PgPool, sqlx::pool::PoolConnection<sqlx::Postgres>), CommandError> {
    let pool = crate::db::connect(settings.connect_options()?).await?;
    let conn = pool.acquire().await.map_err(|source| {
        CommandError::Store(StoreError {
            action: "connecting",
            source,
        })
    })?;
    Ok((pool, conn))
}

/// How a run's figures are pushed, decided the same way for the scan and the
/// events job: a run that lost the lease to another run replaces its group
/// with only the concurrent-run mark (labelled `outcome="concurrent_run"`);
/// otherwise PUT replaces the whole group when the database's state was read
/// (`has_state`), and POST merges only the run's own figures when it was not
/// (the database is down), so the last known lag, findings and last success
/// stay in place and keep their alerts firing.
fn push_plan(
    outcome: RunOutcome,
    has_state: bool,
) -> (&'static [(&'static str, &'static str)], metrics::PushMethod) {
    const CONCURRENT: [(&str, &str); 1] = [("outcome", RunOutcome::ConcurrentRun.as_str())];
    match (outcome, has_state) {
        (RunOutcome::ConcurrentRun, _) => (&CONCURRENT, metrics::PushMethod::Replace),
        (_, true) => (&[], metrics::PushMethod::Replace),
        (_, false) => (&[], metrics::PushMethod::Merge),
    }
}

/// Now as Unix seconds (the push's timestamps); 0 for a clock before 1970.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Encodes `figures` and pushes them to the Pushgateway at `base` under
/// `job=<job>` (plus `extra` labels), within [`metrics::PUSH_TIMEOUT`]. Never fails:
/// a push that cannot be made is logged at error level and changes nothing
/// else (the run's result and exit code stand).
pub(super) async fn push_or_log(
    base: Url,
    figures: &metrics::RunMetrics,
    job: &str,
    extra: &[(&str, &str)],
    method: metrics::PushMethod,
) {
    let pushed = match (figures.encode(), metrics::Pusher::new(base)) {
        (Ok(body), Ok(pusher)) => {
            tokio::time::timeout(metrics::PUSH_TIMEOUT, pusher.push(job, extra, method, body))
                .await
                .unwrap_or(Err(metrics::PushError::Timeout))
        }
        (Err(e), _) => Err(e.into()),
        (_, Err(e)) => Err(e),
    };
    match pushed {
        Ok(()) => tracing::info!(group = %job, "metrics pushed"),
        Err(e) => {
            let report = anyhow::Error::new(e);
            tracing::error!(
                error = format!("{report:#}"),
                "cannot push metrics; the run's result is unchanged"
            );
        }
    }
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
        Command::Findings {
            command:
                FindingsCommand::List {
                    kind,
                    open,
                    json,
                    csv,
                    limit,
                    dashboard,
                },
        } => {
            let query = findings::ListQuery {
                kind: kind.as_deref(),
                open,
                limit,
            };
            if csv {
                return review::list_csv(&settings, query, dashboard).await;
            }
            findings::list(&settings, query, json, dashboard).await
        }
        Command::Findings {
            command: FindingsCommand::Show(args),
        } => review::show(&settings, &args).await,
        Command::Findings {
            command:
                FindingsCommand::Resolve {
                    file: Some(file),
                    by,
                    dry_run,
                    ..
                },
        } => review::resolve_file(&settings, &file, by.as_deref(), dry_run).await,
        Command::Findings {
            command: FindingsCommand::Resolve { id, note, by, .. },
        } => {
            // clap requires both without --file.
            let (Some(id), Some(note)) = (id, note) else {
                return Err(CommandError::Usage(
                    "give ID --note NOTE, or --file PATH".into(),
                ));
            };
            findings::resolve(&settings, id, &note, by.as_deref()).await
        }
    }
}
