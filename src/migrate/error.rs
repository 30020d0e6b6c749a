//! [`MigrateError`]: why `migrate` stopped, and its exit code.

use crate::db::DbError;
use crate::exit;
use crate::preflight::PreflightError;
use crate::store::StoreError;

/// Why `migrate` stopped. What it created before stays (each step is safe
/// to run again; docs/schema.md, "What `migrate` creates").
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The schema or a setting does not fit (exit 78), or the database
    /// failed while checking (exit 1).
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// The embedded migrations failed (exit 1).
    #[error(transparent)]
    Db(#[from] DbError),
    /// A statement of a step failed (exit 1).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl MigrateError {
    /// The process exit code (README.md, "Exit codes").
    pub fn exit_code(&self) -> u8 {
        match self {
            MigrateError::Preflight(e) => e.exit_code(),
            MigrateError::Db(_) | MigrateError::Store(_) => exit::FAILURE,
        }
    }
}
