//! The local row: a local refund, a status word the map does not know, and
//! amounts kept in major units.

use super::*;

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
        crate::kind_label(&kind(&d).unwrap_or_default()),
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
