//! The typed outcome of comparing one payment with Stripe.

use std::borrow::Cow;
use std::fmt;

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

/// The kind of a finding, stored in `reconciliation_findings.kind`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FindingKind {
    /// Local `pending`, Stripe `succeeded`: the success webhook was missed.
    MissedSuccess,
    /// Local `pending`, Stripe `canceled`: the cancel webhook was missed.
    MissedCancel,
    /// Local `paid`, Stripe anything but `succeeded`: goods may have shipped unpaid.
    PaidLocallyNotExternally,
    /// Stripe answered 404 for the PaymentIntent id.
    MissingExternally,
    /// The id stored in `payments.stripe_payment_intent_id` is not a well-formed
    /// `pi_...` id, so it was never sent to Stripe.
    InvalidPaymentIntentId,
    /// The latest charge of a `succeeded` PaymentIntent was refunded, fully
    /// or in part (`amount_refunded > 0`). Money kind.
    Refunded,
    /// The latest charge of a `succeeded` PaymentIntent is disputed. Money kind.
    Disputed,
    /// The row's amount (`RECONCILER_AMOUNT_COLUMN`) differs from the
    /// PaymentIntent's `amount`. Money kind.
    AmountMismatch,
    /// The row's currency (`RECONCILER_CURRENCY_COLUMN`) differs from the
    /// PaymentIntent's `currency`. Money kind.
    CurrencyMismatch,
    /// Another `payments` row holds the same PaymentIntent id. Money kind.
    DuplicatePaymentIntent,
    /// Local `pending`, Stripe `requires_capture` for longer than
    /// `RECONCILER_AUTH_EXPIRY_WARN_SECONDS`: the authorisation expires (about
    /// 7 days after `created`) unless someone captures it.
    AuthorizationExpiring,
    /// Local `pending`, Stripe `processing` for longer than
    /// `RECONCILER_PROCESSING_MAX_SECONDS`.
    StuckProcessing,
    /// Local `pending`, Stripe waiting for the customer for longer than
    /// `RECONCILER_ABANDONED_AFTER_SECONDS`.
    Abandoned,
    /// A `succeeded` PaymentIntent no `payments` row points at.
    MissingLocally,
    /// Stripe could not answer for this row in `RECONCILER_UNVERIFIABLE_CYCLES`
    /// consecutive cycles.
    PersistentlyUnverifiable,
    /// Any other combination: `unexpected:<local>-><external>`.
    Unexpected {
        /// `payments.status`
        local: String,
        /// `PaymentIntent.status`
        external: String,
    },
}

impl FindingKind {
    /// The database value of the kind.
    pub fn as_str(&self) -> Cow<'static, str> {
        match self {
            Self::MissedSuccess => Cow::Borrowed("missed_success"),
            Self::MissedCancel => Cow::Borrowed("missed_cancel"),
            Self::PaidLocallyNotExternally => Cow::Borrowed("paid_locally_not_externally"),
            Self::MissingExternally => Cow::Borrowed("missing_externally"),
            Self::InvalidPaymentIntentId => Cow::Borrowed("invalid_payment_intent_id"),
            Self::Refunded => Cow::Borrowed("refunded"),
            Self::Disputed => Cow::Borrowed("disputed"),
            Self::AmountMismatch => Cow::Borrowed("amount_mismatch"),
            Self::CurrencyMismatch => Cow::Borrowed("currency_mismatch"),
            Self::DuplicatePaymentIntent => Cow::Borrowed("duplicate_payment_intent"),
            Self::AuthorizationExpiring => Cow::Borrowed("authorization_expiring"),
            Self::StuckProcessing => Cow::Borrowed("stuck_processing"),
            Self::Abandoned => Cow::Borrowed("abandoned"),
            Self::MissingLocally => Cow::Borrowed("missing_locally"),
            Self::PersistentlyUnverifiable => Cow::Borrowed("persistently_unverifiable"),
            Self::Unexpected { local, external } => {
                Cow::Owned(format!("unexpected:{local}->{external}"))
            }
        }
    }
}

impl FindingKind {
    /// The kinds where money may be wrong (DESIGN.md "Beyond status"). An
    /// open finding of one of these blocks every repair of its payment.
    pub const MONEY_KINDS: [&'static str; 6] = [
        "refunded",
        "disputed",
        "amount_mismatch",
        "currency_mismatch",
        "duplicate_payment_intent",
        "missing_locally",
    ];

    /// The kinds of DESIGN.md's "Beyond status" table: NEEDS_REVIEW, never
    /// repaired, and an open one blocks every repair of its payment (the
    /// scan enqueues no command, the repair worker skips one).
    pub const BLOCKING_KINDS: [&'static str; 10] = [
        "refunded",
        "disputed",
        "amount_mismatch",
        "currency_mismatch",
        "duplicate_payment_intent",
        "missing_locally",
        "authorization_expiring",
        "stuck_processing",
        "abandoned",
        "persistently_unverifiable",
    ];

    /// Whether money may be wrong (see [`FindingKind::MONEY_KINDS`]).
    pub fn is_money(&self) -> bool {
        Self::MONEY_KINDS.contains(&self.as_str().as_ref())
    }
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
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
    /// The finding to record; `None` for in-sync, in-flight and unverifiable.
    pub kind: Option<FindingKind>,
    /// Only for [`Verdict::Repairable`].
    pub command: Option<RepairCommand>,
    /// What a person needs to judge the finding (amounts in minor units,
    /// currency, refund share, deadlines), stored in
    /// `reconciliation_findings.details`; for an UNVERIFIABLE decision, the
    /// reason (`{"reason": ...}`).
    pub details: Option<serde_json::Value>,
}

impl Decision {
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

/// Compares a payment's local status with its PaymentIntent's status only
/// (the status table; [`super::classify`] adds the money and aging checks).
///
/// Pure: the rule table of `DESIGN.md` ("Classification"), which restates the
/// design note's `classify` with one deliberate departure: a locally `failed`
/// payment whose PaymentIntent is back in `requires_payment_method` is in sync,
/// because Stripe returns a PaymentIntent to that state after a failed attempt.
/// Money-moving directions (paid locally; succeeded externally but failed
/// locally) are never repairable.
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
        (L::Paid, _) => Decision::review(FindingKind::PaidLocallyNotExternally),
        (local, external) => Decision::review(FindingKind::Unexpected {
            local: local.as_str().to_owned(),
            external: external.as_str().to_owned(),
        }),
    }
}
