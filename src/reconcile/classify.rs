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
///    row carries a currency or an amount. Proven money always wins: a
///    charge with `disputed: true` is `disputed` and one with
///    `amount_refunded > 0` is `refunded` even when the other field is
///    absent (issue 20).
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
/// command (DESIGN.md, "Turn 3 contract": the command waits for a read that
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
    if let Some(local_currency) = &local.currency {
        match &pi.currency {
            None => {
                unproven.get_or_insert("the row has a currency but the PaymentIntent has none");
            }
            Some(stripe_currency)
                if !local_currency.trim().eq_ignore_ascii_case(stripe_currency) =>
            {
                return Money::Finding(Decision::review_with(
                    FindingKind::CurrencyMismatch,
                    json!({ "local_currency": local_currency, "stripe_currency": stripe_currency }),
                ));
            }
            Some(_) => {}
        }
    }
    if let Some(decision) = amount_missing(local, pi) {
        return Money::Finding(decision);
    }
    if let Some(amount) = local.amount.as_ref().filter(|a| **a != LocalAmount::Null) {
        match pi.amount {
            None => {
                unproven.get_or_insert("the row has an amount but the PaymentIntent has none");
            }
            Some(stripe_amount) => match minor_units(amount, local, stripe_amount) {
                Err(Money::Unproven(reason)) => {
                    unproven.get_or_insert(reason);
                }
                Err(other) => return other,
                Ok(local_amount) if local_amount != stripe_amount => {
                    let ratio = (local_amount != 0).then(|| {
                        (stripe_amount as f64 / local_amount as f64 * 10_000.0).round() / 10_000.0
                    });
                    return Money::Finding(Decision::review_with(
                        FindingKind::AmountMismatch,
                        json!({
                            "local_amount": local_amount,
                            "local_amount_major": major_text(amount),
                            "stripe_amount": stripe_amount,
                            "currency": pi.currency,
                            "stripe_to_local_ratio": ratio,
                        }),
                    ));
                }
                Ok(_) => {}
            },
        }
    }
    unproven.map_or(Money::Kept, Money::Unproven)
}

/// An `amount_mismatch` for a row the application treats as paid or
/// refunded (money it believes it took) whose configured amount column is
/// NULL: nothing says what it charged, so nothing can be compared (issue 30:
/// a NULL amount on a row with money is a finding, not `in_sync`). Details:
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
        (Some(a), Some(c)) if c < a => a - c,
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
mod tests {
    use chrono::{Duration, TimeZone};
    use serde_json::Value;

    use super::*;
    use crate::reconcile::{Charge, RepairCommand, Verdict};

