//! PURE: the acknowledgement rule. A finding a person resolved by hand
//! (`findings resolve`, [`super::Resolution::Manual`]) is not opened again
//! while what it was resolved for stays the same (docs/findings.md,
//! "Acknowledgements"): the scan compares the new finding's
//! [`fingerprint`] with that of the latest finding of the same payment and
//! kind resolved by hand, and records nothing when they are equal. A changed
//! detail that matters opens a new finding.
//!
//! What matters, per kind (besides the kind itself, the local status word and
//! Stripe's status, which are in every fingerprint):
//!
//! | kind | details that matter |
//! |---|---|
//! | `missed_success`, `missed_cancel`, `paid_locally_not_externally`, `unexpected:…` | none: the drift is the statuses |
//! | `missing_externally`, `invalid_payment_intent_id`, `duplicate_payment_intent` | none |
//! | `refunded`, `refunded_locally_not_externally` | `amount`, `amount_refunded`, `currency` |
//! | `disputed` | `amount`, `currency` |
//! | `amount_mismatch` | `local_amount`, `local_amount_major`, `stripe_amount`, `currency` |
//! | `currency_mismatch` | `local_currency`, `stripe_currency` |
//! | `authorization_expiring`, `stuck_processing`, `abandoned` | `created` (the PaymentIntent's; the deadline follows from it) |
//! | `subscription_*` access, status, period, schedule and missing-externally kinds | none: the drift is the statuses |
//! | `subscription_price_mismatch` | `local_price`, `stripe_prices` |
//! | `subscription_quantity_mismatch` | `local_quantity`, `stripe_quantity` |
//!
//! Never acknowledged: `persistently_unverifiable` and `write_refused` (they
//! say the reconciler could not check or write the row: resolving one by
//! hand says its cause was fixed, and a cause still there must be seen
//! again), and `missing_locally` and `subscription_missing_locally` (recorded by the events feed, one per
//! PaymentIntent). A money, duplicate or aging finding on a row whose status
//! also drifts (e.g. `pending` here, `succeeded` at Stripe, and refunded) is
//! not acknowledged either: it stands in for the status drift ("money beats
//! status"), which an acknowledgement of the money must not hide.
//!
//! Fields not listed (a refund share, a ratio, a deadline, a hint, a reason
//! text) follow from the listed ones or are words, so rewording them in a
//! later release reopens nothing.

use serde_json::{Map, Value};

use super::kind::FindingKind;

/// Whether a finding of `kind` may be kept closed by a manual resolution;
/// `status_in_sync`: the status table alone sees no drift for the row
/// (Stripe answered with a status that agrees with the row's, or one still
/// in flight). See the module doc.
pub fn acknowledgeable(kind: &FindingKind, status_in_sync: bool) -> bool {
    match kind {
        FindingKind::MissedSuccess
        | FindingKind::MissedCancel
        | FindingKind::PaidLocallyNotExternally
        | FindingKind::Unexpected { .. }
        | FindingKind::MissingExternally
        | FindingKind::InvalidPaymentIntentId
        | FindingKind::InvalidCheckoutSessionId => true,
        FindingKind::Refunded
        | FindingKind::RefundedLocallyNotExternally
        | FindingKind::Disputed
        | FindingKind::AmountMismatch
        | FindingKind::CurrencyMismatch
        | FindingKind::DuplicatePaymentIntent
        | FindingKind::AuthorizationExpiring
        | FindingKind::StuckProcessing
        | FindingKind::Abandoned => status_in_sync,
        FindingKind::SubscriptionPaidButBlocked
        | FindingKind::SubscriptionStatusMismatch
        | FindingKind::SubscriptionPeriodStale
        | FindingKind::SubscriptionCancelScheduled
        | FindingKind::SubscriptionMissingExternally => true,
        FindingKind::SubscriptionMissedCancel
        | FindingKind::SubscriptionAccessWithoutPayment
        | FindingKind::SubscriptionPriceMismatch
        | FindingKind::SubscriptionQuantityMismatch => status_in_sync,
        FindingKind::PersistentlyUnverifiable
        | FindingKind::WriteRefused
        | FindingKind::MissingLocally
        | FindingKind::SubscriptionMissingLocally => false,
    }
}

