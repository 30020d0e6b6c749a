//! The two status vocabularies being compared: ours (`payments.status`) and
//! Stripe's (`PaymentIntent.status`).

use std::fmt;

/// `payments.status` as the design note's CHECK constraint defines it.
///
/// A database that predates the reconciler may hold other strings; they are
/// kept verbatim in [`LocalStatus::Other`] so they can be reported, not
/// rejected.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LocalStatus {
    /// The payment is awaiting an outcome.
    Pending,
    /// We treated the payment as paid (goods may have shipped).
    Paid,
    /// We treated the payment as failed.
    Failed,
    /// Any other value found in the column.
    Other(String),
}

impl LocalStatus {
    /// Parses the database value; never fails (unknown strings become `Other`).
    pub fn parse(value: &str) -> Self {
        match value {
            "pending" => Self::Pending,
            "paid" => Self::Paid,
            "failed" => Self::Failed,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The database value.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Pending => "pending",
            Self::Paid => "paid",
            Self::Failed => "failed",
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
