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

impl Default for RepairOptions {
    fn default() -> Self {
        RepairOptions {
            chunk: 100,
            max_attempts: 5,
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
    /// Attempts that failed in this drain (the commands stay in the outbox).
    pub failed: u64,
    /// Commands at `max_attempts`, left for a person (after this drain).
    pub stuck: i64,
}

/// The payload the reconciler writes (design note).
#[derive(Debug, Deserialize)]
struct RepairPayload {
    payment_id: i64,
    finding_id: Option<i64>,
}

fn event_types() -> Vec<&'static str> {
    RepairCommand::ALL.iter().map(|c| c.as_str()).collect()
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
    let types = event_types();
    let mut report = RepairReport::default();
    // Commands that failed in this drain are not claimed again by it.
    let mut failed_ids: Vec<i64> = Vec::new();
    while !shutdown.is_cancelled() {
        let mut conn = pool.acquire().await.context("connecting")?;
        let mut tx = conn
            .begin()
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
        for command in claimed {
            let mut savepoint = tx.begin().await.context("opening a savepoint")?;
            match process(&mut savepoint, &command).await {
                Ok(changed) => {
                    outbox::mark_processed(&mut savepoint, command.id).await?;
                    savepoint.commit().await.context("releasing a savepoint")?;
                    if changed {
                        report.applied += 1
                    } else {
                        report.no_op += 1
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
    let mut conn = pool.acquire().await.context("connecting")?;
    report.stuck = outbox::count_stuck(&mut conn, &types, options.max_attempts).await?;
    if report.stuck > 0 {
        tracing::error!(stuck = report.stuck, "repair commands exhausted their attempts; a person must look at them (outbox.last_error)");
    }
    Ok(report)
}

/// Applies one command. `Ok(changed)`; `Err(reason)` for a failure to record.
async fn process(conn: &mut sqlx::PgConnection, command: &ClaimedCommand) -> Result<bool, String> {
    let kind = RepairCommand::parse(&command.event_type)
        .ok_or_else(|| format!("unknown command {}", command.event_type))?;
    let payload: RepairPayload = serde_json::from_value(command.payload.clone())
        .map_err(|e| format!("malformed payload: {e}"))?;
    match apply(
        conn,
        kind,
        payload.payment_id,
        payload.finding_id,
        "reconciler",
    )
    .await
    {
        Ok(outcome) => Ok(outcome.changed),
        Err(e @ WriteError::UnknownPayment(_)) => Err(e.to_string()),
        Err(WriteError::Store(e)) => Err(format!("{e}: {}", e.source)),
    }
}
