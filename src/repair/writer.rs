//! The canonical writer (design note: `apply_payment_succeeded`).
//!
//! `ApplyPaymentSucceeded` moves a payment `pending -> paid`,
//! `ApplyPaymentCanceled` moves it `pending -> failed`. Each is a guarded
//! UPDATE (`WHERE status = 'pending'`, `version + 1`, `updated_at = now()`) and
//! a no-op when the payment has already moved, so the webhook handler and a
//! repair can race safely. When the transition really happens, a
//! `PaymentStatusChanged` event is appended to the outbox in the same
//! transaction, so downstream consumers react exactly once whichever path got
//! there first. When called for a finding, the finding is resolved as
//! `repaired` even on a no-op: the payment is where it should be.
//!
//! A webhook handler in another service calls [`apply_payment_succeeded`] or
//! [`apply_payment_canceled`] with `finding_id = None` and its own `cause`.

use serde_json::json;
use sqlx::{PgConnection, PgPool};

use crate::config::OutboxSettings;
use crate::reconcile::{RepairCommand, Resolution};
use crate::store::payments::{transition_status, TransitionResult};
use crate::store::{findings, outbox, Context, StoreError};

/// The outbox `event_type` of a status change.
pub const PAYMENT_STATUS_CHANGED: &str = "PaymentStatusChanged";

/// What the writer did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOutcome {
    /// The status changed (and one `PaymentStatusChanged` event was appended).
    pub changed: bool,
    /// The finding passed in was open and is now resolved as `repaired`.
    pub finding_resolved: bool,
}

/// Why a transition could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// No payment has this id.
    #[error("payment {0} does not exist")]
    UnknownPayment(i64),
    /// A database failure; the transaction rolled back.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The target status of a command: `(from, to)`.
fn transition(command: RepairCommand) -> (&'static str, &'static str) {
    match command {
        RepairCommand::ApplyPaymentSucceeded => ("pending", "paid"),
        RepairCommand::ApplyPaymentCanceled => ("pending", "failed"),
    }
}

/// Applies `command` to `payment_id` inside the caller's transaction (`conn`
/// must be in one: the status change, the event and the finding's resolution
/// commit or roll back together). `cause` goes into the event (e.g.
/// `"reconciler"`, `"webhook"`).
///
/// # Errors
/// [`WriteError::UnknownPayment`]; [`WriteError::Store`].
pub async fn apply(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    command: RepairCommand,
    payment_id: i64,
    finding_id: Option<i64>,
    cause: &str,
) -> Result<WriteOutcome, WriteError> {
    let (from, to) = transition(command);
    // Where the payment is now decides how the finding closes: `repaired` when
    // it reached the command's target (by us or by the webhook), `superseded`
    // when it moved elsewhere (e.g. a late failure webhook): the next scan
    // classifies that new state afresh.
    let mut resolution = Resolution::Repaired;
    let changed = match transition_status(conn, payment_id, from, to).await? {
        TransitionResult::Missing => return Err(WriteError::UnknownPayment(payment_id)),
        TransitionResult::AlreadyMoved { status } => {
            tracing::info!(payment_id, %command, %status, "payment already moved; transition is a no-op");
            if status != to {
                resolution = Resolution::Superseded;
            }
            false
        }
        TransitionResult::Changed { version } => {
            let event = json!({
                "payment_id": payment_id, "from": from, "to": to, "version": version,
                "command": command.as_str(), "cause": cause, "finding_id": finding_id,
            });
            outbox::append_event(conn, outbox, payment_id, PAYMENT_STATUS_CHANGED, &event).await?;
            true
        }
    };
    let finding_resolved = match finding_id {
        Some(id) => findings::resolve(conn, id, resolution).await?,
        None => false,
    };
    Ok(WriteOutcome {
        changed,
        finding_resolved,
    })
}

/// `pending -> paid` in its own transaction (for a webhook handler).
///
/// # Errors
/// [`WriteError::UnknownPayment`]; [`WriteError::Store`].
pub async fn apply_payment_succeeded(
    pool: &PgPool,
    payment_id: i64,
    finding_id: Option<i64>,
    cause: &str,
) -> Result<WriteOutcome, WriteError> {
    apply_in_transaction(
        pool,
        RepairCommand::ApplyPaymentSucceeded,
        payment_id,
        finding_id,
        cause,
    )
    .await
}

/// `pending -> failed` in its own transaction (for a webhook handler).
///
/// # Errors
/// [`WriteError::UnknownPayment`]; [`WriteError::Store`].
pub async fn apply_payment_canceled(
    pool: &PgPool,
    payment_id: i64,
    finding_id: Option<i64>,
    cause: &str,
) -> Result<WriteOutcome, WriteError> {
    apply_in_transaction(
        pool,
        RepairCommand::ApplyPaymentCanceled,
        payment_id,
        finding_id,
        cause,
    )
    .await
}

async fn apply_in_transaction(
    pool: &PgPool,
    command: RepairCommand,
    payment_id: i64,
    finding_id: Option<i64>,
    cause: &str,
) -> Result<WriteOutcome, WriteError> {
    let mut conn = pool.acquire().await.context("connecting")?;
    let mut tx = crate::store::begin(&mut *conn)
        .await
        .context("opening the writer transaction")?;
    // The webhook handler's path writes its event to the default outbox.
    let outcome = apply(
        &mut tx,
        &OutboxSettings::default(),
        command,
        payment_id,
        finding_id,
        cause,
    )
    .await?;
    tx.commit().await.context("committing the transition")?;
    Ok(outcome)
}
