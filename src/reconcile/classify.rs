//! The full classification: money checks, then the status table, then the
//! aging checks, over (local row, PaymentIntent facts, rules, the run's clock).

use chrono::{DateTime, Utc};
use serde_json::json;

use super::currency::{self, MinorUnitsError};
use super::decision::{classify_status, Decision, Verdict};
use super::facts::{ChargeFacts, LocalAmount, LocalPayment, PaymentIntentFacts};
use super::kind::FindingKind;
use super::status::{ExternalStatus, LocalStatus};

/// How long Stripe keeps an uncaptured card authorisation before cancelling
/// it, in seconds (about 7 days; Stripe docs, "Place a hold on a payment
/// method"). Used only to show a deadline in `authorization_expiring`.
pub const AUTHORIZATION_LIFETIME_SECONDS: i64 = 7 * 24 * 3600;

/// The thresholds of the aging findings (docs/findings.md, "Finding kinds"), in
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
/// 1. Money (docs/design.md, "Money beyond status"; money beats status, so a row with a
///    money finding gets that finding only): `duplicate_payment_intent`,
///    then, for a `succeeded` PaymentIntent, `disputed` and `refunded` (a
///    refund or a dispute never changes the PaymentIntent's status; it lives
///    on the charge), then `currency_mismatch` and `amount_mismatch` when the
///    row carries a currency or an amount. Proven money always wins: a
///    charge with `disputed: true` is `disputed` and one with
///    `amount_refunded > 0` is `refunded` even when the other field is
///    absent.
/// 2. The status table ([`classify_status`]).
/// 3. Aging, for rows the table calls in flight or in sync:
///    `authorization_expiring`, `stuck_processing`, `abandoned`.
///
/// Money that cannot be proven kept (a `succeeded` PaymentIntent whose
/// charge was not expanded or lacks a field, a row with an amount or
/// currency that Stripe's answer lacks) makes the decision UNVERIFIABLE: the
/// row is neither stamped nor repaired. It never hides status drift: when
/// the status table sees drift, the UNVERIFIABLE decision carries that
/// status finding, with `details.money_unproven` (the reason) and no repair
/// command (docs/design.md, "Money beyond status": the command waits for a read that
/// proves the money).
pub fn classify(
    local: &LocalPayment,
    pi: &PaymentIntentFacts,
    rules: &Rules,
    now: DateTime<Utc>,
) -> Decision {
    let unproven = match money_check(local, pi) {
        Money::Finding(money) => return money,
        Money::Unproven(reason) => reason,
        Money::Kept => {
            let decision = classify_status(&local.status, &pi.status);
            if decision.kind.is_some() {
                return decision;
            }
            return aging_check(local, pi, rules, now).unwrap_or(decision);
        }
    };
    match classify_status(&local.status, &pi.status).kind {
        Some(kind) => Decision {
            kind: Some(kind),
            details: Some(json!({ "reason": unproven, "money_unproven": unproven })),
            ..Decision::plain(Verdict::Unverifiable)
        },
        None => Decision::unverifiable(unproven),
    }
}

