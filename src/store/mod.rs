//! All SQL of the reconciler, one file per table. Functions take a
//! `&mut PgConnection` (a pooled connection or an open transaction) so the
//! caller decides the transaction boundaries.

pub mod cursor;
pub mod findings;
pub mod outbox;
pub mod payments;
pub mod runs;
pub mod payment_index;
pub mod stats;
pub mod unverifiable;

/// A database operation failed. `action` says which, for the log line.
#[derive(Debug, thiserror::Error)]
#[error("database error while {action}")]
pub struct StoreError {
    /// What was being done, e.g. "reading the batch".
    pub action: &'static str,
    /// The driver's error.
    #[source]
    pub source: sqlx::Error,
}

/// Attaches an action to a sqlx error.
pub(crate) trait Context<T> {
    fn context(self, action: &'static str) -> Result<T, StoreError>;
}

impl<T> Context<T> for Result<T, sqlx::Error> {
    fn context(self, action: &'static str) -> Result<T, StoreError> {
        self.map_err(|source| StoreError { action, source })
    }
}
