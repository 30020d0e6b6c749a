//! Pure classification: no I/O, no async, no database or HTTP types.
//!
//! [`classify`] maps (local row, PaymentIntent facts, rules, the run's clock)
//! to a [`Decision`]; [`classify_status`] is its status table alone. Strings
//! appear only at the edges ([`LocalStatus::parse`], [`ExternalStatus::parse`],
//! the `as_str` methods used by the store).
//!
//! - `acknowledgement`: when a finding resolved by hand stays resolved
//!   ([`acknowledgeable`], [`fingerprint`]).
//! - `classify`: [`classify`], the money checks, the status table, the aging checks.
//! - [`currency`]: Stripe's currency exponents; major units to minor units, exactly.
//! - `decision`: [`Verdict`], [`Decision`], [`RepairCommand`], [`classify_status`].
//! - `differs`: [`Differs`], what disagrees on a finding, and its phrase.
//! - `facts`: what a read of Stripe and of the row tells classification.
//! - `kind`: [`FindingKind`], [`FindingKind::ALL`], money and blocking kinds.
//! - `labels`: bounded metric label values for finding kinds.
//! - `resolution`: [`Resolution`], why a finding was resolved.
//! - `session`: Checkout Sessions: their facts and [`classify_session`]
//!   (docs/checkout-sessions.md).
//! - `status`: [`LocalStatus`], [`ExternalStatus`].
//! - [`subscription`]: subscriptions: their statuses, both sides' facts and
//!   [`subscription::judge_subscription`] (docs/subscriptions.md).

mod acknowledgement;
mod classify;
pub mod currency;
mod decision;
mod differs;
mod facts;
mod kind;
mod labels;
mod orphan;
mod resolution;
mod session;
mod status;
pub mod subscription;

