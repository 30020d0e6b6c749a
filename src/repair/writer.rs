//! The canonical writer (design note: `apply_payment_succeeded`).
//!
//! `ApplyPaymentSucceeded` moves a payment `pending -> paid`,
//! `ApplyPaymentCanceled` moves it `pending -> failed`, in the application's
//! words (`RECONCILER_LOCAL_STATUSES`): it writes the first word of the
//! target state and guards on any word of `pending`. Each is a guarded
//! UPDATE (`WHERE status = ANY($pending_words)`, `version + 1`, `updated_at =
//! now()`) and a no-op when the payment has already moved, so the webhook
//! handler and a repair can race safely. When the transition really happens, a
//! `PaymentStatusChanged` event is appended to the outbox in the same
//! transaction, so downstream consumers react exactly once whichever path got
//! there first. When called for a finding, the finding is resolved as
//! `repaired` even on a no-op: the payment is where it should be.
//!
//! A command for a payment judged by its Checkout Session
//! (docs/checkout-sessions.md) also
//! fills the payment's empty PaymentIntent column with the session's
//! PaymentIntent ([`fill_session_payment_intent`], guarded the same way: only
//! while still empty).
//!
//! A webhook handler in another service calls [`apply_payment_succeeded`] or
//! [`apply_payment_canceled`] with `finding_id = None` and its own `cause`.

use serde_json::json;
use sqlx::{PgConnection, PgPool};

use crate::config::{OutboxSettings, StatusMap};
use crate::key::PaymentKey;
use crate::reconcile::{LocalStatus, RepairCommand, Resolution};
use crate::store::payments::{fill_payment_intent, transition_status, TransitionResult};
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
    UnknownPayment(PaymentKey),
    /// `RECONCILER_LOCAL_STATUSES` gives the state no word to write or to
    /// match (never for a parsed map: `pending`, `paid` and `failed` are
    /// required).
    #[error("RECONCILER_LOCAL_STATUSES has no word for {0}")]
    NoWord(LocalStatus),
    /// A database failure; the transaction rolled back.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The canonical states of a command: `(from, to)` (docs/findings.md).
fn transition(command: RepairCommand) -> (LocalStatus, LocalStatus) {
    match command {
        RepairCommand::ApplyPaymentSucceeded => (LocalStatus::Pending, LocalStatus::Paid),
        RepairCommand::ApplyPaymentCanceled => (LocalStatus::Pending, LocalStatus::Failed),
    }
}

/// What the writer is asked to do: which transition, to which payment, for
/// which finding (if any), and why.
#[derive(Debug, Clone, Copy)]
pub struct StatusChange<'a> {
    /// `pending -> paid` or `pending -> failed`.
    pub command: RepairCommand,
    /// The key's text (`payments.id::text`, any key type: docs/keys.md).
    pub payment_id: &'a PaymentKey,
    /// The finding resolved by the change (`None` for a webhook handler).
    pub finding_id: Option<i64>,
    /// Goes into the event (e.g. `"reconciler"`, `"webhook"`).
    pub cause: &'a str,
}

