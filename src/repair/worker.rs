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

use sqlx::{Connection, PgPool};
use tokio_util::sync::CancellationToken;

use super::command::{process, Applied};
pub use super::error::RepairError;
pub use super::options::{RepairOptions, RepairReport, MAX_ATTEMPTS};
use crate::config::StatusMap;
use crate::key::{KeyType, PaymentKey};
use crate::reconcile::RepairCommand;
use crate::store::outbox::{self, ClaimedCommand};
use crate::store::subscriptions::APPLY_SUBSCRIPTION_STATE;
use crate::store::{Context, StoreError};

/// Drains the repair commands until none is claimable or `shutdown` fires,
/// writing the design note's own status words (the default
/// `RECONCILER_LOCAL_STATUSES`; [`drain_with`] takes the application's).
///
/// # Errors
/// [`StoreError`] when the database fails outside a single command.
pub async fn drain(
    pool: &PgPool,
    options: RepairOptions,
    shutdown: &CancellationToken,
) -> Result<RepairReport, StoreError> {
    drain_with(pool, options, &StatusMap::default(), shutdown).await
}

/// [`drain`] in the words of `statuses` (`RECONCILER_LOCAL_STATUSES`): the
/// canonical writer writes the first word of the target state and guards on
/// any word of `pending`.
///
/// # Errors
/// [`StoreError`] when the database fails outside a single command.
#[tracing::instrument(name = "repair", skip_all)]
pub async fn drain_with(
    pool: &PgPool,
    options: RepairOptions,
    statuses: &StatusMap,
    shutdown: &CancellationToken,
) -> Result<RepairReport, StoreError> {
    let types = claimed_types(&options);
    let mut report = RepairReport::default();
    // Commands that failed in this drain are not claimed again by it.
    let mut failed_ids: Vec<i64> = Vec::new();
    while !shutdown.is_cancelled() {
        let mut conn = pool.acquire().await.context("connecting")?;
        let mut tx = crate::store::begin(&mut *conn)
            .await
            .context("opening the repair transaction")?;
        crate::store::set_local_time_zone(&mut tx, &options.timestamp_zone).await?;
        let claimed: Vec<ClaimedCommand> = outbox::claim(
            &mut tx,
            &options.outbox,
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
            let key = c.payload.get("payment_id").and_then(PaymentKey::from_json);
            let number = key.as_ref().and_then(PaymentKey::as_i64);
            (number.is_none(), number, key)
        });
        let key = crate::store::keys::current(&mut tx).await?;
        for command in claimed {
            let failed =
                apply_one(&mut tx, (&options, &key), &command, statuses, &mut report).await?;
            if failed {
                failed_ids.push(command.id);
            }
        }
        tx.commit().await.context("committing repairs")?;
    }
    let mut conn = crate::store::begin(pool).await.context("connecting")?;
    report.stuck =
        outbox::count_stuck(&mut conn, &options.outbox, &types, options.max_attempts).await?;
    if report.stuck > 0 {
        tracing::error!(stuck = report.stuck, "repair commands exhausted their attempts; a person must look at them (outbox.last_error)");
    }
    Ok(report)
}

/// Applies one claimed command under its own savepoint and marks it
/// processed or skipped, counting it in `report`; a command that fails is
/// rolled back to its savepoint and its failure recorded. Returns whether
/// it failed (not claimed again by this drain).
///
/// # Errors
/// [`StoreError`] when the database fails outside the command itself.
async fn apply_one(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    (options, key): (&RepairOptions, &KeyType),
    command: &ClaimedCommand,
    statuses: &StatusMap,
    report: &mut RepairReport,
) -> Result<bool, StoreError> {
    let outbox_settings = &options.outbox;
    let mut savepoint = tx.begin().await.context("opening a savepoint")?;
    let result = match (&options.subscriptions, command.event_type.as_str()) {
        (Some(table), APPLY_SUBSCRIPTION_STATE) => {
            super::subscription::process(&mut savepoint, table, command).await
        }
        _ => process(&mut savepoint, (options, key), command, statuses).await,
    };
    match result {
        Ok(applied) => {
            match &applied {
                Applied::Skipped(reason) => {
                    outbox::mark_skipped(&mut savepoint, outbox_settings, command.id, reason)
                        .await?;
                }
                Applied::Changed | Applied::NoOp => {
                    outbox::mark_processed(&mut savepoint, outbox_settings, command.id).await?;
                }
            }
            savepoint.commit().await.context("releasing a savepoint")?;
            match applied {
                Applied::Changed => report.applied += 1,
                Applied::NoOp => report.no_op += 1,
                Applied::Skipped(_) => report.skipped += 1,
            }
            Ok(false)
        }
        Err(error) => {
            savepoint
                .rollback()
                .await
                .context("rolling back a savepoint")?;
            let last_error = error.last_error();
            tracing::warn!(outbox_id = command.id, attempts = command.attempts + 1, error = %last_error, "repair command failed; kept for a later run");
            outbox::record_failure(tx, outbox_settings, command.id, &last_error).await?;
            report.failed += 1;
            Ok(true)
        }
    }
}

/// The command types a drain claims: the payment commands, and
/// `ApplySubscriptionState` only when the subscriptions table is configured
/// (otherwise they wait for a `repair` that can check them).
fn claimed_types(options: &RepairOptions) -> Vec<&'static str> {
    RepairCommand::EVENT_TYPES
        .into_iter()
        .chain(
            options
                .subscriptions
                .is_some()
                .then_some(APPLY_SUBSCRIPTION_STATE),
        )
        .collect()
}
