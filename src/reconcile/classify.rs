//! The full classification: money checks, then the status table, then the
//! aging checks, over (local row, PaymentIntent facts, rules, the run's clock).

use chrono::{DateTime, Utc};
use serde_json::json;

use super::decision::{classify_status, Decision, FindingKind};
use super::facts::{ChargeFacts, LocalPayment, PaymentIntentFacts};
use super::status::{ExternalStatus, LocalStatus};

/// How long Stripe keeps an uncaptured card authorisation before cancelling
/// it, in seconds (about 7 days; Stripe docs, "Place a hold on a payment
/// method"). Used only to show a deadline in `authorization_expiring`.
pub const AUTHORIZATION_LIFETIME_SECONDS: i64 = 7 * 24 * 3600;

/// The thresholds of the aging findings (DESIGN.md "Beyond status"), in
/// seconds since the PaymentIntent's `created`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// `RECONCILER_AUTH_EXPIRY_WARN_SECONDS` (default 432,000 = 5 days).
    pub auth_expiry_warn_seconds: i64,
    /// `RECONCILER_PROCESSING_MAX_SECONDS` (default 1,209,600 = 14 days).
    pub processing_max_seconds: i64,
    /// `RECONCILER_ABANDONED_AFTER_SECONDS`; `None` (the variable's 0) = off.
    pub abandoned_after_seconds: Option<i64>,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            auth_expiry_warn_seconds: 5 * 24 * 3600,
            processing_max_seconds: 14 * 24 * 3600,
            abandoned_after_seconds: None,
        }
    }
}

/// Classifies one payment against its PaymentIntent.
///
/// Pure: no I/O, and `now` (the run's clock) is passed in. In order:
/// 1. Money (DESIGN.md "Beyond status"; money beats status, so a row with a
///    money finding gets that finding only): `duplicate_payment_intent`,
///    then, for a `succeeded` PaymentIntent, `disputed` and `refunded` (a
///    refund or a dispute never changes the PaymentIntent's status; it lives
///    on the charge), then `currency_mismatch` and `amount_mismatch` when the
///    row carries a currency or an amount.
/// 2. The status table ([`classify_status`]).
/// 3. Aging, for rows the table calls in flight or in sync:
///    `authorization_expiring`, `stuck_processing`, `abandoned`.
///
/// A `succeeded` PaymentIntent whose charge was not expanded, or a row with
/// an amount or currency that Stripe's answer lacks, is UNVERIFIABLE: the
/// money cannot be checked, so the row is neither stamped nor repaired.
pub fn classify(
    local: &LocalPayment,
    pi: &PaymentIntentFacts,
    rules: &Rules,
    now: DateTime<Utc>,
) -> Decision {
    if let Some(money) = money_check(local, pi) {
        return money;
    }
    let decision = classify_status(&local.status, &pi.status);
    if decision.kind.is_some() {
        return decision;
    }
    aging_check(local, pi, rules, now).unwrap_or(decision)
}

fn money_check(local: &LocalPayment, pi: &PaymentIntentFacts) -> Option<Decision> {
    if local.shares_payment_intent {
        return Some(Decision::review(FindingKind::DuplicatePaymentIntent));
    }
    if pi.status == ExternalStatus::Succeeded {
        match &pi.charge {
            ChargeFacts::NotExpanded => {
                return Some(Decision::unverifiable(
                    "the PaymentIntent succeeded but its latest charge was not expanded: refunds and disputes cannot be checked",
                ))
            }
            ChargeFacts::Known(charge) => {
                let amount = charge.amount.or(pi.amount);
                if charge.disputed == Some(true) {
                    return Some(Decision::review_with(
                        FindingKind::Disputed,
                        json!({ "amount": amount, "currency": pi.currency }),
                    ));
                }
                let refunded = charge.amount_refunded.unwrap_or(0);
                if refunded > 0 || charge.refunded == Some(true) {
                    let full = charge.refunded == Some(true) || amount.is_some_and(|a| refunded >= a);
                    let share = amount
                        .filter(|a| *a > 0)
                        .map(|a| (refunded as f64 / a as f64 * 10_000.0).round() / 10_000.0);
                    return Some(Decision::review_with(
                        FindingKind::Refunded,
                        json!({
                            "amount": amount,
                            "amount_refunded": refunded,
                            "currency": pi.currency,
                            "refund": if full { "full" } else { "partial" },
                            "refund_share": share,
                        }),
                    ));
                }
            }
            ChargeFacts::None => {}
        }
    }
    if let Some(local_currency) = &local.currency {
        let Some(stripe_currency) = &pi.currency else {
            return Some(Decision::unverifiable(
                "the row has a currency but the PaymentIntent has none",
            ));
        };
        if !local_currency.trim().eq_ignore_ascii_case(stripe_currency) {
            return Some(Decision::review_with(
                FindingKind::CurrencyMismatch,
                json!({ "local_currency": local_currency, "stripe_currency": stripe_currency }),
            ));
        }
    }
    if let Some(local_amount) = local.amount {
        let Some(stripe_amount) = pi.amount else {
            return Some(Decision::unverifiable(
                "the row has an amount but the PaymentIntent has none",
            ));
        };
        if local_amount != stripe_amount {
            let ratio = (local_amount != 0).then(|| {
                (stripe_amount as f64 / local_amount as f64 * 10_000.0).round() / 10_000.0
            });
            return Some(Decision::review_with(
                FindingKind::AmountMismatch,
                json!({
                    "local_amount": local_amount,
                    "stripe_amount": stripe_amount,
                    "currency": pi.currency,
                    "stripe_to_local_ratio": ratio,
                }),
            ));
        }
    }
    None
}

fn aging_check(
    local: &LocalPayment,
    pi: &PaymentIntentFacts,
    rules: &Rules,
    now: DateTime<Utc>,
) -> Option<Decision> {
    if local.status != LocalStatus::Pending {
        return None;
    }
    let created = pi.created?;
    let age = (now - created).num_seconds();
    let details = |deadline_seconds: i64| {
        json!({
            "created": created.to_rfc3339(),
            "age_seconds": age,
            "deadline": (created + chrono::Duration::seconds(deadline_seconds)).to_rfc3339(),
            "capture_method": pi.capture_method,
            "payment_method_types": pi.payment_method_types,
        })
    };
    match pi.status {
        ExternalStatus::RequiresCapture if age > rules.auth_expiry_warn_seconds => {
            Some(Decision::review_with(
                FindingKind::AuthorizationExpiring,
                details(AUTHORIZATION_LIFETIME_SECONDS),
            ))
        }
        ExternalStatus::Processing if age > rules.processing_max_seconds => {
            Some(Decision::review_with(
                FindingKind::StuckProcessing,
                details(rules.processing_max_seconds),
            ))
        }
        ExternalStatus::RequiresPaymentMethod
        | ExternalStatus::RequiresConfirmation
        | ExternalStatus::RequiresAction => {
            let after = rules.abandoned_after_seconds?;
            (age > after).then(|| Decision::review_with(FindingKind::Abandoned, details(after)))
        }
        _ => None,
    }
}
