//! `classify`'s tests: the shared arrangement (a clock far from the real
//! one, rows, PaymentIntent facts, the table checker) here, the cases by
//! subject in `tests/`.

mod aging;
mod local;
mod money;

use chrono::{Duration, TimeZone};
use serde_json::Value;

use super::*;
use crate::{Charge, RepairCommand, Verdict};

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
