//! Retrying a whole transaction that PostgreSQL chose as the victim of a
//! race (concurrent jobs on one database never fail on a deadlock or a
//! serialization failure: docs/scan.md, "Guards"). PostgreSQL's own advice for SQLSTATE 40P01
//! (`deadlock_detected`) and 40001 (`serialization_failure`) is to run the
//! transaction again (PostgreSQL manual, 13.6 "Serialization Failure
//! Handling"); the writers take their locks in one order (payment ids
//! ascending), so a race is rare and a retry wins it.
//!
//! A caller rolls its transaction back (dropping it does), asks [`again`]
//! with the error and the attempt number, and runs the transaction again
//! from its start when told to: every statement of the attempt is redone,
//! nothing of the failed attempt is kept.

use std::time::Duration;

use super::refusal::FailureClass;
use super::StoreError;

/// Attempts of one transaction in all (the first and the retries). Each race
/// has one victim, so a transaction that loses five in a row is contending
/// with something that will not let go: the error is then the caller's.
pub const ATTEMPTS: u32 = 5;

/// The pause before retry `n` (1-based): 20 ms × n plus up to 20 ms of
/// jitter, so two jobs that deadlocked do not meet again in step.
fn pause(attempt: u32) -> Duration {
    Duration::from_millis(20 * u64::from(attempt) + fastrand::u64(0..20))
}

/// An error that may be a lost race.
pub trait Transient {
    /// The database error under it, when there is one.
    fn store_error(&self) -> Option<&StoreError>;
}

impl Transient for StoreError {
    fn store_error(&self) -> Option<&StoreError> {
        Some(self)
    }
}

/// Whether `error` is a deadlock or a serialization failure (40P01, 40001).
pub fn is_transient(error: &StoreError) -> bool {
    FailureClass::of_store(error) == FailureClass::Transient
}

/// Whether the transaction that failed with `error` on attempt `attempt`
/// (1-based) should run again: a deadlock or a serialization failure before
/// [`ATTEMPTS`] attempts. Logs each retry (`what` names the transaction) and
/// waits a short, jittered pause before returning `true`.
pub async fn again<E: Transient>(error: &E, attempt: u32, what: &'static str) -> bool {
    let Some(store) = error.store_error().filter(|e| is_transient(e)) else {
        return false;
    };
    if attempt >= ATTEMPTS {
        tracing::warn!(
            attempts = attempt,
            transaction = what,
            error = %store.source,
            "lost a race with another transaction on every attempt; giving up"
        );
        return false;
    }
    tracing::info!(
        attempt,
        of = ATTEMPTS,
        transaction = what,
        action = store.action,
        error = %store.source,
        "the database chose this transaction as the victim of a race (deadlock or serialization failure); running it again"
    );
    tokio::time::sleep(pause(attempt)).await;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_and_stay_short() {
        for attempt in 1..ATTEMPTS {
            let p = pause(attempt);
            assert!(p >= Duration::from_millis(20 * u64::from(attempt)));
            assert!(p < Duration::from_millis(20 * u64::from(attempt) + 20));
        }
    }

    #[tokio::test]
    async fn only_races_are_retried() {
        let other = StoreError {
            action: "reading the batch",
            source: sqlx::Error::RowNotFound,
        };
        assert!(!again(&other, 1, "a batch").await);
    }
}