/// What the money checks found.
enum Money {
    /// Nothing wrong with the money, as far as the row and Stripe show it.
    Kept,
    /// A money finding, proven by Stripe's answer.
    Finding(Decision),
    /// No money finding is proven, and the money cannot be proven kept: why.
    Unproven(&'static str),
}

fn money_check(local: &LocalPayment, pi: &PaymentIntentFacts) -> Money {
    if local.shares_payment_intent {
        return Money::Finding(Decision::review(FindingKind::DuplicatePaymentIntent));
    }
    // The first reason the money cannot be proven kept; a later check may
    // still prove a money finding, which wins.
    let mut unproven = None;
    if pi.status == ExternalStatus::Succeeded {
        let refunded_locally = local.status == LocalStatus::Refunded;
        match charge_check(pi) {
            // The refund Stripe shows is the one the row records; a dispute
            // it cannot rule out still leaves the money unproven.
            Money::Finding(d) if refunded_locally && d.kind == Some(FindingKind::Refunded) => {
                if matches!(&pi.charge, ChargeFacts::Known(c) if c.disputed.is_none()) {
                    unproven = Some("the latest charge lacks disputed: disputes cannot be checked");
                }
            }
            finding @ Money::Finding(_) => return finding,
            Money::Unproven(reason) => unproven = Some(reason),
            Money::Kept if refunded_locally => return Money::Finding(refund_not_shown(pi)),
            Money::Kept => {}
        }
    }
    match currency_check(local, pi) {
        Err(finding) => return finding,
        Ok(reason) => unproven = unproven.or(reason),
    }
    if let Some(decision) = amount_missing(local, pi) {
        return Money::Finding(decision);
    }
    match amount_check(local, pi) {
        Err(finding) => return finding,
        Ok(reason) => unproven = unproven.or(reason),
    }
    unproven.map_or(Money::Kept, Money::Unproven)
}

/// The row's currency against the PaymentIntent's: `Err` a
/// `currency_mismatch`; `Ok(Some(reason))` when it cannot be compared.
fn currency_check(
    local: &LocalPayment,
    pi: &PaymentIntentFacts,
) -> Result<Option<&'static str>, Money> {
    let Some(local_currency) = &local.currency else {
        return Ok(None);
    };
    match &pi.currency {
        None => Ok(Some(
            "the row has a currency but the PaymentIntent has none",
        )),
        Some(stripe_currency) if !local_currency.trim().eq_ignore_ascii_case(stripe_currency) => {
            Err(Money::Finding(Decision::review_with(
                FindingKind::CurrencyMismatch,
                json!({ "local_currency": local_currency, "stripe_currency": stripe_currency }),
            )))
        }
        Some(_) => Ok(None),
    }
}

/// The row's amount (in the currency's minor units) against the
/// PaymentIntent's: `Err` an `amount_mismatch` (or what converting the
/// amount found); `Ok(Some(reason))` when it cannot be compared.
fn amount_check(
    local: &LocalPayment,
    pi: &PaymentIntentFacts,
) -> Result<Option<&'static str>, Money> {
    let Some(amount) = local.amount.as_ref().filter(|a| **a != LocalAmount::Null) else {
        return Ok(None);
    };
    let Some(stripe_amount) = pi.amount else {
        return Ok(Some("the row has an amount but the PaymentIntent has none"));
    };
    match minor_units(amount, local, stripe_amount) {
        Err(Money::Unproven(reason)) => Ok(Some(reason)),
        Err(other) => Err(other),
        Ok(local_amount) if local_amount != stripe_amount => {
            let ratio = (local_amount != 0).then(|| {
                (stripe_amount as f64 / local_amount as f64 * 10_000.0).round() / 10_000.0
            });
            Err(Money::Finding(Decision::review_with(
                FindingKind::AmountMismatch,
                json!({
                    "local_amount": local_amount,
                    "local_amount_major": major_text(amount),
                    "stripe_amount": stripe_amount,
                    "currency": pi.currency,
                    "stripe_to_local_ratio": ratio,
                }),
            )))
        }
        Ok(_) => Ok(None),
    }
}

/// An `amount_mismatch` for a row the application treats as paid or
/// refunded (money it believes it took) whose configured amount column is
/// NULL: nothing says what it charged, so nothing can be compared (a NULL
/// amount on a row with money is a finding, not `in_sync`; docs/operations.md,
/// "A paid row with no amount"). Details:
/// `local_amount` null, Stripe's amount and currency, the reason. A row in
/// any other state has no money to compare yet (a `pending` row is repaired
/// to `paid` first, then this applies).
fn amount_missing(local: &LocalPayment, pi: &PaymentIntentFacts) -> Option<Decision> {
    let holds_money = matches!(local.status, LocalStatus::Paid | LocalStatus::Refunded);
    (local.amount == Some(LocalAmount::Null) && holds_money).then(|| {
        Decision::review_with(
            FindingKind::AmountMismatch,
            json!({
                "local_amount": null,
                "stripe_amount": pi.amount,
                "currency": pi.currency,
                "reason": "the row's amount (RECONCILER_AMOUNT_COLUMN) is NULL",
            }),
        )
    })
}

