//! PURE: what disagrees on a finding, as `{field, local, stripe}` (docs/review.md,
//! "The queue": `differs` on every finding) and one short phrase for
//! tables and notifications (`amount 20.00 ≠ 19.99 USD`, `status pending ≠
//! succeeded`, `refunded 5.00 of 5.00 USD`, `no such PaymentIntent`).
//!
//! Computed from what every finding already stores (kind, local and Stripe
//! status, `details`), so findings recorded by earlier releases have one too.
//! Amounts are shown in major units with the currency's exponent
//! ([`super::currency::exponent`]) and the upper-case ISO code.
//!
//! The view `reconciliation_review` computes the same JSON in SQL
//! (`reconciliation_differs` in `migrations/0013_findings_history.sql`); the
//! test `tests/it/review_view.rs` checks both agree for every kind.

use serde_json::Value;

use super::currency::exponent;

/// What disagrees on one finding.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Differs {
    /// What is compared: `amount`, `currency`, `amount_refunded`, `disputed`,
    /// `status`, `payment_intent`, `payment`, `payment_intent_id`,
    /// `stripe_answer` or `write`.
    pub field: String,
    /// The application's side (`None`: it has nothing to say, e.g. no row).
    pub local: Option<String>,
    /// Stripe's side (`None`: Stripe has nothing, e.g. a 404).
    pub stripe: Option<String>,
    /// One short line for a person (not part of the JSON).
    #[serde(skip)]
    pub phrase: String,
}

/// `minor` units of `currency` in major units with its code (`2000`, `usd`
/// → `20.00 USD`; `1000`, `jpy` → `1000 JPY`); without a currency, the
/// minor units as they are.
pub fn money(minor: i64, currency: Option<&str>) -> String {
    match currency.map(str::trim).filter(|c| !c.is_empty()) {
        Some(c) => format!("{} {}", major(minor, c), c.to_ascii_uppercase()),
        None => minor.to_string(),
    }
}

/// `minor` in major units of `currency`, without the code (`2000` → `20.00`).
fn major(minor: i64, currency: &str) -> String {
    let places = exponent(currency) as usize;
    if places == 0 {
        return minor.to_string();
    }
    let sign = if minor < 0 { "-" } else { "" };
    let digits = format!("{:0>width$}", minor.unsigned_abs(), width = places + 1);
    let (whole, fraction) = digits.split_at(digits.len() - places);
    format!("{sign}{whole}.{fraction}")
}

fn int(details: Option<&Value>, key: &str) -> Option<i64> {
    details?.get(key)?.as_i64()
}

/// A [`Differs`] from its parts.
fn make(field: &str, local: Option<String>, stripe: Option<String>, phrase: String) -> Differs {
    Differs {
        field: field.to_owned(),
        local,
        stripe,
        phrase,
    }
}

fn text<'a>(details: Option<&'a Value>, key: &str) -> Option<&'a str> {
    details?.get(key)?.as_str()
}

/// `a ≠ b`, the currency said once when both sides end with the same code
/// (`20.00 USD`, `19.99 USD` → `20.00 ≠ 19.99 USD`).
fn versus(local: Option<&str>, stripe: Option<&str>) -> String {
    let (l, s) = (local.unwrap_or("-"), stripe.unwrap_or("-"));
    if let (Some((lv, lc)), Some((_, sc))) = (l.rsplit_once(' '), s.rsplit_once(' ')) {
        if lc == sc && lc.len() == 3 && lc.bytes().all(|b| b.is_ascii_uppercase()) {
            return format!("{lv} ≠ {s}");
        }
    }
    format!("{l} ≠ {s}")
}

