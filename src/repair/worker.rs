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
use crate::reconcile::{RepairCommand, Resolution};
use crate::store::outbox::{self, ClaimedCommand};
use crate::store::{findings, payments};
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

/// The payload the reconciler writes (design note), plus the PaymentIntent
/// id the decision was made on (absent in commands enqueued by older
/// versions).
#[derive(Debug, Deserialize)]
struct RepairPayload {
    payment_id: i64,
    finding_id: i64,
    stripe_payment_intent_id: Option<String>,
}

/// What applying one command did.
enum Applied {
    Changed,
    NoOp,
    /// Closed without touching the payment, with the reason.
    Skipped(String),
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
                    match &applied {
                        Applied::Skipped(reason) => {
                            outbox::mark_skipped(&mut savepoint, command.id, reason).await?;
                        }
                        Applied::Changed | Applied::NoOp => {
                            outbox::mark_processed(&mut savepoint, command.id).await?;
                        }
                    }
                    savepoint.commit().await.context("releasing a savepoint")?;
                    match applied {
                        Applied::Changed => report.applied += 1,
                        Applied::NoOp => report.no_op += 1,
                        Applied::Skipped(_) => report.skipped += 1,
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

/// Applies one command after checking, with the payment locked first (the
/// one lock order: payment, then finding): the finding must exist, be about
/// the same payment and of the kind the command repairs. The command is
/// closed as skipped, with the reason, when its finding is already resolved,
/// when the payment no longer holds the PaymentIntent or the status the
/// decision was made on, or when an open finding of a blocking kind (a
/// refund, a dispute, a duplicate, ...) is on the payment: goods are never
/// released for money Stripe did not keep. `Err(reason)` for a failure to
/// record.
async fn process(
    conn: &mut sqlx::PgConnection,
    command: &ClaimedCommand,
) -> Result<Applied, String> {
    let db = |e: StoreError| format!("{e}: {}", e.source);
    let kind = RepairCommand::parse(&command.event_type)
        .ok_or_else(|| format!("unknown command {}", command.event_type))?;
    let payload: RepairPayload = serde_json::from_value(command.payload.clone())
        .map_err(|e| format!("malformed payload: {e}"))?;
    let payment = payments::lock_for_repair(conn, payload.payment_id)
        .await
        .map_err(db)?
        .ok_or_else(|| format!("payment {} does not exist", payload.payment_id))?;
    let finding = findings::lock_for_repair(conn, payload.finding_id)
        .await
        .map_err(db)?
        .ok_or_else(|| format!("finding {} does not exist", payload.finding_id))?;
    if finding.payment_id != Some(payload.payment_id)
        || finding.kind != kind.finding_kind().as_str()
    {
        return Err(format!(
            "finding {} is {} for payment {}, not {} for payment {}",
            payload.finding_id,
            finding.kind,
            finding
                .payment_id
                .map_or_else(|| "none".to_owned(), |p| p.to_string()),
            kind.finding_kind(),
            payload.payment_id
        ));
    }
    let skip = |reason: String| {
        tracing::info!(outbox_id = command.id, finding_id = payload.finding_id, %reason, "repair command skipped");
        Ok(Applied::Skipped(reason))
    };
    if !finding.open {
        return skip("finding already resolved".into());
    }
    if let Some(intent) = &payload.stripe_payment_intent_id {
        if payment.stripe_payment_intent_id.as_deref() != Some(intent.as_str()) {
            findings::resolve(conn, payload.finding_id, Resolution::Superseded)
                .await
                .map_err(db)?;
            return skip(format!(
                "payment {} no longer holds PaymentIntent {intent}",
                payload.payment_id
            ));
        }
    }
    let blocking = findings::blocked_payments(conn, &[payload.payment_id])
        .await
        .map_err(db)?;
    if !blocking.is_empty() {
        return skip(format!(
            "payment {} has an open finding that blocks repairs (refund, dispute, duplicate, mismatch or review); see `findings list`",
            payload.payment_id
        ));
    }
    // The expected status is the canonical writer's guard (`WHERE status =
    // 'pending'`): repaired when the payment already reached the target,
    // superseded when it moved elsewhere.
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
        Err(WriteError::Store(e)) => Err(db(e)),
    }
}
