//! One repair command, checked and applied: its payload, the payment
//! locked first and its finding checked (the one lock order: payment, then
//! finding), the reasons it is skipped (the payment deleted or moved, the
//! finding resolved, a blocking finding open), then the canonical writer.

use serde::Deserialize;

use super::error::RepairError;
use super::options::RepairOptions;
use super::writer::{apply, fill_session_payment_intent, StatusChange};
use crate::config::StatusMap;
use crate::key::{KeyType, PaymentKey};
use crate::reconcile::{RepairCommand, Resolution, PAYMENT_DELETED_NOTE};
use crate::store::outbox::ClaimedCommand;
use crate::store::{findings, payments};

/// The payload the reconciler writes (design note), plus the PaymentIntent
/// id the decision was made on (absent in commands enqueued by older
/// versions).
#[derive(Debug, Deserialize)]
pub(super) struct RepairPayload {
    /// A number (integer keys) or a string (docs/keys.md).
    #[serde(deserialize_with = "payment_key")]
    payment_id: PaymentKey,
    finding_id: i64,
    stripe_payment_intent_id: Option<String>,
    /// A payment judged by its Checkout Session (docs/checkout-sessions.md).
    checkout_session_id: Option<String>,
}

/// The payload's `payment_id`: a number (integer keys, as every release wrote it before other key types)
/// or a non-empty string (uuid, text keys).
fn payment_key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<PaymentKey, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    PaymentKey::from_json(&value).ok_or_else(|| {
        serde::de::Error::custom("payment_id is neither a whole number nor a string")
    })
}

/// What applying one command did.
pub(super) enum Applied {
    Changed,
    NoOp,
    /// Closed without touching the payment, with the reason.
    Skipped(String),
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
pub(super) async fn process(
    conn: &mut sqlx::PgConnection,
    (options, key): (&RepairOptions, &KeyType),
    command: &ClaimedCommand,
    statuses: &StatusMap,
) -> Result<Applied, RepairError> {
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
    let finding_open = lock_finding(conn, kind, &payload).await?;
    let skip = |reason: String| {
        tracing::info!(outbox_id = command.id, finding_id = payload.finding_id, %reason, "repair command skipped");
        Ok(Applied::Skipped(reason))
    };
    if !finding_open {
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
    write(conn, options, kind, &payload, statuses).await
}

/// The payload's finding, locked after its payment: it must exist, be about
/// the same payment and of the kind `command` repairs. Returns whether it
/// is open.
///
/// # Errors
/// [`RepairError::UnknownFinding`], [`RepairError::WrongFinding`], or the
/// database's.
async fn lock_finding(
    conn: &mut sqlx::PgConnection,
    command: RepairCommand,
    payload: &RepairPayload,
) -> Result<bool, RepairError> {
    let finding = findings::lock_for_repair(conn, payload.finding_id)
        .await?
        .ok_or(RepairError::UnknownFinding(payload.finding_id))?;
    if finding.payment_id.as_ref() != Some(&payload.payment_id)
        || finding.kind != command.finding_kind().as_str()
    {
        return Err(RepairError::WrongFinding {
            finding_id: payload.finding_id,
            kind: finding.kind,
            finding_payment: finding.payment_id.map(|k| k.as_str().into()),
            expected: command.finding_kind(),
            payment_id: payload.payment_id.as_str().into(),
        });
    }
    Ok(finding.open)
}

/// The checked command through the canonical writer.
async fn write(
    conn: &mut sqlx::PgConnection,
    options: &RepairOptions,
    kind: RepairCommand,
    payload: &RepairPayload,
    statuses: &StatusMap,
) -> Result<Applied, RepairError> {
    let outbox = &options.outbox;
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
    let change = StatusChange {
        command: kind,
        payment_id: &payload.payment_id,
        finding_id: finding,
        cause: "reconciler",
    };
    let outcome = apply(conn, outbox, statuses, change).await?;
    Ok(if outcome.changed {
        Applied::Changed
    } else {
        Applied::NoOp
    })
}

/// The application deleted the payment (docs/schema.md): nothing to
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
/// Checkout Session (docs/checkout-sessions.md), its session with no other PaymentIntent.
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
