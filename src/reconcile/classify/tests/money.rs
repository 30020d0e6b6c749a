//! Money: the beyond-status table's money rows, an unexpanded charge, money
//! that cannot be proven kept, and why money decisions are never repairable.

use super::*;

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
                "a paid row whose configured amount is NULL: a finding, not in sync",
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

/// Stripe counts a partial capture's released rest in `amount_refunded`
/// and may then say `refunded: true` of the charge (Stripe API: PaymentIntent
/// capture, `amount_to_capture`): no money kept went back, so the payment is
/// not refunded and a missed success is still repaired.
#[test]
fn a_released_rest_flagged_refunded_is_no_refund() {
    let released_rest = Charge {
        amount: Some(1000),
        amount_captured: Some(600),
        amount_refunded: Some(400),
        refunded: Some(true),
        disputed: Some(false),
    };
    let facts = charged(pi("succeeded"), released_rest);
    let d = classify(&local("paid"), &facts, &Rules::default(), now());
    assert_eq!((d.verdict, kind(&d)), (Verdict::InSync, None), "{d:?}");
    let d = classify(&local("pending"), &facts, &Rules::default(), now());
    assert_eq!(d.command, Some(RepairCommand::ApplyPaymentSucceeded));
}

/// A refund of the whole amount is `full` even when the charge's
/// `refunded` flag is absent or false (an older API version, a proxy).
#[test]
fn a_refund_of_the_whole_amount_is_full_whatever_the_flag_says() {
    for flag in [Some(false), None] {
        let whole = Charge {
            refunded: flag,
            ..charge(1099, 1099, false, false)
        };
        let d = classify(
            &local("paid"),
            &charged(pi("succeeded"), whole),
            &Rules::default(),
            now(),
        );
        assert_eq!(kind(&d).as_deref(), Some("refunded"), "{flag:?}: {d:?}");
        assert_eq!(detail(&d, "refund"), "full", "{flag:?}");
        assert_eq!(detail(&d, "amount_refunded"), 1099, "{flag:?}");
    }
    let part = charge(1099, 100, false, false);
    let d = classify(
        &local("paid"),
        &charged(pi("succeeded"), part),
        &Rules::default(),
        now(),
    );
    assert_eq!(detail(&d, "refund"), "partial");
}