pub use acknowledgement::{acknowledgeable, fingerprint};
pub use classify::{classify, Rules, AUTHORIZATION_LIFETIME_SECONDS};
pub use decision::{classify_status, nothing_to_verify, Decision, RepairCommand, Verdict};
pub use differs::{differs, money, Differs};
pub use facts::{Charge, ChargeFacts, LocalAmount, LocalPayment, PaymentIntentFacts};
pub use kind::FindingKind;
pub use labels::{kind_label, open_findings_by_label, KNOWN_KINDS, MAX_KIND_LABELS, OTHER_KIND};
pub use orphan::orphan_details;
pub use resolution::{Resolution, PAYMENT_DELETED_NOTE};
pub use session::{
    classify_session, CheckoutSessionFacts, SessionJudgement, SessionMode, SessionPaymentIntent,
    SessionPaymentStatus, SessionStatus,
};
pub use status::{ExternalStatus, LocalStatus};

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of the classification table in docs/design.md, as
    /// (local, external, verdict, kind, command).
    type Row = (
        &'static str,
        &'static str,
        Verdict,
        Option<&'static str>,
        Option<RepairCommand>,
    );

    const TABLE: &[Row] = &[
        ("pending", "processing", Verdict::InFlight, None, None),
        ("pending", "requires_action", Verdict::InFlight, None, None),
        (
            "pending",
            "requires_confirmation",
            Verdict::InFlight,
            None,
            None,
        ),
        ("pending", "requires_capture", Verdict::InFlight, None, None),
        ("paid", "succeeded", Verdict::InSync, None, None),
        ("failed", "canceled", Verdict::InSync, None, None),
        (
            "failed",
            "requires_payment_method",
            Verdict::InSync,
            None,
            None,
        ),
        (
            "pending",
            "requires_payment_method",
            Verdict::InSync,
            None,
            None,
        ),
        (
            "pending",
            "succeeded",
            Verdict::Repairable,
            Some("missed_success"),
            Some(RepairCommand::ApplyPaymentSucceeded),
        ),
        (
            "pending",
            "canceled",
            Verdict::Repairable,
            Some("missed_cancel"),
            Some(RepairCommand::ApplyPaymentCanceled),
        ),
        (
            "paid",
            "requires_payment_method",
            Verdict::NeedsReview,
            Some("paid_locally_not_externally"),
            None,
        ),
        (
            "paid",
            "requires_confirmation",
            Verdict::NeedsReview,
            Some("paid_locally_not_externally"),
            None,
        ),
        (
            "paid",
            "requires_action",
            Verdict::NeedsReview,
            Some("paid_locally_not_externally"),
            None,
        ),
        (
            "paid",
            "processing",
            Verdict::NeedsReview,
            Some("paid_locally_not_externally"),
            None,
        ),
        (
            "paid",
            "requires_capture",
            Verdict::NeedsReview,
            Some("paid_locally_not_externally"),
            None,
        ),
        (
            "paid",
            "canceled",
            Verdict::NeedsReview,
            Some("paid_locally_not_externally"),
            None,
        ),
        (
            "paid",
            "blocked_by_new_api",
            Verdict::NeedsReview,
            Some("paid_locally_not_externally"),
            None,
        ),
        // Money-moving direction: succeeded at Stripe, failed here. Never repaired.
        (
            "failed",
            "succeeded",
            Verdict::NeedsReview,
            Some("unexpected:failed->succeeded"),
            None,
        ),
        (
            "failed",
            "processing",
            Verdict::NeedsReview,
            Some("unexpected:failed->processing"),
            None,
        ),
        (
            "failed",
            "requires_action",
            Verdict::NeedsReview,
            Some("unexpected:failed->requires_action"),
            None,
        ),
        (
            "failed",
            "requires_confirmation",
            Verdict::NeedsReview,
            Some("unexpected:failed->requires_confirmation"),
            None,
        ),
        (
            "failed",
            "requires_capture",
            Verdict::NeedsReview,
            Some("unexpected:failed->requires_capture"),
            None,
        ),
        // Unknown strings on either side.
        (
            "pending",
            "some_new_status",
            Verdict::NeedsReview,
            Some("unexpected:pending->some_new_status"),
            None,
        ),
        (
            "failed",
            "some_new_status",
            Verdict::NeedsReview,
            Some("unexpected:failed->some_new_status"),
            None,
        ),
        (
            "refunded",
            "succeeded",
            Verdict::NeedsReview,
            Some("unexpected:refunded->succeeded"),
            None,
        ),
    ];

    #[test]
    fn every_row_of_the_design_table() {
        for &(local, external, verdict, kind, command) in TABLE {
            let d = classify_status(&LocalStatus::parse(local), &ExternalStatus::parse(external));
            let case = format!("{local} -> {external}");
            assert_eq!(d.verdict, verdict, "{case}");
            assert_eq!(
                d.kind.as_ref().map(|k| k.as_str().into_owned()).as_deref(),
                kind,
                "{case}"
            );
            assert_eq!(d.command, command, "{case}");
        }
    }

    #[test]
    fn every_local_and_documented_external_pair_is_covered_by_the_table() {
        let locals = ["pending", "paid", "failed"];
        let externals = [
            "requires_payment_method",
            "requires_confirmation",
            "requires_action",
            "processing",
            "requires_capture",
            "canceled",
            "succeeded",
        ];
        for l in locals {
            for e in externals {
                assert!(
                    TABLE.iter().any(|row| row.0 == l && row.1 == e),
                    "{l} -> {e} is missing from the table test"
                );
            }
        }
    }

    #[test]
    fn only_repairable_decisions_carry_a_command() {
        for &(local, external, ..) in TABLE {
            let d = classify_status(&LocalStatus::parse(local), &ExternalStatus::parse(external));
            assert_eq!(d.command.is_some(), d.verdict == Verdict::Repairable);
            assert_eq!(
                d.kind.is_some(),
                matches!(d.verdict, Verdict::Repairable | Verdict::NeedsReview)
            );
        }
    }

    #[test]
    fn status_strings_round_trip() {
        for s in [
            "requires_payment_method",
            "succeeded",
            "canceled",
            "brand_new",
        ] {
            assert_eq!(ExternalStatus::parse(s).as_str(), s);
        }
        for s in ["pending", "paid", "failed", "refunded"] {
            assert_eq!(LocalStatus::parse(s).as_str(), s);
        }
        for c in RepairCommand::ALL {
            assert_eq!(RepairCommand::parse(c.as_str()), Some(c));
        }
        assert_eq!(RepairCommand::parse("PaymentStatusChanged"), None);
        assert_eq!(
            RepairCommand::EVENT_TYPES.to_vec(),
            RepairCommand::ALL.map(RepairCommand::as_str).to_vec()
        );
    }
}
