//! The two sides being compared, as plain data: what the `payments` row says
//! ([`LocalPayment`]) and what Stripe says ([`PaymentIntentFacts`]). The
//! gateway fills the Stripe side from a PaymentIntent retrieved with
//! `expand[]=latest_charge`; nothing here does I/O.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::status::{ExternalStatus, LocalStatus};

/// One `payments` row, as the classification needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPayment {
    /// `payments.status`.
    pub status: LocalStatus,
    /// The amount from `RECONCILER_AMOUNT_COLUMN`, in the unit of
    /// `RECONCILER_AMOUNT_UNIT`; `None` when the column is not configured,
    /// [`LocalAmount::Null`] when the row holds NULL there.
    pub amount: Option<LocalAmount>,
    /// The ISO currency code from `RECONCILER_CURRENCY_COLUMN`, any case;
    /// `None` when not configured or NULL.
    pub currency: Option<String>,
    /// Another `payments` row holds the same `stripe_payment_intent_id`.
    pub shares_payment_intent: bool,
}

/// An amount as the row holds it (`RECONCILER_AMOUNT_UNIT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalAmount {
    /// `minor`: an integer column in minor units (cents, yen), as Stripe's.
    Minor(i64),
    /// `major`: the decimal text of a `numeric` column in major units
    /// (`12.00` dollars), converted with the row's currency's exponent
    /// ([`super::currency::to_minor_units`]) when compared.
    Major(String),
    /// The column is configured (`RECONCILER_AMOUNT_COLUMN`) and the row
    /// holds NULL: on a row the application treats as paid or refunded, an
    /// `amount_mismatch` (docs/operations.md, "A paid row with no amount");
    /// on any other row, nothing to compare.
    Null,
}

impl LocalPayment {
    /// A row known only by its status (no amount, currency, or duplicate).
    pub fn with_status(status: LocalStatus) -> Self {
        LocalPayment {
            status,
            amount: None,
            currency: None,
            shares_payment_intent: false,
        }
    }
}

/// What a PaymentIntent's latest charge says about the money, as far as the
/// response shows it.
///
/// Source: Stripe API reference, `PaymentIntent.latest_charge` ("expandable":
/// a string id unless `expand[]=latest_charge` was asked, `null` before any
/// attempt) and the pre-2022-11-15 `charges` list (newest first).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ChargeFacts {
    /// `latest_charge: null` (or an empty legacy `charges` list): no charge
    /// was ever attempted.
    #[default]
    None,
    /// `latest_charge` is a bare id, or absent with no `charges` list: the
    /// charge was not expanded, so refunds and disputes are not known.
    NotExpanded,
    /// The charge object.
    Known(Charge),
}

/// The fields of a Stripe Charge the money checks read. Each is `None` when
/// absent or of the wrong JSON type.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Charge {
    /// `amount`, minor units.
    pub amount: Option<i64>,
    /// `amount_captured`, minor units: less than `amount` after a partial
    /// capture, whose uncaptured rest Stripe shows as refunded.
    pub amount_captured: Option<i64>,
    /// `amount_refunded`, minor units (0 when nothing was refunded; includes
    /// the released rest of a partial capture).
    pub amount_refunded: Option<i64>,
    /// `refunded`: the charge was fully refunded.
    pub refunded: Option<bool>,
    /// `disputed`: the charge has a dispute (open or closed).
    pub disputed: Option<bool>,
}

/// The parts of a PaymentIntent the reconciler uses. Everything except the
/// status is optional: a field that is absent, `null` or of the wrong type is
/// `None`, never a parse error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentIntentFacts {
    /// `status`.
    pub status: ExternalStatus,
    /// `amount`, minor units (what the customer is asked to pay).
    pub amount: Option<i64>,
    /// `amount_received`, minor units.
    pub amount_received: Option<i64>,
    /// `currency`, lowercase ISO code as Stripe sends it.
    pub currency: Option<String>,
    /// `created` (Stripe's clock): the aging findings count from it.
    pub created: Option<DateTime<Utc>>,
    /// `capture_method`: `automatic`, `automatic_async` or `manual`.
    pub capture_method: Option<String>,
    /// `payment_method_types`, e.g. `["card"]`, `["sepa_debit"]`.
    pub payment_method_types: Vec<String>,
    /// `metadata` (string values only).
    pub metadata: BTreeMap<String, String>,
    /// The latest charge.
    pub charge: ChargeFacts,
}

impl PaymentIntentFacts {
    /// Facts with only a status (everything else unknown); for tests and the
    /// status-only paths.
    pub fn with_status(status: ExternalStatus) -> Self {
        PaymentIntentFacts {
            status,
            amount: None,
            amount_received: None,
            currency: None,
            created: None,
            capture_method: None,
            payment_method_types: Vec::new(),
            metadata: BTreeMap::new(),
            charge: ChargeFacts::None,
        }
    }
}
