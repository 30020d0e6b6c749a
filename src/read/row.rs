//! Phase 2 for one row: its read (from a list page, or a retrieve on the
//! row's Stripe account) and the verdict of Stripe's answer. A row judged by
//! its Checkout Session is read by [`super::session_row`].

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::sync::Semaphore;

use super::accounts::{check_key, AccountKey, KeyCheck, Tally};
use super::list::ListedFacts;
use super::observation::{Observation, CONNECT_HINT, WRONG_ACCOUNT_NOT_FOUND_READS};
use super::session_key::session_of;
use crate::config::{Partition, SchemaSettings};
use crate::key::PaymentKey;
use crate::outcome::RunError;
use crate::reconcile::{
    classify, nothing_to_verify, Decision, FindingKind, LocalPayment, PaymentIntentFacts, Rules,
    Verdict,
};
use crate::store::payments::PaymentRow;
use crate::stripe::{GatewayError, InvalidAccountId, PaymentIntentId, StripeGateway};

/// What one row's read needs from its batch.
#[derive(Clone, Copy)]
pub(super) struct Read<'a> {
    pub(super) pool: &'a PgPool,
    pub(super) gateway: &'a StripeGateway,
    pub(super) schema: &'a SchemaSettings,
    pub(super) partition: Option<&'a Partition>,
    pub(super) rules: &'a Rules,
    pub(super) now: DateTime<Utc>,
    pub(super) tallies: &'a HashMap<AccountKey, Tally>,
    pub(super) in_flight: &'a Semaphore,
}

/// A row no Stripe read can judge now: a key that is not UTF-8 (unverifiable,
/// the key cannot address the row) or a row in the grace window (in flight).
/// Returns `true` when `seen` is final.
fn settled_without_a_read(row: &PaymentRow, seen: &mut Observation) -> bool {
    if row.key_not_utf8 {
        tracing::warn!(payment_id = %row.id, "payments.id holds bytes that are not UTF-8 (shown as \\xNN): the row cannot be addressed by its key; fix the key");
        seen.decision = Decision::unverifiable(
            "payments.id holds bytes that are not UTF-8 (shown as \\xNN): fix the key",
        );
        return true;
    }
    row.recently_changed
}

