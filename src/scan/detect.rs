//! Phase 2 of a batch: ask Stripe about each row, outside any transaction,
//! at most `max_in_flight` reads at a time, results in the rows' order.

use futures::{StreamExt, TryStreamExt};

use crate::reconcile::{classify, Decision, ExternalStatus, FindingKind, LocalStatus, Verdict};
use crate::store::payments::PaymentRow;
use crate::stripe::{GatewayError, PaymentIntentId, StripeGateway};

/// One row's outcome of phase 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// `payments.id`
    pub payment_id: i64,
    /// `payments.status` as read in phase 1.
    pub local: LocalStatus,
    /// What to do about it.
    pub decision: Decision,
    /// Stripe's status when Stripe was actually asked and answered; only these
    /// rows get `last_reconciled_at`.
    pub observed: Option<ExternalStatus>,
    /// A request was sent to Stripe for this row.
    pub asked_stripe: bool,
}

/// Observes every row and returns the observations in the rows' order. Rows in
/// the grace window and rows whose id is not a PaymentIntent id are decided
/// without a request. Reads complete in any order (a slow retry does not hold
/// up the others) and are put back in row order at the end.
///
/// # Errors
/// [`GatewayError::Rejected`] (the key is wrong) stops the batch at once; no
/// other error escapes: they become verdicts.
pub async fn observe_all(
    gateway: &StripeGateway,
    rows: Vec<PaymentRow>,
    max_in_flight: usize,
) -> Result<Vec<Observation>, GatewayError> {
    let mut observed: Vec<(usize, Observation)> =
        futures::stream::iter(rows.into_iter().enumerate())
            .map(|(index, row)| async move { observe(gateway, row).await.map(|o| (index, o)) })
            .buffer_unordered(max_in_flight.max(1))
            .try_collect()
            .await?;
    observed.sort_unstable_by_key(|(index, _)| *index);
    Ok(observed.into_iter().map(|(_, o)| o).collect())
}

async fn observe(gateway: &StripeGateway, row: PaymentRow) -> Result<Observation, GatewayError> {
    let local = LocalStatus::parse(&row.status);
    let mut seen = Observation {
        payment_id: row.id,
        local,
        decision: Decision::plain(Verdict::InFlight),
        observed: None,
        asked_stripe: false,
    };
    if row.recently_changed {
        return Ok(seen);
    }
    let id = match PaymentIntentId::parse(&row.stripe_payment_intent_id) {
        Ok(id) => id,
        Err(reason) => {
            tracing::warn!(payment_id = row.id, %reason, "payment has a malformed PaymentIntent id; not sent to Stripe");
            seen.decision = Decision::review(FindingKind::InvalidPaymentIntentId);
            return Ok(seen);
        }
    };
    seen.asked_stripe = true;
    match gateway.payment_intent_status(&id).await {
        Ok(external) => {
            seen.decision = classify(&seen.local, &external);
            seen.observed = Some(external);
        }
        Err(GatewayError::NotFound { .. }) => {
            seen.decision = Decision::review(FindingKind::MissingExternally);
        }
        Err(e @ GatewayError::Rejected { .. }) => return Err(e),
        Err(e @ GatewayError::Unavailable { .. }) => {
            tracing::warn!(payment_id = row.id, payment_intent = %id, error = %e, "PaymentIntent unverifiable");
            seen.decision = Decision::plain(Verdict::Unverifiable);
        }
    }
    Ok(seen)
}