/// What disagrees on a finding of `kind` (its database string), from the
/// statuses recorded with it and its `details` as the detecting code wrote
/// them (`src/reconcile/classify.rs`, `orphan.rs`, `src/record/`). A kind
/// this version does not know, and every status kind, compares statuses.
pub fn differs(
    kind: &str,
    local_status: &str,
    external_status: Option<&str>,
    details: Option<&Value>,
) -> Differs {
    let early = money_differs(kind, local_status, details);
    if let Some(d) = early.or_else(|| subscription_differs(kind, details)) {
        return d;
    }
    let d = details;
    match kind {
        "duplicate_payment_intent" => make(
            "payment_intent",
            Some("on several payments".to_owned()),
            None,
            "one PaymentIntent on several payments".to_owned(),
        ),
        "missing_externally" => make(
            "payment_intent",
            Some(local_status.to_owned()),
            None,
            "no such PaymentIntent".to_owned(),
        ),
        "invalid_payment_intent_id" => make(
            "payment_intent_id",
            Some(local_status.to_owned()),
            None,
            "malformed PaymentIntent id".to_owned(),
        ),
        "persistently_unverifiable" => {
            let stripe = text(d, "last_error").map(str::to_owned);
            let phrase = format!(
                "no answer from Stripe: {}",
                stripe.as_deref().unwrap_or("-")
            );
            make(
                "stripe_answer",
                Some(local_status.to_owned()),
                stripe,
                phrase,
            )
        }
        "write_refused" => {
            let local = text(d, "message").map(|m| match text(d, "sqlstate") {
                Some(code) => format!("{code} {m}"),
                None => m.to_owned(),
            });
            let stripe = text(d, "observed_external_status").map(str::to_owned);
            let phrase = format!("write refused: {}", local.as_deref().unwrap_or("-"));
            make("write", local, stripe, phrase)
        }
        _ => {
            let stripe = external_status.map(str::to_owned);
            let phrase = format!("status {}", versus(Some(local_status), external_status));
            make("status", Some(local_status.to_owned()), stripe, phrase)
        }
    }
}

/// A subscription finding's `differs`, as the scan stored it in
/// `details.differs` (docs/subscriptions.md); `None` for every other kind.
fn subscription_differs(kind: &str, details: Option<&Value>) -> Option<Differs> {
    if !kind.starts_with("subscription_") {
        return None;
    }
    let d = details?.get("differs")?;
    let field = d.get("field")?.as_str()?;
    let (local, stripe) = (text(Some(d), "local"), text(Some(d), "stripe"));
    let phrase = format!("{field} {}", versus(local, stripe));
    Some(make(
        field,
        local.map(str::to_owned),
        stripe.map(str::to_owned),
        phrase,
    ))
}

/// What disagrees on a money finding (amounts, currencies, refunds,
/// disputes, money with no order); `None` for every other kind.
fn money_differs(kind: &str, local_status: &str, details: Option<&Value>) -> Option<Differs> {
    let d = details;
    let currency = text(d, "currency").map(str::trim).filter(|c| !c.is_empty());
    let refund_share = || refund_share(d, currency);
    Some(match kind {
        "amount_mismatch" => amount_differs(d, currency),
        "currency_mismatch" => {
            let up = |k| text(d, k).map(|c| c.trim().to_ascii_uppercase());
            let (local, stripe) = (up("local_currency"), up("stripe_currency"));
            let phrase = format!("currency {}", versus(local.as_deref(), stripe.as_deref()));
            make("currency", local, stripe, phrase)
        }
        "refunded" => {
            let stripe = refund_share();
            let phrase = format!("refunded {}", stripe.as_deref().unwrap_or("at Stripe"));
            make("amount_refunded", None, stripe, phrase)
        }
        "refunded_locally_not_externally" => {
            let stripe = refund_share();
            let phrase = format!(
                "refunded here, {} refunded at Stripe",
                stripe.as_deref().unwrap_or("nothing")
            );
            make(
                "amount_refunded",
                Some(local_status.to_owned()),
                stripe,
                phrase,
            )
        }
        "disputed" => {
            let stripe = int(d, "amount").map(|a| money(a, currency));
            let phrase = match &stripe {
                Some(s) => format!("disputed {s}"),
                None => "disputed at Stripe".to_owned(),
            };
            make("disputed", None, stripe, phrase)
        }
        "missing_locally" => {
            let stripe = int(d, "amount_received")
                .or_else(|| int(d, "amount"))
                .map(|a| money(a, currency));
            let phrase = format!(
                "no payment for {} at Stripe",
                stripe.as_deref().unwrap_or("money")
            );
            make("payment", None, stripe, phrase)
        }
        _ => return None,
    })
}

