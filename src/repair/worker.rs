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

use super::writer::{apply, fill_session_payment_intent, WriteError};
use crate::config::{ColumnName, OutboxSettings, StatusMap, TimestampZone};
use crate::key::{KeyType, PaymentKey};
use crate::reconcile::{FindingKind, RepairCommand, Resolution, PAYMENT_DELETED_NOTE};
use crate::store::outbox::{self, ClaimedCommand};
use crate::store::{findings, payments};
use crate::store::{Context, StoreError};

/// The worker's limits and the outbox it drains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairOptions {
    /// `RECONCILER_OUTBOX_TABLE`/`RECONCILER_OUTBOX_SHAPE`; only a
    /// `reconciler`-shaped outbox is drained.
    pub outbox: OutboxSettings,
    /// Commands claimed per transaction.
    pub chunk: i64,
    /// Failed attempts after which a command is left for a person.
    pub max_attempts: i32,
    /// `RECONCILER_CHECKOUT_SESSION_COLUMN`: a command for a payment judged
    /// by its Checkout Session is applied only while the payment still
    /// names that session (issue 32); without it such a command is skipped.
    pub checkout_session_column: Option<ColumnName>,
    /// `RECONCILER_TIMESTAMP_ZONE`: the canonical writer's `updated_at =
    /// now()` is stored in this zone when `payments.updated_at` is a
    /// `timestamp without time zone` (each transaction's `TimeZone` is set
    /// to it, `SET LOCAL`); an instant (`timestamptz`) is unaffected.
    pub timestamp_zone: TimestampZone,
}

/// Failed attempts after which a command is left for a person.
pub const MAX_ATTEMPTS: i32 = 5;

impl Default for RepairOptions {
    fn default() -> Self {
        RepairOptions {
            outbox: OutboxSettings::default(),
            chunk: 100,
            max_attempts: MAX_ATTEMPTS,
            checkout_session_column: None,
            timestamp_zone: TimestampZone::default(),
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
    /// A number (integer keys) or a string (docs/keys.md).
    #[serde(deserialize_with = "payment_key")]
    payment_id: PaymentKey,
    finding_id: i64,
    stripe_payment_intent_id: Option<String>,
    /// A payment judged by its Checkout Session (issue 32).
    checkout_session_id: Option<String>,
}

/// The payload's `payment_id`: a number (integer keys, as before issue 31)
/// or a non-empty string (uuid, text keys).
fn payment_key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<PaymentKey, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    PaymentKey::from_json(&value).ok_or_else(|| {
        serde::de::Error::custom("payment_id is neither a whole number nor a string")
    })
}

/// Why one repair command could not be applied. The command stays in the
/// outbox for a later run; [`RepairError::last_error`] is the text written
/// into `outbox.last_error`.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// The `event_type` is none of [`RepairCommand::EVENT_TYPES`].
    #[error("unknown command {0}")]
    UnknownCommand(String),
    /// The payload is not `{"payment_id": .., "finding_id": ..}`.
    #[error("malformed payload")]
    MalformedPayload(#[source] serde_json::Error),
    /// No payment has the payload's `payment_id`.
    #[error("payment {0} does not exist")]
    UnknownPayment(PaymentKey),
    /// No finding has the payload's `finding_id`.
    #[error("finding {0} does not exist")]
    UnknownFinding(i64),
    /// The finding is about another payment, or of a kind the command does
    /// not repair.
    #[error(
        "finding {finding_id} is {kind} for payment {}, not {expected} for payment {payment_id}",
        finding_payment.as_ref().map_or_else(|| "none".to_owned(), |p| p.to_string())
    )]
    WrongFinding {
        /// The payload's `finding_id`.
        finding_id: i64,
        /// The finding's kind, as stored.
        kind: String,
        /// The payment the finding is about (`None`: a PaymentIntent alone).
        finding_payment: Option<Box<str>>,
        /// The kind the command repairs.
        expected: FindingKind,
        /// The payload's `payment_id` (its text).
        payment_id: Box<str>,
    },
    /// `RECONCILER_LOCAL_STATUSES` has no word for a state the command
    /// needs.
    #[error("RECONCILER_LOCAL_STATUSES has no word for {0}")]
    NoWord(crate::reconcile::LocalStatus),
    /// The database failed inside the command's savepoint.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl RepairError {
    /// The text for `outbox.last_error`: the error and its direct cause
    /// (the driver's or JSON parser's message), so a person reading the
    /// outbox sees what failed without the logs.
    pub fn last_error(&self) -> String {
        match std::error::Error::source(self) {
            Some(cause) => format!("{self}: {cause}"),
            None => self.to_string(),
        }
    }
}

