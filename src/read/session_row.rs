//! Phase 2 for a row judged by its Checkout Session (docs/checkout-sessions.md): a row with no
//! PaymentIntent id (NULL or empty) whose `RECONCILER_CHECKOUT_SESSION_COLUMN`
//! holds a value. The session is read with its PaymentIntent and latest
//! charge (from a list page, or a retrieve on the row's account) and judged
//! by [`classify_session`].

use super::accounts::AccountKey;
use super::observation::Observation;
use super::row::Read;
use crate::outcome::RunError;
use crate::reconcile::{
    classify_session, CheckoutSessionFacts, Decision, FindingKind, LocalPayment, Verdict,
};
use crate::store::payments::PaymentRow;
use crate::stripe::{CheckoutSessionId, InvalidAccountId, InvalidCheckoutSessionId};

impl Read<'_> {
    /// One row by its Checkout Session: `from_list` is the session as a list
    /// page contained it (no request then); otherwise it is retrieved.
    pub(super) async fn observe_session(
        self,
        row: &PaymentRow,
        account: Result<AccountKey, InvalidAccountId>,
        session: Result<CheckoutSessionId, InvalidCheckoutSessionId>,
        from_list: Option<CheckoutSessionFacts>,
        mut seen: Observation,
    ) -> Result<Observation, RunError> {
        let id = match session {
            Ok(id) => id,
            Err(reason) => {
                tracing::warn!(payment_id = %row.id, %reason, "payment has a malformed Checkout Session id; not sent to Stripe");
                seen.decision = Decision::review_with(
                    FindingKind::InvalidCheckoutSessionId,
                    serde_json::json!({ "reason": reason.to_string() }),
                );
                return Ok(seen);
            }
        };
        seen.checkout_session = Some(id.as_str().to_owned());
        let Some((account, tally)) = self.reach(row, account, &mut seen) else {
            return Ok(seen);
        };
        let read = match from_list {
            Some(facts) => Ok(facts),
            None => {
                let _permit = self.in_flight.acquire().await;
                self.gateway
                    .checkout_session_on(account.as_ref(), &id)
                    .await
            }
        };
        match read {
            Ok(facts) => {
                super::accounts::Tally::count(&tally.found);
                self.judge(row, &facts, &mut seen);
            }
            Err(e) => {
                let platform = account.is_none();
                self.failed(e, tally, platform, (&row.id, id.as_str()), &mut seen)
                    .await?
            }
        }
        Ok(seen)
    }

    /// Judges Stripe's answer for the session into `seen`.
    fn judge(&self, row: &PaymentRow, facts: &CheckoutSessionFacts, seen: &mut Observation) {
        let local = LocalPayment {
            status: seen.local.clone(),
            amount: row.amount.clone(),
            currency: row.currency.clone(),
            shares_payment_intent: false,
        };
        let judged = classify_session(&local, facts, self.rules, self.now);
        seen.payment_intent = judged.payment_intent;
        seen.decision = judged.decision;
        seen.observed = judged.observed;
        if seen.decision.verdict == Verdict::Unverifiable {
            let reason = seen
                .decision
                .unverifiable_reason()
                .unwrap_or("incomplete Checkout Session")
                .to_owned();
            tracing::warn!(payment_id = %row.id, checkout_session = seen.checkout_session.as_deref(), %reason, "Checkout Session unverifiable");
            seen.error = Some(reason);
        }
    }
}
