//! No single row can fail a batch (docs/design.md, "Invariants"; docs/scan.md,
//! "Guards"): phase 3's
//! set-based statements run under a savepoint; when the database refuses
//! them for a reason that lives in the rows ([`FailureClass::PerRow`]), the
//! savepoint is rolled back and the rows are bisected, each half under its
//! own savepoint, until the refused rows stand alone. Transient failures
//! (serialization, deadlock) are retried a bounded number of times first.
//! When nothing fails, a batch costs one savepoint more than before.

use sqlx::Connection;

use super::set::{record_set, Failed, Recorded, Target};
use crate::outcome::RunError;
use crate::read::Observation;
use crate::store::refusal::{sqlstate_and_message, FailureClass};
use crate::store::{Context, StoreError};

/// Retries of a set of rows after a serialization failure or a deadlock,
/// before it is bisected like any refused set. Three: PostgreSQL picks one
/// victim per race, so a set that loses three times in a row is contending
/// with something that will not let go.
pub const TRANSIENT_RETRIES: u32 = 3;

/// Refusals after a wait (a lock held past `lock_timeout`, a statement cut
/// off by `statement_timeout`) one batch may isolate. Each costs a full
/// timeout, and a lock on the whole table (a `CREATE INDEX` holding `SHARE`
/// on `payments`) would make every attempt of the bisection wait: past this
/// many, the batch's refusal is the database's and the run fails (exit 1).
/// Sixteen: about two locked rows of a 200-row batch.
pub const MAX_TIMEOUT_REFUSALS: u32 = 16;

pub use super::set::Write;

/// One row whose write the database refused, alone under its savepoint.
#[derive(Debug)]
pub struct Refusal {
    /// Index of the row in the observations.
    pub index: usize,
    /// The write that was refused.
    pub write: Write,
    /// The SQLSTATE (`P0001`, `55P03`, ...).
    pub sqlstate: String,
    /// PostgreSQL's message (a trigger's `RAISE` text).
    pub message: String,
    /// The driver's error, kept for a batch refused as a whole.
    pub error: StoreError,
}

enum Attempt {
    Written(Recorded),
    Refused(Failed),
}

/// Records the rows of `observations` at `indices` with `record_set`,
/// isolating refused rows by bisection. Rows written are committed to `conn`
/// (their savepoints released), in id order, so the lock order holds across
/// halves. Returns what was written and the refusals, in id order.
///
/// # Errors
/// [`RunError::Store`] for a [`FailureClass::WholeDatabase`] failure, or
/// when a savepoint cannot be opened, released or rolled back.
pub(super) async fn record_isolating(
    conn: &mut sqlx::PgConnection,
    target: Target<'_>,
    observations: &mut [Observation],
    indices: Vec<usize>,
) -> Result<(Recorded, Vec<Refusal>), RunError> {
    let mut recorded = Recorded::default();
    let mut refused = Vec::new();
    // A stack, lower half on top: parts are written in id order.
    let mut parts = vec![indices];
    let mut timeouts = 0;
    while let Some(part) = parts.pop() {
        if part.is_empty() {
            continue;
        }
        let failed = match attempt(conn, target, observations, &part).await? {
            Attempt::Written(r) => {
                recorded.add(&r);
                continue;
            }
            Attempt::Refused(failed) => failed,
        };
        if FailureClass::after_a_wait(&failed.error.source) {
            timeouts += 1;
            if timeouts > MAX_TIMEOUT_REFUSALS {
                tracing::error!(
                    timeouts,
                    "the batch keeps waiting out the timeout: a lock on the table, not a row"
                );
                return Err(failed.error.into());
            }
        }
        if let [index] = part[..] {
            let (sqlstate, message) = sqlstate_and_message(&failed.error.source)
                .unwrap_or_else(|| (String::new(), failed.error.source.to_string()));
            refused.push(Refusal {
                index,
                write: failed.write,
                sqlstate,
                message,
                error: failed.error,
            });
        } else {
            let (low, high) = part.split_at(part.len() / 2);
            parts.push(high.to_vec());
            parts.push(low.to_vec());
        }
    }
    Ok((recorded, refused))
}

/// One savepoint over the rows at `part`, retried on transient failures.
/// Writes the rows' observations back only when the savepoint is released,
/// so a rolled-back attempt leaves no trace in memory either.
async fn attempt(
    conn: &mut sqlx::PgConnection,
    target: Target<'_>,
    observations: &mut [Observation],
    part: &[usize],
) -> Result<Attempt, RunError> {
    let mut retries = 0;
    loop {
        let mut subset: Vec<Observation> = part.iter().map(|&i| observations[i].clone()).collect();
        let mut savepoint = conn.begin().await.context("opening a savepoint")?;
        match record_set(&mut savepoint, target, &mut subset).await {
            Ok(recorded) => {
                savepoint.commit().await.context("releasing a savepoint")?;
                for (&i, o) in part.iter().zip(subset) {
                    observations[i] = o;
                }
                return Ok(Attempt::Written(recorded));
            }
            Err(failed) => {
                savepoint
                    .rollback()
                    .await
                    .context("rolling back to a savepoint")?;
                match FailureClass::of_store(&failed.error) {
                    FailureClass::WholeDatabase => return Err(failed.error.into()),
                    FailureClass::Transient if retries < TRANSIENT_RETRIES => {
                        retries += 1;
                        tracing::info!(
                            rows = part.len(),
                            retries,
                            write = failed.write.as_str(),
                            "phase 3 lost a race (serialization or deadlock); retrying"
                        );
                    }
                    FailureClass::Transient | FailureClass::PerRow => {
                        tracing::info!(
                            rows = part.len(),
                            write = failed.write.as_str(),
                            error = %failed.error.source,
                            "the database refused a write for some of these rows; isolating them"
                        );
                        return Ok(Attempt::Refused(failed));
                    }
                }
            }
        }
    }
}
