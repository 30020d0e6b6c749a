//! The two status vocabularies being compared: ours (`payments.status`) and
//! Stripe's (`PaymentIntent.status`).

use std::fmt;

/// The canonical local state of a payment: the design note's three
/// `payments.status` values plus `refunded` (docs/schema.md, "Status words").
///
/// The application's own words for these states are mapped at the database
/// edge (`RECONCILER_LOCAL_STATUSES`, `config::StatusMap`); classification
/// only ever sees canonical states. A word the map does not know is kept
/// verbatim in [`LocalStatus::Other`] so it can be reported, not rejected.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LocalStatus {
    /// The payment is awaiting an outcome.
    Pending,
    /// We treated the payment as paid (goods may have shipped).
    Paid,
    /// We treated the payment as failed.
    Failed,
    /// We treated the payment as refunded (the money went back to the
    /// customer), fully or in part.
    Refunded,
    /// Any other value found in the column (the raw word).
    Other(String),
}

impl LocalStatus {
    /// Every named state (all but `Other`): the four canonical states the
    /// application's status words map to, in `RECONCILER_LOCAL_STATUSES`
    /// order.
    pub const ALL: [LocalStatus; 4] = [
        LocalStatus::Pending,
        LocalStatus::Paid,
        LocalStatus::Failed,
        LocalStatus::Refunded,
    ];

    /// The three states [`LocalStatus::parse`] knows by name (the design
    /// note's `payments.status` values), in its order: a subset of
    /// [`LocalStatus::ALL`] without `refunded`. The metric labels keep these
    /// (`reconcile::labels`), so the label set stays what it has been.
    pub const PARSED: [LocalStatus; 3] =
        [LocalStatus::Pending, LocalStatus::Paid, LocalStatus::Failed];

    /// Parses a value in the default vocabulary (`pending`, `paid`, `failed`,
    /// the default `RECONCILER_LOCAL_STATUSES`); never fails (any other
    /// string, `refunded` included, becomes `Other`).
    pub fn parse(value: &str) -> Self {
        match value {
            "pending" => Self::Pending,
            "paid" => Self::Paid,
            "failed" => Self::Failed,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The canonical state called `name` (`pending`, `paid`, `failed`,
    /// `refunded`); `None` for any other name.
    pub fn canonical(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// The canonical state's name, or the raw word of `Other`.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Pending => "pending",
            Self::Paid => "paid",
            Self::Failed => "failed",
            Self::Refunded => "refunded",
            Self::Other(s) => s,
        }
    }
}

impl fmt::Display for LocalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Stripe PaymentIntent status.
///
/// Source: Stripe API reference, `PaymentIntent.status` (seven documented
/// values; see `shared/stripe/FACTS.md`). Stripe may add values: they are kept
/// in [`ExternalStatus::Unknown`] and classified as needing review.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ExternalStatus {
    /// `requires_payment_method`: new, or back here after a failed attempt.
    RequiresPaymentMethod,
    /// `requires_confirmation`: waiting for the integration to confirm.
    RequiresConfirmation,
    /// `requires_action`: waiting for the customer (e.g. 3-D Secure).
    RequiresAction,
    /// `processing`: the payment method is being processed (ACH and SEPA
    /// debits can stay here for days).
    Processing,
    /// `requires_capture`: authorised, not captured (Stripe cancels it after
    /// about 7 days).
    RequiresCapture,
    /// `canceled`: final, no money moved.
    Canceled,
    /// `succeeded`: final, funds captured (a refund or dispute does not
    /// change this status).
    Succeeded,
    /// A status string Stripe does not (yet) document.
    Unknown(String),
}

impl ExternalStatus {
    /// Stripe's seven documented statuses, in the API reference's order.
    pub const ALL: [ExternalStatus; 7] = [
        ExternalStatus::RequiresPaymentMethod,
        ExternalStatus::RequiresConfirmation,
        ExternalStatus::RequiresAction,
        ExternalStatus::Processing,
        ExternalStatus::RequiresCapture,
        ExternalStatus::Canceled,
        ExternalStatus::Succeeded,
    ];

    /// Parses Stripe's status string; never fails (new values become `Unknown`).
    pub fn parse(value: &str) -> Self {
        match value {
            "requires_payment_method" => Self::RequiresPaymentMethod,
            "requires_confirmation" => Self::RequiresConfirmation,
            "requires_action" => Self::RequiresAction,
            "processing" => Self::Processing,
            "requires_capture" => Self::RequiresCapture,
            "canceled" => Self::Canceled,
            "succeeded" => Self::Succeeded,
            other => Self::Unknown(other.to_owned()),
        }
    }

    /// Stripe's string for this status.
    pub fn as_str(&self) -> &str {
        match self {
            Self::RequiresPaymentMethod => "requires_payment_method",
            Self::RequiresConfirmation => "requires_confirmation",
            Self::RequiresAction => "requires_action",
            Self::Processing => "processing",
            Self::RequiresCapture => "requires_capture",
            Self::Canceled => "canceled",
            Self::Succeeded => "succeeded",
            Self::Unknown(s) => s,
        }
    }

    /// Whether Stripe is still moving this PaymentIntent towards an outcome
    /// (the design note's `_EXTERNAL_IN_FLIGHT`).
    pub fn is_in_flight(&self) -> bool {
        matches!(
            self,
            Self::Processing
                | Self::RequiresAction
                | Self::RequiresConfirmation
                | Self::RequiresCapture
        )
    }
}

impl fmt::Display for ExternalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::LocalStatus;

    /// `RECONCILER_LOCAL_STATUSES` maps an application's word onto one of
    /// the four canonical states by name; any other name is refused.
    #[test]
    fn only_the_four_canonical_names_name_a_canonical_state() {
        assert_eq!(
            LocalStatus::canonical("pending"),
            Some(LocalStatus::Pending)
        );
        assert_eq!(LocalStatus::canonical("paid"), Some(LocalStatus::Paid));
        assert_eq!(LocalStatus::canonical("failed"), Some(LocalStatus::Failed));
        assert_eq!(
            LocalStatus::canonical("refunded"),
            Some(LocalStatus::Refunded)
        );
        for other in ["succeeded", "PAID", "", "chargeback"] {
            assert_eq!(LocalStatus::canonical(other), None, "{other}");
        }
    }
}
