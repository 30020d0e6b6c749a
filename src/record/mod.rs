//! Phase 3's write path, one for the scan's batches and the events job:
//! what a read of Stripe observed becomes stamps, findings and repair
//! commands, inside the caller's write transaction (which also moves the
//! caller's cursor or position). Lock order: payments, findings, outbox.
//!
//! - [`rows`]: the rows phase 3 writes for, locked and demoted when they
//!   changed meanwhile, and the finding each records.
//! - [`isolate`]: savepoints and bisection, so a row the database refuses
//!   to write gets a `write_refused` finding instead of failing the batch.
//! - `set`: phase 3's statements over one set of rows, and [`Target`] and
//!   [`Recorded`], where they write and what they wrote.

pub mod isolate;
pub mod rows;
mod set;

use crate::key::KeyType;
use crate::outcome::RunError;
use crate::read::Observation;
use sqlx::Connection;

use crate::reconcile::{Decision, FindingKind};
use crate::store::findings;
use crate::store::refusal::FailureClass;
use crate::store::{Context, StoreError};
use isolate::Refusal;
pub use rows::new_finding;
use rows::writes_for;
pub use set::{Recorded, Target};

/// Records what phase 2 observed, inside the caller's transaction `tx`,
/// the same for a scan batch and an events run: locks the
/// payments (demoting rows that changed meanwhile), records in the
/// reconciler's own `reconciliation_payment_state` every row read and, for
/// rows Stripe answered, `observed_external_status`/`last_reconciled_at`
/// (never an UPDATE of `payments`: docs/design.md, "Invariants"),
/// resolves stale findings with their commands, counts UNVERIFIABLE rows
/// against `target.job`'s cycle, upserts findings once per open (payment, kind),
/// and enqueues one command per open repairable finding without a live one
/// and not blocked. Returns what it created, cleared, enqueued and refused.
///
/// A row whose write the database refuses (a trigger, a constraint, a lock
/// or statement timeout; [`isolate`]) gets nothing written but a
/// `write_refused` finding, recorded after the other rows, and its
/// observation becomes NEEDS_REVIEW; the rest of the batch is written.
///
/// # Errors
/// [`RunError::Store`] when the database as a whole fails. A batch refused
/// as a whole is such a failure too: when phase 3 writes for two or more
/// rows and every one of them is refused, the refusal is taken to be the
/// database's, not the rows' (a trigger refusing every update, a lock on the
/// table), and the caller rolls back; the run exits 1 and the next run
/// retries the same rows.
pub async fn record_observations(
    tx: &mut sqlx::PgConnection,
    target: Target<'_>,
    observations: &mut [Observation],
) -> Result<Recorded, RunError> {
    let writing: Vec<usize> = (0..observations.len())
        .filter(|&i| writes_for(&observations[i]))
        .collect();
    let writing_rows = writing.len();
    let (mut recorded, refused) =
        isolate::record_isolating(tx, target, observations, writing).await?;
    if refused.is_empty() {
        return Ok(recorded);
    }
    if writing_rows >= 2 && refused.len() == writing_rows {
        return Err(whole_batch_refused(refused, observations));
    }
    recorded.writes_refused = refused.len() as u64;
    recorded.findings_created += record_refusals(tx, target.key, &refused, observations).await?;
    Ok(recorded)
}

/// The error of a batch whose every row was refused (see
/// [`record_observations`]): the first refusal's driver error.
fn whole_batch_refused(refused: Vec<Refusal>, observations: &[Observation]) -> RunError {
    let rows = refused.len();
    let mut refused = refused.into_iter();
    let first = refused.next();
    tracing::error!(
        rows,
        first_payment_id = first
            .as_ref()
            .map(|r| observations[r.index].payment_id.to_string()),
        "the database refused the write of every row of the batch: not a row's problem"
    );
    match first {
        Some(first) => RunError::Store(StoreError {
            action: "writing a batch the database refused for every row",
            source: first.error.source,
        }),
        None => RunError::Store(StoreError {
            action: "writing a batch the database refused for every row",
            source: sqlx::Error::Protocol("no refusal recorded".into()),
        }),
    }
}

/// Turns each refused row into NEEDS_REVIEW `write_refused` (not stamped,
/// nothing else written for it) and records the findings, after the rows
/// that were written: the findings are our table's rows, so an
/// application's trigger on `payments` cannot refuse them. Returns how many
/// were new.
///
/// A finding references its payment, so PostgreSQL checks the reference
/// with a `FOR KEY SHARE` row lock: while someone holds the row `FOR
/// UPDATE`, even the finding must wait. It is recorded under a savepoint,
/// and when that is refused for a row-level reason too the row is only
/// logged and counted: the next cycle tries it again.
async fn record_refusals(
    tx: &mut sqlx::PgConnection,
    key: &KeyType,
    refused: &[Refusal],
    observations: &mut [Observation],
) -> Result<u64, RunError> {
    let mut wanted = Vec::with_capacity(refused.len());
    for r in refused {
        let o = &mut observations[r.index];
        tracing::warn!(
            payment_id = %o.payment_id,
            write = r.write.as_str(),
            sqlstate = %r.sqlstate,
            message = %r.message,
            "the database refused this row's write; recorded as write_refused, batch committed without it"
        );
        let details = serde_json::json!({
            "sqlstate": r.sqlstate,
            "message": r.message,
            "write": r.write.as_str(),
            "observed_external_status": o.observed.as_ref().map(|s| s.as_str().to_owned()),
        });
        o.decision = Decision::review_with(FindingKind::WriteRefused, details);
        o.observed = None;
        wanted.extend(new_finding(o));
    }
    let mut created = 0;
    for finding in &wanted {
        let mut savepoint = tx.begin().await.context("opening a savepoint")?;
        match findings::upsert_open(&mut savepoint, key, std::slice::from_ref(finding)).await {
            Ok(touched) => {
                savepoint.commit().await.context("releasing a savepoint")?;
                created += touched.iter().filter(|f| f.created).count() as u64;
            }
            Err(e) if FailureClass::of_store(&e) != FailureClass::WholeDatabase => {
                savepoint
                    .rollback()
                    .await
                    .context("rolling back to a savepoint")?;
                tracing::warn!(
                    payment_id = %finding.payment_id,
                    error = %e.source,
                    "could not record write_refused for this row either (its row is locked against references); the next cycle tries again"
                );
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(created)
}