    /// The run's clock in these tests: far from the real one, so a
    /// `classify` that read the system clock would age every PaymentIntent
    /// by years and fail the boundary rows.
    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2001, 3, 4, 12, 0, 0).unwrap()
    }

    fn local(status: &str) -> LocalPayment {
        LocalPayment::with_status(LocalStatus::parse(status))
    }

    /// A row whose configured amount column holds NULL.
    fn null_amount(status: &str) -> LocalPayment {
        LocalPayment {
            amount: Some(LocalAmount::Null),
            ..local(status)
        }
    }

    /// A PaymentIntent as Stripe answers it: $10.99, created an hour before
    /// `now()`, card, automatic capture, no charge yet.
    fn pi(status: &str) -> PaymentIntentFacts {
        PaymentIntentFacts {
            amount: Some(1099),
            amount_received: Some(0),
            currency: Some("usd".into()),
            created: Some(now() - Duration::hours(1)),
            capture_method: Some("automatic".into()),
            payment_method_types: vec!["card".into()],
            ..PaymentIntentFacts::with_status(ExternalStatus::parse(status))
        }
    }

    fn charged(mut facts: PaymentIntentFacts, charge: Charge) -> PaymentIntentFacts {
        facts.charge = ChargeFacts::Known(charge);
        facts
    }

    fn charge(amount: i64, amount_refunded: i64, refunded: bool, disputed: bool) -> Charge {
        Charge {
            amount: Some(amount),
            amount_captured: Some(amount),
            amount_refunded: Some(amount_refunded),
            refunded: Some(refunded),
            disputed: Some(disputed),
        }
    }

    /// A succeeded PaymentIntent whose charge was captured whole and nothing
    /// happened to it since.
    fn clean_success() -> PaymentIntentFacts {
        charged(pi("succeeded"), charge(1099, 0, false, false))
    }

    fn kind(d: &Decision) -> Option<String> {
        d.kind.as_ref().map(|k| k.as_str().into_owned())
    }

    fn detail<'a>(d: &'a Decision, field: &str) -> &'a Value {
        d.details
            .as_ref()
            .and_then(|v| v.get(field))
            .unwrap_or(&Value::Null)
    }

    fn rules() -> Rules {
        Rules {
            auth_expiry_warn_seconds: 1_000,
            processing_max_seconds: 2_000,
            abandoned_after_seconds: Some(3_000),
        }
    }

    /// `pi(status)` created `age` seconds before `now()`.
    fn aged(status: &str, age: i64) -> PaymentIntentFacts {
        PaymentIntentFacts {
            created: Some(now() - Duration::seconds(age)),
            ..pi(status)
        }
    }

    struct Row {
        case: &'static str,
        local: LocalPayment,
        pi: PaymentIntentFacts,
        verdict: Verdict,
        kind: Option<&'static str>,
        command: Option<RepairCommand>,
        /// Fields the decision's details must hold, with these values.
        details: Value,
    }

    fn row(
        case: &'static str,
        local: LocalPayment,
        pi: PaymentIntentFacts,
        verdict: Verdict,
        kind: Option<&'static str>,
    ) -> Row {
        Row {
            case,
            local,
            pi,
            verdict,
            kind,
            command: None,
            details: Value::Null,
        }
    }

    fn check(rows: Vec<Row>, rules: &Rules) {
        for r in rows {
            let d = classify(&r.local, &r.pi, rules, now());
            let case = r.case;
            assert_eq!(d.verdict, r.verdict, "{case}: {d:?}");
            assert_eq!(kind(&d).as_deref(), r.kind, "{case}: {d:?}");
            assert_eq!(d.command, r.command, "{case}: {d:?}");
            assert_eq!(
                d.command.is_some(),
                d.verdict == Verdict::Repairable,
                "{case}: only a repairable decision carries a command"
            );
            if d.verdict == Verdict::Unverifiable && d.kind.is_some() {
                let why = detail(&d, "money_unproven");
                assert!(
                    why.is_string(),
                    "{case}: drift without the money proven says why: {d:?}"
                );
                assert_eq!(why, detail(&d, "reason"), "{case}");
            }
            if let Value::Object(expected) = &r.details {
                for (field, value) in expected {
                    assert_eq!(detail(&d, field), value, "{case}: details.{field} in {d:?}");
                }
            }
        }
    }

    #[test]
    fn money_rows_of_the_beyond_status_table() {
        let with_money = |status: &str, amount: i64, currency: &str| LocalPayment {
            amount: Some(LocalAmount::Minor(amount)),
            currency: Some(currency.into()),
            ..local(status)
        };
        let jpy = |mut facts: PaymentIntentFacts| {
            facts.amount = Some(100_000);
            facts.currency = Some("jpy".into());
            charged(facts, charge(100_000, 0, false, false))
        };
        let rows = vec![
            Row {
                details: serde_json::json!({
                    "amount": 1099, "amount_refunded": 1099, "currency": "usd",
                    "refund": "full", "refund_share": 1.0,
                }),
                ..row(
                    "full refund: money beats status (pending + succeeded is not repaired)",
                    local("pending"),
                    charged(pi("succeeded"), charge(1099, 1099, true, false)),
                    Verdict::NeedsReview,
                    Some("refunded"),
                )
            },
            Row {
                details: serde_json::json!({
                    "amount": 2000, "amount_refunded": 500, "currency": "usd",
                    "refund": "partial", "refund_share": 0.25,
                }),
                ..row(
                    "partial refund",
                    local("pending"),
                    charged(pi("succeeded"), charge(2000, 500, false, false)),
                    Verdict::NeedsReview,
                    Some("refunded"),
                )
            },
            Row {
                details: serde_json::json!({ "refund": "partial", "amount_refunded": 1 }),
                ..row(
                    "a refund of one cent on a paid row",
                    local("paid"),
                    charged(pi("succeeded"), charge(1099, 1, false, false)),
                    Verdict::NeedsReview,
                    Some("refunded"),
                )
            },
            Row {
                details: serde_json::json!({ "amount": 1099, "currency": "usd" }),
                ..row(
                    "disputed, on a pending row",
                    local("pending"),
                    charged(pi("succeeded"), charge(1099, 0, false, true)),
                    Verdict::NeedsReview,
                    Some("disputed"),
                )
            },
            row(
                "disputed, on a paid row that is otherwise in sync",
                local("paid"),
                charged(pi("succeeded"), charge(1099, 0, false, true)),
                Verdict::NeedsReview,
                Some("disputed"),
            ),
            row(
                "duplicate: a clean missed success on a shared PaymentIntent is not repaired",
                LocalPayment {
                    shares_payment_intent: true,
                    ..local("pending")
                },
                clean_success(),
                Verdict::NeedsReview,
                Some("duplicate_payment_intent"),
            ),
            row(
                "duplicate: a paid row in sync that shares its PaymentIntent",
                LocalPayment {
                    shares_payment_intent: true,
                    ..local("paid")
                },
                clean_success(),
                Verdict::NeedsReview,
                Some("duplicate_payment_intent"),
            ),
            Row {
                details: serde_json::json!({ "local_currency": "eur", "stripe_currency": "usd" }),
                ..row(
                    "currency mismatch",
                    with_money("pending", 1099, "eur"),
                    clean_success(),
                    Verdict::NeedsReview,
                    Some("currency_mismatch"),
                )
            },
            Row {
                command: Some(RepairCommand::ApplyPaymentSucceeded),
                ..row(
                    "USD vs usd is the same currency: the status table decides",
                    with_money("pending", 1099, "USD"),
                    clean_success(),
                    Verdict::Repairable,
                    Some("missed_success"),
                )
            },
            row(
                "usd vs usd, same amount, paid: in sync",
                with_money("paid", 1099, "usd"),
                clean_success(),
                Verdict::InSync,
                None,
            ),
            Row {
                details: serde_json::json!({
                    "local_amount": 1000, "stripe_amount": 100000, "currency": "jpy",
                    "stripe_to_local_ratio": 100.0,
                }),
                ..row(
                    "amount mismatch: yen stored as if it had cents (100x)",
                    with_money("pending", 1000, "JPY"),
                    jpy(pi("succeeded")),
                    Verdict::NeedsReview,
                    Some("amount_mismatch"),
                )
            },
            row(
                "amount mismatch on a paid row in sync by status",
                with_money("paid", 1000, "jpy"),
                jpy(pi("succeeded")),
                Verdict::NeedsReview,
                Some("amount_mismatch"),
            ),
            Row {
                details: serde_json::json!({
                    "local_amount": null, "stripe_amount": 1099, "currency": "usd",
                }),
                ..row(
                    "a paid row whose configured amount is NULL: a finding, not in sync (issue 30)",
                    null_amount("paid"),
                    clean_success(),
                    Verdict::NeedsReview,
                    Some("amount_mismatch"),
                )
            },
            Row {
                details: serde_json::json!({ "local_amount": null, "stripe_amount": null }),
                ..row(
                    "a paid row whose amount is NULL, Stripe's answer has none either: a finding",
                    null_amount("paid"),
                    PaymentIntentFacts {
                        amount: None,
                        ..clean_success()
                    },
                    Verdict::NeedsReview,
                    Some("amount_mismatch"),
                )
            },
            Row {
                command: Some(RepairCommand::ApplyPaymentSucceeded),
                ..row(
                    "a pending row whose amount is NULL: nothing to compare yet, repaired",
                    null_amount("pending"),
                    clean_success(),
                    Verdict::Repairable,
                    Some("missed_success"),
                )
            },
            row(
                "a failed row whose amount is NULL, Stripe failed too: in sync",
                null_amount("failed"),
                pi("canceled"),
                Verdict::InSync,
                None,
            ),
            Row {
                command: Some(RepairCommand::ApplyPaymentSucceeded),
                ..row(
                    "no columns configured: the amounts are not compared",
                    local("pending"),
                    jpy(pi("succeeded")),
                    Verdict::Repairable,
                    Some("missed_success"),
                )
            },
            Row {
                command: Some(RepairCommand::ApplyPaymentCanceled),
                ..row(
                    "refund on a canceled PaymentIntent (released authorisation) is ignored",
                    local("pending"),
                    charged(pi("canceled"), charge(1099, 1099, true, false)),
                    Verdict::Repairable,
                    Some("missed_cancel"),
                )
            },
            row(
                "the latest charge not expanded on a succeeded PaymentIntent: the missed success is shown, not repaired",
                local("pending"),
                PaymentIntentFacts {
                    charge: ChargeFacts::NotExpanded,
                    ..pi("succeeded")
                },
                Verdict::Unverifiable,
                Some("missed_success"),
            ),
            row(
                "not expanded on a paid row: not stamped in sync either",
                local("paid"),
                PaymentIntentFacts {
                    charge: ChargeFacts::NotExpanded,
                    ..pi("succeeded")
                },
                Verdict::Unverifiable,
                None,
            ),
            Row {
                command: Some(RepairCommand::ApplyPaymentCanceled),
                ..row(
                    "not expanded on a canceled PaymentIntent: no money to check",
                    local("pending"),
                    PaymentIntentFacts {
                        charge: ChargeFacts::NotExpanded,
                        ..pi("canceled")
                    },
                    Verdict::Repairable,
                    Some("missed_cancel"),
                )
            },
            Row {
                command: Some(RepairCommand::ApplyPaymentSucceeded),
                ..row(
                    "a clean success is still a missed success",
                    local("pending"),
                    clean_success(),
                    Verdict::Repairable,
                    Some("missed_success"),
                )
            },
        ];
        check(rows, &Rules::default());
    }

    #[test]
    fn an_unexpanded_charge_says_why_it_is_unverifiable() {
        let d = classify(
            &local("pending"),
            &PaymentIntentFacts {
                charge: ChargeFacts::NotExpanded,
                ..pi("succeeded")
            },
            &Rules::default(),
            now(),
        );
        let reason = detail(&d, "reason").as_str().unwrap_or_default();
        assert!(reason.contains("expanded"), "{d:?}");
        assert_eq!(detail(&d, "money_unproven").as_str(), Some(reason));
        assert_eq!(
            (kind(&d).as_deref(), d.command),
            (Some("missed_success"), None)
        );
    }

    #[test]
    fn money_that_cannot_be_proven_kept_is_never_repaired() {
        let missing_fields = Charge {
            amount_refunded: None,
            disputed: None,
            ..charge(1099, 0, false, false)
        };
        // Authorised 1000, captured 600, yet only 300 "refunded": the figures
        // contradict each other, so no refund can be ruled out.
        let contradictory = Charge {
            amount: Some(1000),
            amount_captured: Some(600),
            amount_refunded: Some(300),
            refunded: Some(false),
            disputed: Some(false),
        };
        for (case, facts) in [
            ("no latest charge", pi("succeeded")),
            (
                "charge without refund fields",
                charged(pi("succeeded"), missing_fields),
            ),
            (
                "contradictory partial capture",
                charged(pi("succeeded"), contradictory),
            ),
        ] {
            for (status, drift) in [
                ("pending", Some("missed_success")),
                ("failed", Some("unexpected:failed->succeeded")),
                ("paid", None),
            ] {
                let d = classify(&local(status), &facts, &Rules::default(), now());
                assert_eq!(d.verdict, Verdict::Unverifiable, "{case}, {status}: {d:?}");
                assert_eq!((kind(&d).as_deref(), d.command), (drift, None), "{case}");
                assert!(detail(&d, "reason").is_string(), "{case}: {d:?}");
                assert_eq!(
                    detail(&d, "money_unproven").is_string(),
                    drift.is_some(),
                    "{case}, {status}: only status drift is marked money_unproven"
                );
            }
        }
        // A partial capture whose released rest is all that was "refunded"
        // is money kept: the missed success is repaired.
        let partial_capture = Charge {
            amount: Some(1000),
            amount_captured: Some(600),
            amount_refunded: Some(400),
            refunded: Some(false),
            disputed: Some(false),
        };
        let d = classify(
            &local("pending"),
            &charged(pi("succeeded"), partial_capture),
            &Rules::default(),
            now(),
        );
        assert_eq!(d.command, Some(RepairCommand::ApplyPaymentSucceeded));
    }

    #[test]
    fn proven_money_wins_and_unproven_money_never_hides_status_drift() {
        let without_disputed = |amount_refunded| Charge {
            disputed: None,
            ..charge(1099, amount_refunded, amount_refunded == 1099, false)
        };
        let without_refund = |disputed| Charge {
            amount_refunded: None,
            refunded: None,
            ..charge(1099, 0, false, disputed)
        };
        let with_money = |status: &str| LocalPayment {
            amount: Some(LocalAmount::Minor(1099)),
            currency: Some("usd".into()),
            ..local(status)
        };
        let no_money = |status: &str| PaymentIntentFacts {
            amount: None,
            currency: None,
            ..pi(status)
        };
        // `check` asserts that a drift row carries `money_unproven`; a row
        // without drift must not.
        let unproven = |case, local, pi, kind: Option<&'static str>| Row {
            details: match kind {
                Some(_) => Value::Null,
                None => serde_json::json!({ "money_unproven": null }),
            },
            ..row(case, local, pi, Verdict::Unverifiable, kind)
        };
        let rows = vec![
            Row {
                details: serde_json::json!({ "amount_refunded": 500, "refund": "partial" }),
                ..row(
                    "refunded without disputed: the refund is proven",
                    local("paid"),
                    charged(pi("succeeded"), without_disputed(500)),
                    Verdict::NeedsReview,
                    Some("refunded"),
                )
            },
            Row {
                details: serde_json::json!({ "refund": "full" }),
                ..row(
                    "fully refunded without disputed, on a pending row",
                    local("pending"),
                    charged(pi("succeeded"), without_disputed(1099)),
                    Verdict::NeedsReview,
                    Some("refunded"),
                )
            },
            row(
                "disputed without amount_refunded: the dispute is proven",
                local("paid"),
                charged(pi("succeeded"), without_refund(true)),
                Verdict::NeedsReview,
                Some("disputed"),
            ),
            row(
                "a proven currency mismatch beats a charge without disputed",
                LocalPayment {
                    currency: Some("eur".into()),
                    ..local("pending")
                },
                charged(pi("succeeded"), without_disputed(0)),
                Verdict::NeedsReview,
                Some("currency_mismatch"),
            ),
            unproven(
                "missed_success: a charge without disputed",
                local("pending"),
                charged(pi("succeeded"), without_disputed(0)),
                Some("missed_success"),
            ),
            unproven(
                "missed_success: a charge without amount_refunded",
                local("pending"),
                charged(pi("succeeded"), without_refund(false)),
                Some("missed_success"),
            ),
            unproven(
                "unexpected: failed locally, succeeded at Stripe, no latest charge",
                local("failed"),
                pi("succeeded"),
                Some("unexpected:failed->succeeded"),
            ),
            unproven(
                "missed_cancel: the row has an amount and currency the PaymentIntent lacks",
                with_money("pending"),
                no_money("canceled"),
                Some("missed_cancel"),
            ),
            unproven(
                "paid_locally_not_externally: the PaymentIntent lacks the amount",
                with_money("paid"),
                no_money("requires_payment_method"),
                Some("paid_locally_not_externally"),
            ),
            unproven(
                "paid and succeeded: no drift, so nothing beside the unproven money",
                local("paid"),
                charged(pi("succeeded"), without_disputed(0)),
                None,
            ),
            unproven(
                "pending and processing: in flight, no drift to show",
                with_money("pending"),
                no_money("processing"),
                None,
            ),
        ];
        check(rows, &Rules::default());
    }

    #[test]
    fn money_decisions_are_never_repairable() {
        // Every money kind, on every local status, with every Stripe status:
        // none of them may carry a command.
        for status in ["pending", "paid", "failed"] {
            for external in ["succeeded", "canceled", "processing", "requires_capture"] {
                for facts in [
                    charged(pi(external), charge(1099, 1099, true, false)),
                    charged(pi(external), charge(1099, 0, false, true)),
                ] {
                    let dup = LocalPayment {
                        shares_payment_intent: true,
                        ..local(status)
                    };
                    let d = classify(&dup, &facts, &Rules::default(), now());
                    assert_eq!(
                        (d.verdict, d.command),
                        (Verdict::NeedsReview, None),
                        "{status} -> {external}"
                    );
                }
            }
        }
    }

    #[test]
    fn aging_rows_at_their_exact_boundaries() {
        let r = rules();
        let (auth, processing, abandoned) = (1_000, 2_000, 3_000);
        let mut rows = Vec::new();
        for (status, threshold, kind, in_window) in [
            (
                "requires_capture",
                auth,
                "authorization_expiring",
                Verdict::InFlight,
            ),
            (
                "processing",
                processing,
                "stuck_processing",
                Verdict::InFlight,
            ),
            (
                "requires_payment_method",
                abandoned,
                "abandoned",
                Verdict::InSync,
            ),
            (
                "requires_confirmation",
                abandoned,
                "abandoned",
                Verdict::InFlight,
            ),
            ("requires_action", abandoned, "abandoned", Verdict::InFlight),
        ] {
            rows.push(row(
                "one second before the threshold",
                local("pending"),
                aged(status, threshold - 1),
                in_window,
                None,
            ));
            rows.push(row(
                "exactly at the threshold",
                local("pending"),
                aged(status, threshold),
                in_window,
                None,
            ));
            rows.push(row(
                "one second past the threshold",
                local("pending"),
                aged(status, threshold + 1),
                Verdict::NeedsReview,
                Some(kind),
            ));
        }
        check(rows, &r);
    }

    #[test]
    fn aging_details_carry_the_clock_and_a_deadline() {
        let created = now() - Duration::seconds(1_001);
        let auth = classify(
            &local("pending"),
            &PaymentIntentFacts {
                capture_method: Some("manual".into()),
                ..aged("requires_capture", 1_001)
            },
            &rules(),
            now(),
        );
        assert_eq!(kind(&auth).as_deref(), Some("authorization_expiring"));
        assert_eq!(detail(&auth, "created"), &Value::from(created.to_rfc3339()));
        assert_eq!(
            detail(&auth, "deadline"),
            &Value::from((created + Duration::days(7)).to_rfc3339()),
            "an authorisation lapses about 7 days after it was created"
        );
        assert_eq!(detail(&auth, "capture_method"), "manual");

        let created = now() - Duration::seconds(2_001);
        let sepa = classify(
            &local("pending"),
            &PaymentIntentFacts {
                payment_method_types: vec!["sepa_debit".into()],
                ..aged("processing", 2_001)
            },
            &rules(),
            now(),
        );
        assert_eq!(kind(&sepa).as_deref(), Some("stuck_processing"));
        assert_eq!(
            detail(&sepa, "deadline"),
            &Value::from((created + Duration::seconds(2_000)).to_rfc3339())
        );
        assert_eq!(
            detail(&sepa, "payment_method_types"),
            &serde_json::json!(["sepa_debit"])
        );

        let created = now() - Duration::seconds(3_001);
        let gone = classify(
            &local("pending"),
            &aged("requires_payment_method", 3_001),
            &rules(),
            now(),
        );
        assert_eq!(kind(&gone).as_deref(), Some("abandoned"));
        assert_eq!(
            detail(&gone, "deadline"),
            &Value::from((created + Duration::seconds(3_000)).to_rfc3339())
        );
    }

    #[test]
    fn abandoned_is_off_when_its_threshold_is_none() {
        let off = Rules {
            abandoned_after_seconds: None,
            ..rules()
        };
        let year = 365 * 24 * 3600;
        check(
            vec![
                row(
                    "a year in requires_payment_method, rule off",
                    local("pending"),
                    aged("requires_payment_method", year),
                    Verdict::InSync,
                    None,
                ),
                row(
                    "a year in requires_action, rule off",
                    local("pending"),
                    aged("requires_action", year),
                    Verdict::InFlight,
                    None,
                ),
                row(
                    "the other aging rules still apply",
                    local("pending"),
                    aged("requires_capture", year),
                    Verdict::NeedsReview,
                    Some("authorization_expiring"),
                ),
            ],
            &off,
        );
        assert_eq!(
            Rules::default().abandoned_after_seconds,
            None,
            "off by default"
        );
    }

    #[test]
    fn aging_applies_to_pending_rows_only() {
        let month = 30 * 24 * 3600;
        check(
            vec![
                row(
                    "a paid row in processing stays paid_locally_not_externally only",
                    local("paid"),
                    aged("processing", month),
                    Verdict::NeedsReview,
                    Some("paid_locally_not_externally"),
                ),
                row(
                    "a paid row in requires_capture likewise",
                    local("paid"),
                    aged("requires_capture", month),
                    Verdict::NeedsReview,
                    Some("paid_locally_not_externally"),
                ),
                row(
                    "a failed row back in requires_payment_method is in sync, however old",
                    local("failed"),
                    aged("requires_payment_method", month),
                    Verdict::InSync,
                    None,
                ),
                Row {
                    command: Some(RepairCommand::ApplyPaymentSucceeded),
                    ..row(
                        "a pending row with an old succeeded PaymentIntent is a missed success",
                        local("pending"),
                        PaymentIntentFacts {
                            created: Some(now() - Duration::seconds(month)),
                            ..clean_success()
                        },
                        Verdict::Repairable,
                        Some("missed_success"),
                    )
                },
            ],
            &rules(),
        );
        let d = classify(&local("paid"), &aged("processing", month), &rules(), now());
        assert_eq!(d.details, None, "no aging details on a status finding");
    }

    fn refunded() -> LocalPayment {
        LocalPayment::with_status(LocalStatus::Refunded)
    }

    #[test]
    fn a_local_refund_agrees_only_with_a_refund_stripe_shows() {
        let mut rows = vec![
            row(
                "full refund at Stripe: in sync, no refunded finding",
                refunded(),
                charged(pi("succeeded"), charge(1099, 1099, true, false)),
                Verdict::InSync,
                None,
            ),
            row(
                "partial refund at Stripe (partially_refunded mapped to refunded): in sync",
                refunded(),
                charged(pi("succeeded"), charge(2000, 500, false, false)),
                Verdict::InSync,
                None,
            ),
            Row {
                details: serde_json::json!({
                    "stripe_status": "succeeded", "amount": 1099, "amount_refunded": 0,
                    "currency": "usd",
                }),
                ..row(
                    "the charge shows no refund",
                    refunded(),
                    clean_success(),
                    Verdict::NeedsReview,
                    Some("refunded_locally_not_externally"),
                )
            },
            row(
                "a disputed charge stays disputed",
                refunded(),
                charged(pi("succeeded"), charge(1099, 1099, true, true)),
                Verdict::NeedsReview,
                Some("disputed"),
            ),
            row(
                "a charge not expanded: the refund cannot be checked",
                refunded(),
                PaymentIntentFacts {
                    charge: ChargeFacts::NotExpanded,
                    ..pi("succeeded")
                },
                Verdict::Unverifiable,
                None,
            ),
            row(
                "a refund Stripe proves without `disputed`: no dispute can be ruled out",
                refunded(),
                charged(
                    pi("succeeded"),
                    Charge {
                        disputed: None,
                        ..charge(1099, 1099, true, false)
                    },
                ),
                Verdict::Unverifiable,
                None,
            ),
            row(
                "a charge without amount_refunded cannot prove the local refund either way",
                refunded(),
                charged(
                    pi("succeeded"),
                    Charge {
                        amount_refunded: None,
                        refunded: None,
                        ..charge(1099, 0, false, false)
                    },
                ),
                Verdict::Unverifiable,
                None,
            ),
            Row {
                details: serde_json::json!({ "local_amount": 1000, "stripe_amount": 1099 }),
                ..row(
                    "a refund in sync still has its amount compared",
                    LocalPayment {
                        amount: Some(LocalAmount::Minor(1000)),
                        ..refunded()
                    },
                    charged(pi("succeeded"), charge(1099, 1099, true, false)),
                    Verdict::NeedsReview,
                    Some("amount_mismatch"),
                )
            },
        ];
        // A PaymentIntent that never succeeded took no money to give back
        // (a canceled one's released authorisation is no refund).
        for external in [
            "requires_payment_method",
            "requires_confirmation",
            "requires_action",
            "processing",
            "requires_capture",
            "canceled",
            "some_new_status",
        ] {
            rows.push(Row {
                details: serde_json::json!({ "stripe_status": external }),
                ..row(
                    "never succeeded",
                    refunded(),
                    charged(pi(external), charge(1099, 1099, true, false)),
                    Verdict::NeedsReview,
                    Some("refunded_locally_not_externally"),
                )
            });
        }
        check(rows, &rules());
        let kind = FindingKind::RefundedLocallyNotExternally;
        assert!(kind.is_money() && kind.is_blocking());
    }

    #[test]
    fn a_word_the_map_does_not_know_is_unexpected_with_the_raw_word() {
        let d = classify(
            &LocalPayment::with_status(LocalStatus::Other("on_hold".into())),
            &clean_success(),
            &Rules::default(),
            now(),
        );
        assert_eq!(kind(&d).as_deref(), Some("unexpected:on_hold->succeeded"));
        assert_eq!(
            crate::reconcile::kind_label(&kind(&d).unwrap_or_default()),
            "unexpected:other->succeeded"
        );
        assert_eq!(detail(&d, "local_status"), "on_hold");
    }

    #[test]
    fn major_unit_amounts_are_compared_in_minor_units() {
        let major = |status: &str, amount: &str, currency: &str| LocalPayment {
            amount: Some(LocalAmount::Major(amount.into())),
            currency: Some(currency.into()),
            ..local(status)
        };
        let priced = |amount: i64, currency: &str| {
            let mut facts = charged(pi("succeeded"), charge(amount, 0, false, false));
            facts.amount = Some(amount);
            facts.currency = Some(currency.into());
            facts
        };
        let rows = vec![
            row(
                "12.00 USD is 1200 cents",
                major("paid", "12.00", "USD"),
                priced(1200, "usd"),
                Verdict::InSync,
                None,
            ),
            row(
                "1200 JPY is 1200 (zero-decimal)",
                major("paid", "1200", "jpy"),
                priced(1200, "jpy"),
                Verdict::InSync,
                None,
            ),
            row(
                "1.234 KWD is 1234 (three-decimal)",
                major("paid", "1.234", "kwd"),
                priced(1234, "kwd"),
                Verdict::InSync,
                None,
            ),
            row(
                "1200.00 JPY: zero decimals that are all zero are whole yen",
                major("paid", "1200.00", "jpy"),
                priced(1200, "jpy"),
                Verdict::InSync,
                None,
            ),
            Row {
                details: serde_json::json!({
                    "local_amount": 1200, "local_amount_major": "12.00",
                    "stripe_amount": 1250,
                }),
                ..row(
                    "12.00 USD against 1250 cents",
                    major("paid", "12.00", "usd"),
                    priced(1250, "usd"),
                    Verdict::NeedsReview,
                    Some("amount_mismatch"),
                )
            },
            Row {
                details: serde_json::json!({
                    "local_amount_major": "12.345", "stripe_amount": 1234,
                    "currency": "usd", "exponent": 2,
                }),
                ..row(
                    "12.345 USD is no whole number of cents",
                    major("paid", "12.345", "usd"),
                    priced(1234, "usd"),
                    Verdict::NeedsReview,
                    Some("amount_mismatch"),
                )
            },
            row(
                "no currency on the row: the exponent is unknown",
                LocalPayment {
                    currency: None,
                    ..major("paid", "12.00", "usd")
                },
                priced(1200, "usd"),
                Verdict::Unverifiable,
                None,
            ),
        ];
        check(rows, &Rules::default());
        let d = classify(
            &major("paid", "12.345", "usd"),
            &priced(1234, "usd"),
            &Rules::default(),
            now(),
        );
        assert!(
            detail(&d, "reason")
                .as_str()
                .is_some_and(|r| r.contains("not a whole number of minor units")),
            "{d:?}"
        );
    }

    #[test]
    fn money_beats_aging() {
        let d = classify(
            &LocalPayment {
                amount: Some(LocalAmount::Minor(1000)),
                ..local("pending")
            },
            &aged("requires_capture", 10_000),
            &rules(),
            now(),
        );
        assert_eq!(kind(&d).as_deref(), Some("amount_mismatch"));
    }

    #[test]
    fn the_clock_is_the_one_passed_in() {
        // Created a day before `now()` (2001): young by the run's clock,
        // decades old by the system clock.
        let facts = aged("requires_capture", 24 * 3600);
        let d = classify(&local("pending"), &facts, &Rules::default(), now());
        assert_eq!((d.verdict, d.kind), (Verdict::InFlight, None));
        let later = now() + Duration::days(5);
        let d = classify(&local("pending"), &facts, &Rules::default(), later);
        assert_eq!(kind(&d).as_deref(), Some("authorization_expiring"));
        let no_created = PaymentIntentFacts {
            created: None,
            ..facts
        };
        let d = classify(&local("pending"), &no_created, &Rules::default(), later);
        assert_eq!(
            (d.verdict, d.kind),
            (Verdict::InFlight, None),
            "no created, no age"
        );
    }
}
