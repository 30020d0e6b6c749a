//! Checkout Session events (docs/checkout-sessions.md): `checkout.session.completed`,
//! `.async_payment_succeeded`, `.async_payment_failed` and `.expired` are
//! triggers like the others. The session's row (found by
//! `RECONCILER_CHECKOUT_SESSION_COLUMN`) is re-read by its session while it
//! has no PaymentIntent id; otherwise the session's PaymentIntent goes the
//! way of a charge event's: its rows re-read, or, with no row and a paid
//! session, read as an orphan (`missing_locally`).

use std::collections::HashSet;

use super::groups::EventsContext;
use super::EventsError;
use crate::read::session_of;
use crate::store::payments::{self, MoneyColumns, PaymentRow};
use crate::store::Context;
use crate::stripe::{PaymentIntentEvent, SessionEvent};

/// What a batch's Checkout Session events call for.
#[derive(Debug, Default)]
pub(super) struct SessionWork {
    /// Rows judged by their session (no PaymentIntent id), to read.
    pub(super) rows: Vec<PaymentRow>,
    /// The sessions of those rows: a later event of the run about one of
    /// them needs no second read.
    pub(super) handled: Vec<String>,
    /// The PaymentIntents those sessions name: their rows hold no
    /// PaymentIntent id yet, so a `payment_intent.*` event about one of
    /// them (Stripe sends `payment_intent.succeeded` beside
    /// `checkout.session.completed`) is judged through the session's read,
    /// never as money no row names (`missing_locally`).
    pub(super) payment_intents: HashSet<String>,
    /// The events of the other sessions, as events about their
    /// PaymentIntent ([`SessionEvent::as_payment_intent_event`]).
    pub(super) as_payment_intents: Vec<PaymentIntentEvent>,
}

/// Looks up the rows of `sessions` (newest event first; the sessions in
/// `handled` are left out) and splits them: rows judged by their session,
/// and the PaymentIntent events of the rest.
///
/// # Errors
/// [`EventsError`] from the database.
pub(super) async fn look_up(
    ctx: &EventsContext<'_>,
    sessions: &[SessionEvent],
    handled: &HashSet<String>,
) -> Result<SessionWork, EventsError> {
    let mut seen: HashSet<&str> = HashSet::new();
    let newest: Vec<&SessionEvent> = sessions
        .iter()
        .filter(|e| !handled.contains(e.checkout_session.as_str()))
        .filter(|e| seen.insert(e.checkout_session.as_str()))
        .collect();
    let ids: Vec<&str> = newest.iter().map(|e| e.checkout_session.as_str()).collect();
    let settings = ctx.settings;
    let columns = MoneyColumns::of(settings.scan.schema);
    let found = if ids.is_empty() || columns.checkout_session.is_none() {
        Vec::new()
    } else {
        let mut tx = crate::store::begin(ctx.pool)
            .await
            .context("opening the session lookup")?;
        let rows =
            payments::by_checkout_sessions(&mut tx, &ids, settings.scan.run.grace, columns).await?;
        tx.commit().await.context("closing the session lookup")?;
        rows
    };
    let judged: Vec<PaymentRow> = found
        .into_iter()
        .filter(|r| session_of(r).is_some())
        .collect();
    let by_row: HashSet<&str> = judged
        .iter()
        .filter_map(|r| r.checkout_session_id.as_deref())
        .collect();
    let as_payment_intents = newest
        .iter()
        .filter(|e| !by_row.contains(e.checkout_session.as_str()))
        .filter_map(|e| e.as_payment_intent_event())
        .collect();
    let payment_intents = sessions
        .iter()
        .filter(|e| by_row.contains(e.checkout_session.as_str()))
        .filter_map(|e| e.payment_intent.as_ref().map(|pi| pi.as_str().to_owned()))
        .collect();
    let handled = by_row.iter().map(|s| (*s).to_owned()).collect();
    Ok(SessionWork {
        rows: judged,
        handled,
        payment_intents,
        as_payment_intents,
    })
}