/// An `amount_mismatch`'s amounts: ours (minor units, or the major-unit
/// text of a `numeric` column) against Stripe's.
fn amount_differs(d: Option<&Value>, currency: Option<&str>) -> Differs {
    let local = int(d, "local_amount")
        .map(|m| money(m, currency))
        .or_else(|| {
            text(d, "local_amount_major").map(|m| match currency {
                Some(c) => format!("{m} {}", c.to_ascii_uppercase()),
                None => m.to_owned(),
            })
        });
    let stripe = int(d, "stripe_amount").map(|m| money(m, currency));
    let phrase = format!("amount {}", versus(local.as_deref(), stripe.as_deref()));
    make("amount", local, stripe, phrase)
}

/// `refunded of amount CUR` (`5.00 of 5.00 USD`); `None` without a refunded
/// amount.
fn refund_share(d: Option<&Value>, currency: Option<&str>) -> Option<String> {
    let refunded = int(d, "amount_refunded")?;
    Some(match (int(d, "amount"), currency) {
        (Some(amount), Some(c)) => format!("{} of {}", major(refunded, c), money(amount, Some(c))),
        (Some(amount), None) => format!("{refunded} of {amount}"),
        (None, c) => money(refunded, c),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(
        kind: &str,
        local: &str,
        ext: Option<&str>,
        details: Value,
        want: (&str, Option<&str>, Option<&str>, &str),
    ) {
        let d = differs(kind, local, ext, Some(&details));
        assert_eq!(
            (
                d.field.as_str(),
                d.local.as_deref(),
                d.stripe.as_deref(),
                d.phrase.as_str()
            ),
            want,
            "{kind} {details}"
        );
    }

    #[test]
    fn amounts_are_major_units_with_the_currencys_exponent() {
        assert_eq!(money(2000, Some("usd")), "20.00 USD");
        assert_eq!(money(5, Some("eur")), "0.05 EUR");
        assert_eq!(money(-310, Some("eur")), "-3.10 EUR");
        assert_eq!(money(1000, Some("jpy")), "1000 JPY");
        assert_eq!(money(1234, Some("kwd")), "1.234 KWD");
        assert_eq!(money(1234, None), "1234");
    }

    #[test]
    fn each_money_kind_says_what_differs() {
        check(
            "amount_mismatch",
            "paid",
            Some("succeeded"),
            json!({"local_amount": 2000, "stripe_amount": 1999, "currency": "usd", "stripe_to_local_ratio": 0.9995}),
            (
                "amount",
                Some("20.00 USD"),
                Some("19.99 USD"),
                "amount 20.00 ≠ 19.99 USD",
            ),
        );
        check(
            "amount_mismatch",
            "paid",
            Some("succeeded"),
            json!({"local_amount": 1000, "stripe_amount": 100000, "currency": "jpy"}),
            (
                "amount",
                Some("1000 JPY"),
                Some("100000 JPY"),
                "amount 1000 ≠ 100000 JPY",
            ),
        );
        check(
            "amount_mismatch",
            "paid",
            Some("succeeded"),
            json!({"local_amount_major": "12.345", "stripe_amount": 12345, "currency": "usd", "exponent": 2}),
            (
                "amount",
                Some("12.345 USD"),
                Some("123.45 USD"),
                "amount 12.345 ≠ 123.45 USD",
            ),
        );
        check(
            "currency_mismatch",
            "paid",
            Some("succeeded"),
            json!({"local_currency": "eur", "stripe_currency": "usd"}),
            ("currency", Some("EUR"), Some("USD"), "currency EUR ≠ USD"),
        );
        check(
            "refunded",
            "paid",
            Some("succeeded"),
            json!({"amount": 500, "amount_refunded": 500, "currency": "usd", "refund": "full", "refund_share": 1.0}),
            (
                "amount_refunded",
                None,
                Some("5.00 of 5.00 USD"),
                "refunded 5.00 of 5.00 USD",
            ),
        );
        check(
            "refunded_locally_not_externally",
            "refunded",
            Some("succeeded"),
            json!({"stripe_status": "succeeded", "amount": 1099, "amount_refunded": 0, "currency": "usd"}),
            (
                "amount_refunded",
                Some("refunded"),
                Some("0.00 of 10.99 USD"),
                "refunded here, 0.00 of 10.99 USD refunded at Stripe",
            ),
        );
        check(
            "disputed",
            "paid",
            Some("succeeded"),
            json!({"amount": 1099, "currency": "usd"}),
            ("disputed", None, Some("10.99 USD"), "disputed 10.99 USD"),
        );
        check(
            "duplicate_payment_intent",
            "paid",
            Some("succeeded"),
            Value::Null,
            (
                "payment_intent",
                Some("on several payments"),
                None,
                "one PaymentIntent on several payments",
            ),
        );
        check(
            "missing_locally",
            "none",
            Some("succeeded"),
            json!({"amount": 1099, "amount_received": 1099, "currency": "eur", "created": null}),
            (
                "payment",
                None,
                Some("10.99 EUR"),
                "no payment for 10.99 EUR at Stripe",
            ),
        );
    }

    #[test]
    fn other_kinds_say_what_differs_too() {
        check(
            "missed_success",
            "pending",
            Some("succeeded"),
            Value::Null,
            (
                "status",
                Some("pending"),
                Some("succeeded"),
                "status pending ≠ succeeded",
            ),
        );
        check(
            "unexpected:failed->succeeded",
            "failed",
            Some("succeeded"),
            Value::Null,
            (
                "status",
                Some("failed"),
                Some("succeeded"),
                "status failed ≠ succeeded",
            ),
        );
        check(
            "missing_externally",
            "pending",
            None,
            json!({"hint": "..."}),
            (
                "payment_intent",
                Some("pending"),
                None,
                "no such PaymentIntent",
            ),
        );
        check(
            "persistently_unverifiable",
            "pending",
            None,
            json!({"last_error": "timeout", "cycles": 3}),
            (
                "stripe_answer",
                Some("pending"),
                Some("timeout"),
                "no answer from Stripe: timeout",
            ),
        );
        check(
            "write_refused",
            "pending",
            None,
            json!({"sqlstate": "23514", "message": "check violated", "observed_external_status": "succeeded"}),
            (
                "write",
                Some("23514 check violated"),
                Some("succeeded"),
                "write refused: 23514 check violated",
            ),
        );
        // Details missing entirely still give a phrase, never a panic.
        let d = differs("amount_mismatch", "paid", None, None);
        assert_eq!(d.phrase, "amount - ≠ -");
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(
            json,
            json!({"field": "amount", "local": null, "stripe": null})
        );
    }
    #[test]
    fn a_malformed_payment_intent_id_names_the_id_not_the_status() {
        check(
            "invalid_payment_intent_id",
            "paid",
            None,
            json!({"payment_intent_id": "not-an-id"}),
            (
                "payment_intent_id",
                Some("paid"),
                None,
                "malformed PaymentIntent id",
            ),
        );
    }

    #[test]
    fn a_subscription_finding_says_the_field_its_scan_stored() {
        check(
            "subscription_price_mismatch",
            "active",
            Some("active"),
            json!({"differs": {"field": "price", "local": "price_basic", "stripe": "price_pro"}}),
            (
                "price",
                Some("price_basic"),
                Some("price_pro"),
                "price price_basic ≠ price_pro",
            ),
        );
        // Only a subscription kind reads `details.differs`.
        check(
            "missed_success",
            "pending",
            Some("succeeded"),
            json!({"differs": {"field": "price", "local": "a", "stripe": "b"}}),
            (
                "status",
                Some("pending"),
                Some("succeeded"),
                "status pending ≠ succeeded",
            ),
        );
    }

    #[test]
    fn the_currency_is_said_once_only_when_both_sides_share_it() {
        assert_eq!(
            versus(Some("20.00 USD"), Some("19.99 USD")),
            "20.00 ≠ 19.99 USD"
        );
        assert_eq!(
            versus(Some("20.00 EUR"), Some("19.99 USD")),
            "20.00 EUR ≠ 19.99 USD"
        );
        // The same last word, but no currency code: both said in full.
        assert_eq!(
            versus(Some("plan monthly"), Some("plan monthly")),
            "plan monthly ≠ plan monthly"
        );
        assert_eq!(versus(Some("1 usd"), Some("2 usd")), "1 usd ≠ 2 usd");
        assert_eq!(versus(None, Some("2 USD")), "- ≠ 2 USD");
    }
}