/// The row's amount in minor units. A major amount (`RECONCILER_AMOUNT_UNIT=major`)
/// is converted with the row's currency's exponent (the currency check has
/// already matched it with Stripe's); without a currency the exponent is
/// unknown (UNVERIFIABLE), and one that is not a whole number of minor units
/// (12.345 USD) is an `amount_mismatch` whatever Stripe says.
fn minor_units(
    amount: &LocalAmount,
    local: &LocalPayment,
    stripe_amount: i64,
) -> Result<i64, Money> {
    let major = match amount {
        LocalAmount::Minor(minor) => return Ok(*minor),
        LocalAmount::Major(major) => major,
        LocalAmount::Null => return Err(Money::Unproven("the row's amount is NULL")),
    };
    let Some(currency) = &local.currency else {
        return Err(Money::Unproven(
            "the row's amount is in major units but it has no currency: the exponent is unknown",
        ));
    };
    currency::to_minor_units(major, currency).map_err(|e| {
        let exponent = match &e {
            MinorUnitsError::NotWhole { exponent, .. } => Some(*exponent),
            _ => None,
        };
        Money::Finding(Decision::review_with(
            FindingKind::AmountMismatch,
            json!({
                "local_amount_major": major,
                "stripe_amount": stripe_amount,
                "currency": currency,
                "exponent": exponent,
                "reason": e.to_string(),
            }),
        ))
    })
}

fn major_text(amount: &LocalAmount) -> Option<&str> {
    match amount {
        LocalAmount::Major(major) => Some(major),
        LocalAmount::Minor(_) | LocalAmount::Null => None,
    }
}

/// A local `refunded` whose `succeeded` PaymentIntent's charge shows no
/// refund (and no dispute): `refunded_locally_not_externally`.
fn refund_not_shown(pi: &PaymentIntentFacts) -> Decision {
    let (amount, amount_refunded) = match &pi.charge {
        ChargeFacts::Known(c) => (c.amount_captured.or(c.amount), c.amount_refunded),
        _ => (None, None),
    };
    Decision::review_with(
        FindingKind::RefundedLocallyNotExternally,
        json!({
            "stripe_status": pi.status.as_str(),
            "amount": amount.or(pi.amount),
            "amount_refunded": amount_refunded,
            "currency": pi.currency,
        }),
    )
}

/// Refunds and disputes of a `succeeded` PaymentIntent's latest charge.
/// What the charge proves wins (`disputed: true`, or a refund beyond the
/// released rest of a partial capture), whatever else it lacks. Money that
/// cannot be proven kept is never called kept: a missing, unexpanded or
/// incomplete charge, or figures that contradict each other, are
/// [`Money::Unproven`] (so the row is neither repaired nor stamped, and an
/// open money finding is not cleared).
fn charge_check(pi: &PaymentIntentFacts) -> Money {
    let charge = match &pi.charge {
        ChargeFacts::Known(charge) => charge,
        ChargeFacts::NotExpanded => {
            return Money::Unproven(
                "the PaymentIntent succeeded but its latest charge was not expanded: refunds and disputes cannot be checked",
            )
        }
        ChargeFacts::None => {
            return Money::Unproven(
                "the PaymentIntent succeeded but has no latest charge: refunds and disputes cannot be checked",
            )
        }
    };
    let amount = charge.amount_captured.or(charge.amount).or(pi.amount);
    if charge.disputed == Some(true) {
        return Money::Finding(Decision::review_with(
            FindingKind::Disputed,
            json!({ "amount": amount, "currency": pi.currency }),
        ));
    }
    let Some(amount_refunded) = charge.amount_refunded else {
        return Money::Unproven(
            "the latest charge lacks amount_refunded: refunds cannot be checked",
        );
    };
    // A partial capture releases the uncaptured rest, which Stripe counts in
    // `amount_refunded`: that is no refund of money kept (Stripe API:
    // PaymentIntent capture, `amount_to_capture`).
    let released = match (charge.amount, charge.amount_captured) {
        (Some(a), Some(c)) => (a - c).max(0),
        _ => 0,
    };
    if amount_refunded < released {
        return Money::Unproven(
            "the latest charge's amount_refunded is below its uncaptured rest: the refund cannot be told apart",
        );
    }
    let refunded = amount_refunded - released;
    if refunded > 0 || (charge.refunded == Some(true) && released == 0) {
        let full = charge.refunded == Some(true) || amount.is_some_and(|a| refunded >= a);
        let share = amount
            .filter(|a| *a > 0)
            .map(|a| (refunded as f64 / a as f64 * 10_000.0).round() / 10_000.0);
        return Money::Finding(Decision::review_with(
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
    if charge.disputed.is_none() {
        return Money::Unproven("the latest charge lacks disputed: disputes cannot be checked");
    }
    Money::Kept
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

#[cfg(test)]
mod tests;
