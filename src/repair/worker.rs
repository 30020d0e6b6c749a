//! The outbox worker (`stripe-reconciler repair`): drains the two repair
//! command types through the canonical writer. The outbox may be shared with
//! the application, so no other event type is touched.
//!
//! Commands are claimed in chunks with `FOR UPDATE SKIP LOCKED` (so several
//! workers never take the same one); each is applied in a savepoint and marked
//! processed in the same transaction. A failing command (unknown payment,
//! malformed payload) rolls back its savepoint only, gets `attempts + 1` and
//! `last_error`, and is retried on later runs until `max_attempts`, after which
//! it is left for a person and counted as stuck.

use serde::{Deserialize, Serialize};
use sqlx::{Connection, PgPool};
use tokio_util::sync::CancellationToken;

use super::writer::{apply, WriteError};
use crate::reconcile::RepairCommand;
use crate::store::findings;
use crate::store::outbox::{self, ClaimedCommand};
use crate::store::{Context, StoreError};

/// The worker's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairOptions {
    /// Commands claimed per transaction.
    pub chunk: i64,
    /// Failed attempts after which a command is left for a person.
    pub max_attempts: i32,
}

/// Failed attempts after which a command is left for a person.
pub const MAX_ATTEMPTS: i32 = 5;

impl Default for RepairOptions {
    fn default() -> Self {
        RepairOptions {
            chunk: 100,
            max_attempts: MAX_ATTEMPTS,
        }
    }
}

/// What a drain did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RepairReport {
    /// Commands that changed a payment's status.
    pub applied: u64,
    /// Commands that found the payment already moved (processed, no change).
    pub no_op: u64,
    /// Commands whose finding was already resolved (by a person, or cleared by
    /// a scan): processed without touching the payment.
    pub skipped: u64,
    /// Attempts that failed in this drain (the commands stay in the outbox).
    pub failed: u64,
    /// Commands at `max_attempts`, left for a person (after this drain).
    pub stuck: i64,
}

/// The payload the reconciler writes (design note).
#[derive(Debug, Deserialize)]
struct RepairPayload {
    payment_id: i64,
    finding_id: i64,
}

/// What applying one command did.
enum Applied {
    Changed,
    NoOp,
    Skipped,
}

/// Drains the repair commands until none is claimable or `shutdown` fires.
///
/// # Errors
/// [`StoreError`] when the database fails outside a single command.
#[tracing::instrument(name = "repair", skip_all)]
pub async fn drain(
    pool: &PgPool,
    options: RepairOptions,
    shutdown: &CancellationToken,
) -> Result<RepairReport, StoreError> {
    let types = RepairCommand::EVENT_TYPES;
    let mut report = RepairReport::default();
    // Commands that failed in this drain are not claimed again by it.
    let mut failed_ids: Vec<i64> = Vec::new();
    while !shutdown.is_cancelled() {
        let mut conn = pool.acquire().await.context("connecting")?;
        let mut tx = crate::store::begin(&mut *conn)
            .await
            .context("opening the repair transaction")?;
        let claimed: Vec<ClaimedCommand> = outbox::claim(
            &mut tx,
            &types,
            options.max_attempts,
            &failed_ids,
            options.chunk,
        )
        .await?;
        if claimed.is_empty() {
            tx.commit()
                .await
                .context("closing the repair transaction")?;
            break;
        }
        // Payments in id order, like the scan's row locks: no deadlock between them.
        let mut claimed = claimed;
        claimed.sort_by_key(|c| {
            c.payload
                .get("payment_id")
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(i64::MAX)
        });
        for command in claimed {
            let mut savepoint = tx.begin().await.context("opening a savepoint")?;
            match process(&mut savepoint, &command).await {
                Ok(applied) => {
                    outbox::mark_processed(&mut savepoint, command.id).await?;
                    savepoint.commit().await.context("releasing a savepoint")?;
                    match applied {
                        Applied::Changed => report.applied += 1,
                        Applied::NoOp => report.no_op += 1,
                        Applied::Skipped => report.skipped += 1,
                    }
                }
                Err(error) => {
                    savepoint
                        .rollback()
                        .await
                        .context("rolling back a savepoint")?;
                    tracing::warn!(outbox_id = command.id, attempts = command.attempts + 1, %error, "repair command failed; kept for a later run");
                    outbox::record_failure(&mut tx, command.id, &error).await?;
                    failed_ids.push(command.id);
                    report.failed += 1;
                }
            }
        }
        tx.commit().await.context("committing repairs")?;
    }
    let mut conn = crate::store::begin(pool).await.context("connecting")?;
    report.stuck = outbox::count_stuck(&mut conn, &types, options.max_attempts).await?;
    if report.stuck > 0 {
        tracing::error!(stuck = report.stuck, "repair commands exhausted their attempts; a person must look at them (outbox.last_error)");
    }
    Ok(report)
}

/// Applies one command after checking its finding: it must exist, be about
/// the same payment and of the kind the command repairs. A finding already
/// resolved means the command is moot. `Err(reason)` for a failure to record.
async fn process(
    conn: &mut sqlx::PgConnection,
    command: &ClaimedCommand,
) -> Result<Applied, String> {
    let kind = RepairCommand::parse(&command.event_type)
        .ok_or_else(|| format!("unknown command {}", command.event_type))?;
    let payload: RepairPayload = serde_json::from_value(command.payload.clone())
        .map_err(|e| format!("malformed payload: {e}"))?;
    let finding = findings::lock_for_repair(conn, payload.finding_id)
        .await
        .map_err(|e| format!("{e}: {}", e.source))?
        .ok_or_else(|| format!("finding {} does not exist", payload.finding_id))?;
    if finding.payment_id != payload.payment_id || finding.kind != kind.finding_kind().as_str() {
        return Err(format!(
            "finding {} is {} for payment {}, not {} for payment {}",
            payload.finding_id,
            finding.kind,
            finding.payment_id,
            kind.finding_kind(),
            payload.payment_id
        ));
    }
    if !finding.open {
        tracing::info!(
            outbox_id = command.id,
            finding_id = payload.finding_id,
            "finding already resolved; command skipped"
        );
        return Ok(Applied::Skipped);
    }
    match apply(
        conn,
        kind,
        payload.payment_id,
        Some(payload.finding_id),
        "reconciler",
    )
    .await
    {
        Ok(outcome) if outcome.changed => Ok(Applied::Changed),
        Ok(_) => Ok(Applied::NoOp),
        Err(e @ WriteError::UnknownPayment(_)) => Err(e.to_string()),
        Err(WriteError::Store(e)) => Err(format!("{e}: {}", e.source)),
    }
}
