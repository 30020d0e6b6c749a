//! Aging: the rows at their exact boundaries, the clock and deadline in the
//! details, the thresholds, and money beating aging.

use super::*;

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
