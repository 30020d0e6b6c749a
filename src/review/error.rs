//! [`ReviewError`]: why a review step failed, and its exit code.

use crate::exit;
use crate::store::StoreError;

/// Why `findings list|show|resolve` failed.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// A database failure (exit 1).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The command line is wrong in a way clap cannot see, e.g. an empty
    /// note or an unreadable file (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The request was refused and nothing changed (exit 65), e.g. resolving
    /// a finding that is already resolved.
    #[error("{0}")]
    Refused(String),
    /// The output could not be serialised or written (exit 1).
    #[error("cannot serialise the output")]
    Output(#[from] serde_json::Error),
}

impl ReviewError {
    /// The process exit code (docs/design.md, "Exit codes").
    pub fn exit_code(&self) -> u8 {
        match self {
            ReviewError::Store(_) | ReviewError::Output(_) => exit::FAILURE,
            ReviewError::Usage(_) => exit::USAGE,
            ReviewError::Refused(_) => exit::REFUSED,
        }
    }
}

impl From<csv::Error> for ReviewError {
    /// A CSV that cannot be written to stdout: an output failure.
    fn from(e: csv::Error) -> Self {
        ReviewError::Output(serde_json::Error::io(std::io::Error::other(e.to_string())))
    }
}