/// The details of `kind` (its database string) that matter for an
/// acknowledgement; `None` for a kind never acknowledged.
fn fields(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "refunded" | "refunded_locally_not_externally" => {
            &["amount", "amount_refunded", "currency"]
        }
        "disputed" => &["amount", "currency"],
        "amount_mismatch" => &[
            "local_amount",
            "local_amount_major",
            "stripe_amount",
            "currency",
        ],
        "currency_mismatch" => &["local_currency", "stripe_currency"],
        "authorization_expiring" | "stuck_processing" | "abandoned" => &["created"],
        "missed_success"
        | "missed_cancel"
        | "paid_locally_not_externally"
        | "missing_externally"
        | "invalid_payment_intent_id"
        | "duplicate_payment_intent" => &[],
        "invalid_checkout_session_id" => &["mode"],
        "subscription_missed_cancel"
        | "subscription_access_without_payment"
        | "subscription_paid_but_blocked"
        | "subscription_status_mismatch"
        | "subscription_period_stale"
        | "subscription_cancel_scheduled"
        | "subscription_missing_externally" => &[],
        "subscription_price_mismatch" => &["local_price", "stripe_prices"],
        "subscription_quantity_mismatch" => &["local_quantity", "stripe_quantity"],
        k if k.starts_with("unexpected:") => &[],
        _ => return None,
    })
}

/// What a finding was resolved for: its kind, the local status word,
/// Stripe's status and the details that matter for its kind (see the module
/// doc), as one JSON object; `None` for a kind never acknowledged. Computed
/// from what every finding stores, so findings recorded by earlier releases
/// have one too. Two findings of the same payment are the same drift when
/// their fingerprints are equal.
pub fn fingerprint(
    kind: &str,
    local_status: &str,
    external_status: Option<&str>,
    details: Option<&Value>,
) -> Option<Value> {
    let mut print = Map::new();
    print.insert("kind".into(), kind.into());
    print.insert("local_status".into(), local_status.into());
    print.insert("external_status".into(), external_status.into());
    for field in fields(kind)? {
        let value = details
            .and_then(|d| d.get(*field))
            .cloned()
            .unwrap_or(Value::Null);
        print.insert((*field).to_owned(), value);
    }
    Some(Value::Object(print))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_kind_is_decided() {
        for kind in FindingKind::ALL {
            let name = kind.as_str();
            let in_sync = acknowledgeable(&kind, true);
            assert_eq!(
                in_sync,
                fields(&name).is_some(),
                "{name}: acknowledgeable and fingerprinted go together"
            );
            if acknowledgeable(&kind, false) {
                assert!(!kind.is_money() && !kind.is_blocking(), "{name}");
            }
        }
        let unexpected = FindingKind::Unexpected {
            local: "failed".into(),
            external: "succeeded".into(),
        };
        assert!(acknowledgeable(&unexpected, false));
        assert!(fingerprint(&unexpected.as_str(), "failed", Some("succeeded"), None).is_some());
    }

    #[test]
    fn words_and_derived_fields_do_not_matter_amounts_do() {
        let refund = |refunded: i64, share: f64| {
            fingerprint(
                "refunded",
                "paid",
                Some("succeeded"),
                Some(
                    &json!({"amount": 1000, "amount_refunded": refunded, "currency": "usd",
                             "refund": "partial", "refund_share": share}),
                ),
            )
        };
        assert_eq!(refund(200, 0.2), refund(200, 0.25));
        assert_ne!(refund(200, 0.2), refund(300, 0.3));
        let hint = |h: &str| {
            fingerprint(
                "missing_externally",
                "pending",
                None,
                Some(&json!({ "hint": h })),
            )
        };
        assert_eq!(hint("set RECONCILER_ACCOUNT_COLUMN"), hint("reworded"));
        assert_ne!(
            fingerprint("missed_success", "pending", Some("succeeded"), None),
            fingerprint("missed_success", "pending", Some("canceled"), None)
        );
        assert_ne!(
            fingerprint("missing_externally", "pending", None, None),
            fingerprint("missing_externally", "paid", None, None)
        );
        assert_eq!(
            fingerprint("persistently_unverifiable", "pending", None, None),
            None
        );
    }
}
