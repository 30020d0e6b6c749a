//! Which rows are judged by their Checkout Session (docs/checkout-sessions.md): the one rule
//! the reads of the scan, list mode and the events job share.

use crate::store::payments::PaymentRow;
use crate::stripe::{CheckoutSessionId, InvalidCheckoutSessionId};

/// The row's Checkout Session when the row is judged by it: no PaymentIntent
/// id (NULL, empty or blank) and a non-empty session column; `Err` when that
/// value is not a well-formed `cs_` id (never sent to Stripe). `None`: the
/// row is judged by its PaymentIntent id, as every row without a session column is.
pub fn session_of(row: &PaymentRow) -> Option<Result<CheckoutSessionId, InvalidCheckoutSessionId>> {
    let no_payment_intent = row
        .stripe_payment_intent_id
        .as_deref()
        .map_or(true, |pi| pi.trim().is_empty());
    let session = row
        .checkout_session_id
        .as_deref()
        .filter(|s| !s.trim().is_empty())?;
    no_payment_intent.then(|| CheckoutSessionId::parse(session))
}
