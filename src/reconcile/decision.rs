//! The typed outcome of comparing one payment with Stripe.

use std::fmt;

use super::kind::FindingKind;
use super::status::{ExternalStatus, LocalStatus};

/// How a payment compares with its PaymentIntent (design note `Verdict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    /// Both sides agree.
    InSync,
    /// Recently changed locally, or Stripe is still processing: not judged now.
    InFlight,
    /// Safe to repair through the canonical writer.
    Repairable,
    /// Never repaired automatically: money or goods may be involved.
    NeedsReview,
    /// Stripe could not be asked. Not healthy, not drift.
    Unverifiable,
}

impl Verdict {
    /// Every verdict, in report order.
    pub const ALL: [Verdict; 5] = [
        Verdict::InSync,
        Verdict::InFlight,
        Verdict::Repairable,
        Verdict::NeedsReview,
        Verdict::Unverifiable,
    ];

    /// The label used in logs, metrics and the run history (`in_sync`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::InSync => "in_sync",
            Verdict::InFlight => "in_flight",
            Verdict::Repairable => "repairable",
            Verdict::NeedsReview => "needs_review",
            Verdict::Unverifiable => "unverifiable",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A command for the canonical writer, written to `outbox.event_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RepairCommand {
    /// `pending -> paid`
    ApplyPaymentSucceeded,
    /// `pending -> failed`
    ApplyPaymentCanceled,
}

impl RepairCommand {
    /// Every repair command.
    pub const ALL: [RepairCommand; 2] = [
        RepairCommand::ApplyPaymentSucceeded,
        RepairCommand::ApplyPaymentCanceled,
    ];

    /// The outbox `event_type` of every repair command (the worker, `status`
    /// and `findings resolve` filter a possibly shared outbox on these).
    pub const EVENT_TYPES: [&'static str; 2] = [
        Self::ApplyPaymentSucceeded.as_str(),
        Self::ApplyPaymentCanceled.as_str(),
    ];

    /// The outbox `event_type` of the command.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ApplyPaymentSucceeded => "ApplyPaymentSucceeded",
            Self::ApplyPaymentCanceled => "ApplyPaymentCanceled",
        }
    }

    /// The finding kind this command repairs (the classification table).
    pub fn finding_kind(self) -> FindingKind {
        match self {
            Self::ApplyPaymentSucceeded => FindingKind::MissedSuccess,
            Self::ApplyPaymentCanceled => FindingKind::MissedCancel,
        }
    }

    /// Parses an outbox `event_type`; `None` for any other event type.
    pub fn parse(event_type: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == event_type)
    }
}

impl fmt::Display for RepairCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to do about one payment: a verdict, the finding to record (if any) and
/// the repair command to enqueue for it (if any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// How the two sides compare.
    pub verdict: Verdict,
    /// The finding to record; `None` for in-sync and in-flight. An
    /// UNVERIFIABLE decision carries one only when the status table sees
    /// drift the money cannot be proven for (`details.money_unproven`).
    pub kind: Option<FindingKind>,
    /// Only for [`Verdict::Repairable`].
    pub command: Option<RepairCommand>,
    /// What a person needs to judge the finding (amounts in minor units,
    /// currency, refund share, deadlines), stored in
    /// `reconciliation_findings.details`; for an UNVERIFIABLE decision, the
    /// reason (`{"reason": ...}`, plus `"money_unproven"` when it carries a
    /// status finding).
    pub details: Option<serde_json::Value>,
}

impl Decision {
    /// Why an UNVERIFIABLE decision could not be proven: `details.reason`,
    /// or `None` for any other decision or one without a reason.
    pub fn unverifiable_reason(&self) -> Option<&str> {
        if self.verdict != Verdict::Unverifiable {
            return None;
        }
        self.details.as_ref()?.get("reason")?.as_str()
    }

    /// A decision without a finding.
    pub const fn plain(verdict: Verdict) -> Self {
        Decision {
            verdict,
            kind: None,
            command: None,
            details: None,
        }
    }

    /// A NEEDS_REVIEW decision of the given kind.
    pub fn review(kind: FindingKind) -> Self {
        Decision {
            verdict: Verdict::NeedsReview,
            kind: Some(kind),
            command: None,
            details: None,
        }
    }

    /// A NEEDS_REVIEW decision with details.
    pub fn review_with(kind: FindingKind, details: serde_json::Value) -> Self {
        Decision {
            details: Some(details),
            ..Self::review(kind)
        }
    }

    /// An UNVERIFIABLE decision with the reason.
    pub fn unverifiable(reason: impl Into<String>) -> Self {
        Decision {
            details: Some(serde_json::json!({ "reason": reason.into() })),
            ..Self::plain(Verdict::Unverifiable)
        }
    }

    fn repair(kind: FindingKind, command: RepairCommand) -> Self {
        Decision {
            verdict: Verdict::Repairable,
            kind: Some(kind),
            command: Some(command),
            details: None,
        }
    }
}

/// Whether a row has nothing at Stripe to verify: `pending` locally with a
/// NULL or empty (blank) PaymentIntent id, and no Checkout Session to judge
/// it by. Such a row is a checkout the customer never confirmed: counted,
/// never a finding. A `paid` (or any other) row without a PaymentIntent id
/// stays an `invalid_payment_intent_id` finding: its money is unproven.
pub fn nothing_to_verify(local: &super::LocalStatus, payment_intent_id: Option<&str>) -> bool {
    *local == super::LocalStatus::Pending
        && payment_intent_id.map_or(true, |pi| pi.trim().is_empty())
}

/// Compares a payment's local status with its PaymentIntent's status only
/// (the status table; [`super::classify`] adds the money and aging checks).
///
/// Pure: the rule table of docs/design.md ("Classification"), which restates the
/// design note's `classify` with one deliberate departure: a locally `failed`
/// payment whose PaymentIntent is back in `requires_payment_method` is in sync,
/// because Stripe returns a PaymentIntent to that state after a failed attempt.
/// Money-moving directions (paid locally; succeeded externally but failed
/// locally) are never repairable. A local `refunded` agrees with a
/// `succeeded` PaymentIntent here (whether the charge shows the refund is
/// [`super::classify`]'s question) and with nothing else:
/// `refunded_locally_not_externally`.
pub fn classify_status(local: &LocalStatus, external: &ExternalStatus) -> Decision {
    use ExternalStatus as E;
    use LocalStatus as L;
    match (local, external) {
        (L::Pending, e) if e.is_in_flight() => Decision::plain(Verdict::InFlight),
        (L::Paid, E::Succeeded)
        | (L::Failed, E::Canceled)
        | (L::Failed, E::RequiresPaymentMethod)
        | (L::Pending, E::RequiresPaymentMethod) => Decision::plain(Verdict::InSync),
        (L::Pending, E::Succeeded) => Decision::repair(
            FindingKind::MissedSuccess,
            RepairCommand::ApplyPaymentSucceeded,
        ),
        (L::Pending, E::Canceled) => Decision::repair(
            FindingKind::MissedCancel,
            RepairCommand::ApplyPaymentCanceled,
        ),
        // A refund leaves the PaymentIntent `succeeded`: as far as status
        // can tell they agree; `classify` asks the charge whether the money
        // went back.
        (L::Refunded, E::Succeeded) => Decision::plain(Verdict::InSync),
        // Nothing was ever captured, so nothing can have been refunded.
        (L::Refunded, external) => Decision::review_with(
            FindingKind::RefundedLocallyNotExternally,
            serde_json::json!({ "stripe_status": external.as_str() }),
        ),
        (L::Paid, _) => Decision::review(FindingKind::PaidLocallyNotExternally),
        (local, external) => {
            let kind = FindingKind::Unexpected {
                local: local.as_str().to_owned(),
                external: external.as_str().to_owned(),
            };
            match local {
                // A word `RECONCILER_LOCAL_STATUSES` does not map: the raw
                // word is kept for the reviewer (the metric label says `other`).
                L::Other(word) => {
                    Decision::review_with(kind, serde_json::json!({ "local_status": word }))
                }
                _ => Decision::review(kind),
            }
        }
    }
}

#[cfg(test)]
mod nothing_to_verify_tests {
    use super::nothing_to_verify;
    use crate::LocalStatus;

    #[test]
    fn only_a_pending_row_without_a_payment_intent_id_has_nothing_to_verify() {
        assert!(nothing_to_verify(&LocalStatus::Pending, None));
        assert!(nothing_to_verify(&LocalStatus::Pending, Some(" ")));
        assert!(!nothing_to_verify(&LocalStatus::Pending, Some("pi_1")));
        assert!(!nothing_to_verify(&LocalStatus::Paid, None));
        assert!(!nothing_to_verify(&LocalStatus::Failed, Some("")));
    }
}

#[cfg(test)]
mod label_tests {
    use super::{Decision, RepairCommand, Verdict};
    use crate::FindingKind;

    /// The verdict labels are metric label values and run-history words
    /// (docs/metrics.md): renaming one breaks dashboards and alert rules.
    #[test]
    fn every_verdict_has_its_documented_label_in_as_str_and_display() {
        let labels: Vec<(&str, String)> = Verdict::ALL
            .iter()
            .map(|v| (v.as_str(), v.to_string()))
            .collect();
        let expected = [
            "in_sync",
            "in_flight",
            "repairable",
            "needs_review",
            "unverifiable",
        ];
        assert_eq!(labels.len(), expected.len());
        for ((label, shown), want) in labels.iter().zip(expected) {
            assert_eq!(*label, want);
            assert_eq!(shown, want);
        }
    }

    #[test]
    fn a_repair_command_displays_as_its_outbox_event_type() {
        assert_eq!(
            RepairCommand::ApplyPaymentSucceeded.to_string(),
            "ApplyPaymentSucceeded"
        );
        assert_eq!(
            RepairCommand::ApplyPaymentCanceled.to_string(),
            "ApplyPaymentCanceled"
        );
    }

    #[test]
    fn only_an_unverifiable_decision_gives_its_reason() {
        let d = Decision::unverifiable("the read timed out");
        assert_eq!(d.unverifiable_reason(), Some("the read timed out"));
        // A review decision whose details happen to hold a `reason` is not
        // unverifiable: it has no unverifiable reason.
        let review = Decision::review_with(
            FindingKind::Disputed,
            serde_json::json!({ "reason": "fraudulent" }),
        );
        assert_eq!(review.unverifiable_reason(), None);
        // Unverifiable without details, or details without a reason.
        assert_eq!(
            Decision::plain(Verdict::Unverifiable).unverifiable_reason(),
            None
        );
        let no_reason = Decision {
            details: Some(serde_json::json!({ "money_unproven": true })),
            ..Decision::plain(Verdict::Unverifiable)
        };
        assert_eq!(no_reason.unverifiable_reason(), None);
    }
}