impl From<WriteError> for RepairError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::UnknownPayment(id) => RepairError::UnknownPayment(id),
            WriteError::NoWord(state) => RepairError::NoWord(state),
            WriteError::Store(e) => RepairError::Store(e),
        }
    }
}

/// What applying one command did.
enum Applied {
    Changed,
    NoOp,
    /// Closed without touching the payment, with the reason.
    Skipped(String),
}

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
    let types = RepairCommand::EVENT_TYPES;
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
    match process(&mut savepoint, (options, key), command, statuses).await {
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

/// Applies one command after checking, with the payment locked first (the
/// one lock order: payment, then finding): the finding must exist, be about
/// the same payment and of the kind the command repairs. The command is
/// closed as skipped, with the reason, when the application deleted the
/// payment (its finding resolved as `payment_deleted`), when its finding is already resolved,
/// when the payment no longer holds the PaymentIntent or the status the
/// decision was made on, or when an open finding of a blocking kind (a
/// refund, a dispute, a duplicate, ...) is on the payment: goods are never
/// released for money Stripe did not keep.
///
/// # Errors
/// [`RepairError`] when the command cannot be applied (it is kept for a
/// later run).
async fn process(
    conn: &mut sqlx::PgConnection,
    (options, key): (&RepairOptions, &KeyType),
    command: &ClaimedCommand,
    statuses: &StatusMap,
) -> Result<Applied, RepairError> {
    let outbox = &options.outbox;
    let kind = RepairCommand::parse(&command.event_type)
        .ok_or_else(|| RepairError::UnknownCommand(command.event_type.clone()))?;
    let payload: RepairPayload =
        serde_json::from_value(command.payload.clone()).map_err(RepairError::MalformedPayload)?;
    let session_column = options.checkout_session_column.as_ref();
    let Some(payment) =
        payments::lock_for_repair(conn, key, &payload.payment_id, session_column).await?
    else {
        return payment_deleted(conn, command, &payload).await;
    };
    let finding = findings::lock_for_repair(conn, payload.finding_id)
        .await?
        .ok_or(RepairError::UnknownFinding(payload.finding_id))?;
    if finding.payment_id.as_ref() != Some(&payload.payment_id)
        || finding.kind != kind.finding_kind().as_str()
    {
        return Err(RepairError::WrongFinding {
            finding_id: payload.finding_id,
            kind: finding.kind,
            finding_payment: finding.payment_id.map(|k| k.as_str().into()),
            expected: kind.finding_kind(),
            payment_id: payload.payment_id.as_str().into(),
        });
    }
    let skip = |reason: String| {
        tracing::info!(outbox_id = command.id, finding_id = payload.finding_id, %reason, "repair command skipped");
        Ok(Applied::Skipped(reason))
    };
    if !finding.open {
        return skip("finding already resolved".into());
    }
    if let Some(reason) = moved(&payload, &payment, session_column.is_some()) {
        findings::resolve(conn, payload.finding_id, Resolution::Superseded).await?;
        return skip(reason);
    }
    let payment_ids = std::slice::from_ref(&payload.payment_id);
    if !findings::blocked_payments(conn, key, payment_ids)
        .await?
        .is_empty()
    {
        return skip(format!(
            "payment {} has an open finding that blocks repairs (refund, dispute, duplicate, mismatch or review); see `findings list`",
            payload.payment_id
        ));
    }
    // A payment judged by its Checkout Session gets its PaymentIntent id
    // (only while still empty), then the status change. The expected status
    // is the canonical writer's guard (`WHERE status = ANY(<the words of
    // pending>)`): repaired when the payment already reached the target,
    // superseded when it moved elsewhere.
    if let (Some(_), Some(intent)) = (
        &payload.checkout_session_id,
        &payload.stripe_payment_intent_id,
    ) {
        fill_session_payment_intent(conn, &payload.payment_id, intent).await?;
    }
    let finding = Some(payload.finding_id);
    let outcome = apply(
        conn,
        outbox,
        statuses,
        kind,
        &payload.payment_id,
        finding,
        "reconciler",
    )
    .await?;
    Ok(if outcome.changed {
        Applied::Changed
    } else {
        Applied::NoOp
    })
}

/// The application deleted the payment (DESIGN.md, Turn 4): nothing to
/// repair; its finding closes as `payment_deleted`.
async fn payment_deleted(
    conn: &mut sqlx::PgConnection,
    command: &ClaimedCommand,
    payload: &RepairPayload,
) -> Result<Applied, RepairError> {
    findings::resolve(conn, payload.finding_id, Resolution::PaymentDeleted).await?;
    tracing::info!(
        outbox_id = command.id,
        finding_id = payload.finding_id,
        payment_id = %payload.payment_id,
        "repair command skipped: the payment was deleted"
    );
    Ok(Applied::Skipped(PAYMENT_DELETED_NOTE.to_owned()))
}

/// Why the payment no longer holds what the command's decision was made
/// on (`None`: it does): its PaymentIntent or, for a payment judged by its
/// Checkout Session (issue 32), its session with no other PaymentIntent.
fn moved(
    payload: &RepairPayload,
    payment: &payments::PaymentForRepair,
    session_column: bool,
) -> Option<String> {
    if payload.checkout_session_id.is_some() {
        return session_moved(payload, payment, session_column);
    }
    let intent = payload.stripe_payment_intent_id.as_deref()?;
    (payment.stripe_payment_intent_id.as_deref() != Some(intent)).then(|| {
        format!(
            "payment {} no longer holds PaymentIntent {intent}",
            payload.payment_id
        )
    })
}

/// Why a command for a payment judged by its Checkout Session no longer
/// fits the payment (`None`: it fits, or the command is a PaymentIntent
/// row's): the payment names another session (or the column is not
/// configured, so it cannot be told), or holds another PaymentIntent.
fn session_moved(
    payload: &RepairPayload,
    payment: &payments::PaymentForRepair,
    column_configured: bool,
) -> Option<String> {
    let session = payload.checkout_session_id.as_deref()?;
    let id = &payload.payment_id;
    if !column_configured {
        return Some(format!(
            "the command names Checkout Session {session} but RECONCILER_CHECKOUT_SESSION_COLUMN is not set: payment {id} cannot be checked against it"
        ));
    }
    if payment.checkout_session_id.as_deref().map(str::trim) != Some(session) {
        return Some(format!(
            "payment {id} no longer names Checkout Session {session}"
        ));
    }
    let held = payment
        .stripe_payment_intent_id
        .as_deref()
        .map(str::trim)
        .filter(|pi| !pi.is_empty());
    match (held, payload.stripe_payment_intent_id.as_deref()) {
        (None, _) => None,
        (Some(held), Some(intent)) if held == intent => None,
        (Some(held), _) => Some(format!(
            "payment {id} holds PaymentIntent {held}, not its Checkout Session's"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_error_names_the_failure_and_its_cause() {
        let payload = serde_json::from_value::<RepairPayload>(serde_json::json!({"payment_id": 1}))
            .map_err(RepairError::MalformedPayload);
        let Err(malformed) = payload else {
            panic!("a payload without finding_id parsed")
        };
        assert_eq!(
            malformed.last_error(),
            "malformed payload: missing field `finding_id`"
        );
        let store = RepairError::from(WriteError::Store(StoreError {
            action: "resolving a finding",
            source: sqlx::Error::RowNotFound,
        }));
        assert_eq!(
            store.last_error(),
            format!(
                "database error while resolving a finding: {}",
                sqlx::Error::RowNotFound
            )
        );
        let wrong = RepairError::WrongFinding {
            finding_id: 7,
            kind: "refunded".into(),
            finding_payment: None,
            expected: FindingKind::MissedSuccess,
            payment_id: "3".into(),
        };
        assert_eq!(
            wrong.last_error(),
            "finding 7 is refunded for payment none, not missed_success for payment 3"
        );
        assert_eq!(
            RepairError::from(WriteError::UnknownPayment(PaymentKey::from(9))).last_error(),
            "payment 9 does not exist"
        );
    }
}
