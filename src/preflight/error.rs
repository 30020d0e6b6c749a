//! [`PreflightError`]: why a start-up check refused to go on, and its exit
//! code (docs/schema.md).

use crate::config::ConfigError;
use crate::exit;
use crate::store::StoreError;

/// Why the start-up checks refused: a setting or the schema does not fit
/// (exit 78, naming what to fix), or the database failed (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// A setting does not fit the schema, or the schema does not fit the
    /// reconciler (exit 78).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The database failed while checking (exit 1).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl PreflightError {
    /// The process exit code (README.md, "Exit codes").
    pub fn exit_code(&self) -> u8 {
        match self {
            PreflightError::Config(_) => exit::CONFIG,
            PreflightError::Store(_) => exit::FAILURE,
        }
    }
}