impl Read<'_> {
    /// One row: `from_list` is its PaymentIntent (or, for a row judged by
    /// its Checkout Session, its session) as a list page contained it (no
    /// request then); otherwise it is retrieved, on the row's account.
    pub(super) async fn observe(
        self,
        row: PaymentRow,
        account: Result<AccountKey, InvalidAccountId>,
        from_list: Option<ListedFacts>,
    ) -> Result<Observation, RunError> {
        let mut seen = unread(&row);
        if settled_without_a_read(&row, &mut seen) {
            return Ok(seen);
        }
        if let Some(session) = session_of(&row) {
            let from_list = match from_list {
                Some(ListedFacts::Session(facts)) => Some(facts),
                _ => None,
            };
            return self
                .observe_session(&row, account, session, from_list, seen)
                .await;
        }
        if nothing_to_verify(&seen.local, row.stripe_payment_intent_id.as_deref()) {
            seen.decision = Decision::plain(Verdict::InSync);
            seen.nothing_to_verify = true;
            return Ok(seen);
        }
        let id = match PaymentIntentId::parse(row.stripe_payment_intent_id.as_deref().unwrap_or(""))
        {
            Ok(id) => id,
            Err(reason) => {
                tracing::warn!(payment_id = %row.id, %reason, "payment has a malformed PaymentIntent id; not sent to Stripe");
                seen.decision = Decision::review(FindingKind::InvalidPaymentIntentId);
                return Ok(seen);
            }
        };
        seen.payment_intent = Some(id.as_str().to_owned());
        let Some((account, tally)) = self.reach(&row, account, &mut seen) else {
            return Ok(seen);
        };
        let read = match from_list {
            Some(ListedFacts::PaymentIntent(facts)) => Ok(facts),
            _ => {
                let _permit = self.in_flight.acquire().await;
                self.gateway.payment_intent_on(account.as_ref(), &id).await
            }
        };
        match read {
            Ok(facts) => {
                Tally::count(&tally.found);
                self.classify(&row, &id, facts, &mut seen);
            }
            Err(e) => {
                let platform = account.is_none();
                self.failed(e, tally, platform, (&row.id, id.as_str()), &mut seen)
                    .await?
            }
        }
        Ok(seen)
    }

    /// The account the row's reads go to and its tally, counted as asked;
    /// `None` when no read is sent (a malformed or unreachable account:
    /// `seen` says why).
    pub(super) fn reach(
        &self,
        row: &PaymentRow,
        account: Result<AccountKey, InvalidAccountId>,
        seen: &mut Observation,
    ) -> Option<(AccountKey, &Tally)> {
        let account = match account {
            Ok(account) => account,
            Err(reason) => {
                tracing::warn!(payment_id = %row.id, %reason, "payment has a malformed Stripe account id; not sent to Stripe");
                seen.decision = Decision::plain(Verdict::Unverifiable);
                seen.error = Some(format!(
                    "RECONCILER_ACCOUNT_COLUMN holds no usable account id ({reason}); the row was not sent to Stripe"
                ));
                return None;
            }
        };
        seen.stripe_account = account.as_ref().map(|a| a.as_str().to_owned());
        if let Some(reason) = account
            .as_ref()
            .and_then(|a| self.gateway.accounts().unreachable(a))
        {
            seen.unreachable(reason);
            return None;
        }
        let tally = self.tallies.get(&account)?;
        seen.asked_stripe = true;
        Tally::count(&tally.asked);
        Some((account, tally))
    }

    /// A read of `object` (row id, Stripe id) that got no answer to judge:
    /// a 404 (`missing_externally`, or the wrong-account rule), a rejected
    /// key (the run stops), an unreachable account or no usable answer
    /// (UNVERIFIABLE).
    pub(super) async fn failed(
        &self,
        e: GatewayError,
        tally: &Tally,
        platform: bool,
        (payment_id, object): (&PaymentKey, &str),
        seen: &mut Observation,
    ) -> Result<(), RunError> {
        match e {
            GatewayError::NotFound { .. } => {
                seen.decision = self.not_found(tally, platform).await?;
            }
            e if e.is_rejected() => return Err(RunError::StripeRejected(e)),
            e @ GatewayError::AccountUnreachable { .. } => {
                tracing::warn!(%payment_id, stripe_object = object, error = %e, "read unverifiable: its connected account is unreachable");
                seen.unreachable(e.to_string());
            }
            // `Unavailable`: no usable answer after the retry budget.
            e => {
                tracing::warn!(%payment_id, stripe_object = object, error = %e, "read unverifiable");
                seen.error = Some(e.to_string());
                seen.decision = Decision::plain(Verdict::Unverifiable);
            }
        }
        Ok(())
    }

    /// A 404 on `tally`'s account (`platform`: the platform's own): the
    /// wrong-account check once enough 404s came and nothing was found
    /// ([`RunError::StripeWrongAccount`] when the key is wrong), else a
    /// `missing_externally` finding (with the Connect hint while
    /// `RECONCILER_ACCOUNT_COLUMN` is unset).
    async fn not_found(&self, tally: &Tally, platform: bool) -> Result<Decision, RunError> {
        let not_found = Tally::count(&tally.not_found);
        if platform
            && not_found >= WRONG_ACCOUNT_NOT_FOUND_READS
            && tally.found.load(Ordering::Relaxed) == 0
        {
            let key = tally
                .key
                .get_or_init(|| {
                    let at = (self.schema.account_column.as_ref(), self.partition);
                    check_key(self.pool, self.gateway, at, None)
                })
                .await;
            if *key == KeyCheck::Wrong {
                return Err(RunError::StripeWrongAccount { not_found });
            }
        }
        Ok(match self.schema.account_column {
            None => Decision::review_with(
                FindingKind::MissingExternally,
                serde_json::json!({ "hint": CONNECT_HINT }),
            ),
            Some(_) => Decision::review(FindingKind::MissingExternally),
        })
    }

    /// Classifies Stripe's answer for `row` into `seen`.
    fn classify(
        &self,
        row: &PaymentRow,
        id: &PaymentIntentId,
        facts: PaymentIntentFacts,
        seen: &mut Observation,
    ) {
        let local = LocalPayment {
            status: seen.local.clone(),
            amount: row.amount.clone(),
            currency: row.currency.clone(),
            shares_payment_intent: row.shares_payment_intent,
        };
        seen.decision = classify(&local, &facts, self.rules, self.now);
        if seen.decision.verdict == Verdict::Unverifiable {
            // Stripe answered, but not enough to judge the money.
            let reason = seen
                .decision
                .unverifiable_reason()
                .unwrap_or("incomplete PaymentIntent")
                .to_owned();
            tracing::warn!(payment_id = %row.id, payment_intent = %id, %reason, "PaymentIntent unverifiable");
            seen.error = Some(reason);
        } else {
            seen.observed = Some(facts.status);
        }
    }
}

/// A row before any read: IN_FLIGHT, nothing asked.
fn unread(row: &PaymentRow) -> Observation {
    Observation {
        payment_id: row.id.clone(),
        version: row.version,
        updated_at: row.updated_at,
        local: row.status.clone(),
        payment_intent: None,
        decision: Decision::plain(Verdict::InFlight),
        observed: None,
        asked_stripe: false,
        error: None,
        stripe_account: None,
        account_unreachable: false,
        checkout_session: None,
        nothing_to_verify: false,
    }
}