/// Applies `change` inside the caller's transaction (`conn` must be in one:
/// the status change, the event and the finding's resolution commit or roll
/// back together), in the words of `statuses`, its event appended to
/// `outbox`. The guarded UPDATE casts the payment's key text to
/// `payments.id`'s type, read from the catalog (one look-up), so the
/// primary key's index finds the row.
///
/// # Errors
/// [`WriteError::UnknownPayment`]; [`WriteError::NoWord`]; [`WriteError::Store`].
pub async fn apply(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    statuses: &StatusMap,
    change: StatusChange<'_>,
) -> Result<WriteOutcome, WriteError> {
    let StatusChange {
        command,
        payment_id,
        finding_id,
        cause,
    } = change;
    let key = crate::store::keys::current(&mut *conn).await?;
    let (from_state, to_state) = transition(command);
    let from = statuses.words(&from_state);
    if from.is_empty() {
        return Err(WriteError::NoWord(from_state));
    }
    let to = statuses
        .first_word(&to_state)
        .ok_or_else(|| WriteError::NoWord(to_state.clone()))?;
    // Where the payment is now decides how the finding closes: `repaired` when
    // it reached the command's target (by us or by the webhook), `superseded`
    // when it moved elsewhere (e.g. a late failure webhook): the next scan
    // classifies that new state afresh.
    let mut resolution = Resolution::Repaired;
    let changed = match transition_status(conn, &key, payment_id, from, to).await? {
        TransitionResult::Missing => return Err(WriteError::UnknownPayment(payment_id.clone())),
        TransitionResult::AlreadyMoved { status } => {
            tracing::info!(%payment_id, %command, %status, "payment already moved; transition is a no-op");
            if statuses.local(&status) != to_state {
                resolution = Resolution::Superseded;
            }
            false
        }
        TransitionResult::Changed { version } => {
            let event = json!({
                "payment_id": payment_id.to_json(key.kind()), "from": from_state.as_str(), "to": to_state.as_str(),
                "status": to, "version": version,
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

/// Fills the payment's PaymentIntent column with `payment_intent`, inside
/// the caller's transaction, only while the column is NULL or empty (the
/// guard is the UPDATE's own `WHERE`): a payment the scan judged by its
/// Checkout Session becomes a PaymentIntent row (docs/checkout-sessions.md).
/// Returns whether
/// it filled (`false`: already filled, by the webhook or an earlier repair).
/// The only write besides [`apply`]'s status change this module makes.
///
/// # Errors
/// [`WriteError::Store`].
pub async fn fill_session_payment_intent(
    conn: &mut PgConnection,
    payment_id: &PaymentKey,
    payment_intent: &str,
) -> Result<bool, WriteError> {
    let key = crate::store::keys::current(&mut *conn).await?;
    let filled = fill_payment_intent(conn, &key, payment_id, payment_intent).await?;
    if filled {
        tracing::info!(
            %payment_id,
            payment_intent,
            "filled the payment's PaymentIntent id from its Checkout Session"
        );
    }
    Ok(filled)
}

/// `pending -> paid` in its own transaction (for a webhook handler), in the
/// words of `statuses` (the application's `RECONCILER_LOCAL_STATUSES`).
///
/// # Errors
/// [`WriteError::UnknownPayment`]; [`WriteError::Store`].
///
/// # Example
/// A webhook handler's `payment_intent.succeeded` branch (compiled by
/// `cargo test --doc`, not run: it needs a database):
///
/// ```no_run
/// use stripe_reconciler::config::StatusMap;
/// use stripe_reconciler::key::PaymentKey;
/// use stripe_reconciler::repair::writer::{apply_payment_succeeded, WriteError};
///
/// async fn on_payment_intent_succeeded(
///     pool: &sqlx::PgPool,
///     payment_id: &PaymentKey, // payments.id as text: PaymentKey::from(42_i64) or PaymentKey::new(uuid)
/// ) -> Result<(), WriteError> {
///     // The same words as the reconciler's RECONCILER_LOCAL_STATUSES.
///     let statuses = StatusMap::parse("pending=pending;paid=paid;failed=failed")
///         .expect("valid status words");
///     let outcome = apply_payment_succeeded(pool, &statuses, payment_id, None, "webhook").await?;
///     if !outcome.changed {
///         // Already paid (a repair got there first): no second event.
///     }
///     Ok(())
/// }
/// ```
pub async fn apply_payment_succeeded(
    pool: &PgPool,
    statuses: &StatusMap,
    payment_id: &PaymentKey,
    finding_id: Option<i64>,
    cause: &str,
) -> Result<WriteOutcome, WriteError> {
    apply_in_transaction(
        pool,
        statuses,
        RepairCommand::ApplyPaymentSucceeded,
        payment_id,
        finding_id,
        cause,
    )
    .await
}

/// `pending -> failed` in its own transaction (for a webhook handler), in
/// the words of `statuses`.
///
/// # Errors
/// [`WriteError::UnknownPayment`]; [`WriteError::Store`].
pub async fn apply_payment_canceled(
    pool: &PgPool,
    statuses: &StatusMap,
    payment_id: &PaymentKey,
    finding_id: Option<i64>,
    cause: &str,
) -> Result<WriteOutcome, WriteError> {
    apply_in_transaction(
        pool,
        statuses,
        RepairCommand::ApplyPaymentCanceled,
        payment_id,
        finding_id,
        cause,
    )
    .await
}

async fn apply_in_transaction(
    pool: &PgPool,
    statuses: &StatusMap,
    command: RepairCommand,
    payment_id: &PaymentKey,
    finding_id: Option<i64>,
    cause: &str,
) -> Result<WriteOutcome, WriteError> {
    let mut conn = pool.acquire().await.context("connecting")?;
    let mut tx = crate::store::begin(&mut *conn)
        .await
        .context("opening the writer transaction")?;
    // The webhook handler's path writes its event to the default outbox.
    let change = StatusChange {
        command,
        payment_id,
        finding_id,
        cause,
    };
    let outcome = apply(&mut tx, &OutboxSettings::default(), statuses, change).await?;
    tx.commit().await.context("committing the transition")?;
    Ok(outcome)
}
