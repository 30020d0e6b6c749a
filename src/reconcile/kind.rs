//! The kinds of finding and the two questions every rule asks of one: does
//! money hang on it ([`FindingKind::is_money`]), and does it block repairs
//! ([`FindingKind::is_blocking`]). Both are exhaustive `match`es, so a new
//! kind does not compile until someone decides; [`FindingKind::ALL`] lists
//! every kind with a fixed name, and the metric labels
//! ([`super::labels::KNOWN_KINDS`]) and the store's kind lists are derived
//! from it.

use std::borrow::Cow;
use std::fmt;

/// The kind of a finding, stored in `reconciliation_findings.kind`.
// Deserialize only for the test that lists every variant (see `tests`).
#[cfg_attr(test, derive(serde::Deserialize), serde(rename_all = "snake_case"))]
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
    /// A row without a PaymentIntent id whose Checkout Session column
    /// (`RECONCILER_CHECKOUT_SESSION_COLUMN`) holds a value that is not a
    /// well-formed `cs_…` id (never sent to Stripe), or names a session in
    /// `setup` or `subscription` mode (no PaymentIntent to compare);
    /// `details.reason` says which (docs/checkout-sessions.md).
    InvalidCheckoutSessionId,
    /// The latest charge of a `succeeded` PaymentIntent was refunded, fully
    /// or in part (`amount_refunded > 0`). Money kind.
    Refunded,
    /// Local `refunded` (`RECONCILER_LOCAL_STATUSES`), but Stripe shows no
    /// refund: the latest charge of the `succeeded` PaymentIntent has
    /// nothing refunded, or the PaymentIntent never took the money. Money
    /// kind: the application believes the customer has their money back
    /// (revenue reversed, stock released, the customer told) while Stripe
    /// still holds it, or never held it; either the customer is owed a
    /// refund that was never issued (a chargeback waiting to happen) or the
    /// books count a refund that never left. Only a read that shows the
    /// refund clears it.
    RefundedLocallyNotExternally,
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
    /// The database refused phase 3's write for this row (a trigger, a
    /// constraint, a row lock held past `lock_timeout`, a statement timeout):
    /// the row was not stamped and nothing else was written for it; details
    /// carry the SQLSTATE, the message and which write (docs/scan.md,
    /// "Guards"). NEEDS_REVIEW, never repaired; cleared by a later scan that
    /// writes the row.
    WriteRefused,
    /// The application grants access; Stripe's subscription is `canceled`
    /// or `incomplete_expired` (a missed `customer.subscription.deleted`).
    /// Repairable: the one automatic end of access, Stripe's status being
    /// terminal. Money kind until applied (docs/subscriptions.md).
    SubscriptionMissedCancel,
    /// The application grants access; Stripe denies it otherwise (`unpaid`,
    /// `paused`, `incomplete`, `past_due` under `RECONCILER_PAST_DUE_ACCESS=revoke`).
    /// NEEDS_REVIEW; money kind.
    SubscriptionAccessWithoutPayment,
    /// The application denies access; Stripe grants it (a missed
    /// `invoice.paid`): a paying customer locked out. Repairable when Stripe
    /// is `active` or `trialing`, NEEDS_REVIEW when `past_due`; critical
    /// (alert `StripeReconcilerCustomerLockedOut`).
    SubscriptionPaidButBlocked,
    /// Both sides agree on access; the application's status word stands for
    /// another Stripe status. Repairable.
    SubscriptionStatusMismatch,
    /// Stripe grants; the application's period end is more than a day
    /// before Stripe's. Repairable.
    SubscriptionPeriodStale,
    /// Stripe has an ends-at (`cancel_at`) and has not ended; the
    /// application's ends-at is NULL. Repairable.
    SubscriptionCancelScheduled,
    /// No item of Stripe's subscription bills the application's price.
    /// NEEDS_REVIEW; money at risk when the application grants.
    SubscriptionPriceMismatch,
    /// The application's seats differ from the item's quantity.
    /// NEEDS_REVIEW; money at risk when the application grants more.
    SubscriptionQuantityMismatch,
    /// Stripe answered `resource_missing` for the row's subscription id.
    /// NEEDS_REVIEW.
    SubscriptionMissingExternally,
    /// A granting Stripe subscription no row names (events, list sweeps):
    /// a customer paying for nothing. NEEDS_REVIEW; money kind.
    SubscriptionMissingLocally,
    /// Any other combination: `unexpected:<local>-><external>`.
    Unexpected {
        /// `payments.status`
        local: String,
        /// `PaymentIntent.status`
        external: String,
    },
}

impl FindingKind {
    /// Every kind with a fixed name (all but [`FindingKind::Unexpected`]), in
    /// the order of the specification's classification and money tables
    /// (docs/design.md, "Classification" and "Money beyond status").
    pub const ALL: [FindingKind; 28] = [
        Self::MissedSuccess,
        Self::MissedCancel,
        Self::PaidLocallyNotExternally,
        Self::MissingExternally,
        Self::InvalidPaymentIntentId,
        Self::InvalidCheckoutSessionId,
        Self::Refunded,
        Self::RefundedLocallyNotExternally,
        Self::Disputed,
        Self::AmountMismatch,
        Self::CurrencyMismatch,
        Self::DuplicatePaymentIntent,
        Self::AuthorizationExpiring,
        Self::StuckProcessing,
        Self::Abandoned,
        Self::MissingLocally,
        Self::PersistentlyUnverifiable,
        Self::WriteRefused,
        Self::SubscriptionMissedCancel,
        Self::SubscriptionAccessWithoutPayment,
        Self::SubscriptionPaidButBlocked,
        Self::SubscriptionStatusMismatch,
        Self::SubscriptionPeriodStale,
        Self::SubscriptionCancelScheduled,
        Self::SubscriptionPriceMismatch,
        Self::SubscriptionQuantityMismatch,
        Self::SubscriptionMissingExternally,
        Self::SubscriptionMissingLocally,
    ];

    /// The database value of a kind with a fixed name; `None` for
    /// [`FindingKind::Unexpected`], whose value is built from its statuses.
    pub const fn fixed_name(&self) -> Option<&'static str> {
        Some(match self {
            Self::MissedSuccess => "missed_success",
            Self::MissedCancel => "missed_cancel",
            Self::PaidLocallyNotExternally => "paid_locally_not_externally",
            Self::MissingExternally => "missing_externally",
            Self::InvalidPaymentIntentId => "invalid_payment_intent_id",
            Self::InvalidCheckoutSessionId => "invalid_checkout_session_id",
            Self::Refunded => "refunded",
            Self::RefundedLocallyNotExternally => "refunded_locally_not_externally",
            Self::Disputed => "disputed",
            Self::AmountMismatch => "amount_mismatch",
            Self::CurrencyMismatch => "currency_mismatch",
            Self::DuplicatePaymentIntent => "duplicate_payment_intent",
            Self::AuthorizationExpiring => "authorization_expiring",
            Self::StuckProcessing => "stuck_processing",
            Self::Abandoned => "abandoned",
            Self::MissingLocally => "missing_locally",
            Self::PersistentlyUnverifiable => "persistently_unverifiable",
            Self::WriteRefused => "write_refused",
            Self::SubscriptionMissedCancel => "subscription_missed_cancel",
            Self::SubscriptionAccessWithoutPayment => "subscription_access_without_payment",
            Self::SubscriptionPaidButBlocked => "subscription_paid_but_blocked",
            Self::SubscriptionStatusMismatch => "subscription_status_mismatch",
            Self::SubscriptionPeriodStale => "subscription_period_stale",
            Self::SubscriptionCancelScheduled => "subscription_cancel_scheduled",
            Self::SubscriptionPriceMismatch => "subscription_price_mismatch",
            Self::SubscriptionQuantityMismatch => "subscription_quantity_mismatch",
            Self::SubscriptionMissingExternally => "subscription_missing_externally",
            Self::SubscriptionMissingLocally => "subscription_missing_locally",
            Self::Unexpected { .. } => return None,
        })
    }

    /// The database value of the kind (`missed_success`,
    /// `unexpected:<local>-><external>`, ...).
    pub fn as_str(&self) -> Cow<'static, str> {
        match self {
            Self::Unexpected { local, external } => {
                Cow::Owned(format!("unexpected:{local}->{external}"))
            }
            // Every other variant has a fixed name.
            fixed => Cow::Borrowed(fixed.fixed_name().unwrap_or_default()),
        }
    }

    /// Whether money may be wrong (docs/design.md, "Money beyond status": refunds,
    /// disputes, amounts, currencies, one PaymentIntent on two rows, money
    /// with no order). Only a Stripe answer that shows the money clears one
    /// (a 404 or a malformed id leaves it open).
    pub const fn is_money(&self) -> bool {
        match self {
            Self::Refunded
            | Self::RefundedLocallyNotExternally
            | Self::Disputed
            | Self::AmountMismatch
            | Self::CurrencyMismatch
            | Self::DuplicatePaymentIntent
            | Self::MissingLocally
            // Subscriptions (docs/subscriptions.md, "Money at risk"): access
            // Stripe does not bill for; price and quantity may be (the
            // finding's own flag says whether this row's is).
            | Self::SubscriptionMissedCancel
            | Self::SubscriptionAccessWithoutPayment
            | Self::SubscriptionPriceMismatch
            | Self::SubscriptionQuantityMismatch
            | Self::SubscriptionMissingLocally => true,
            Self::SubscriptionPaidButBlocked
            | Self::SubscriptionStatusMismatch
            | Self::SubscriptionPeriodStale
            | Self::SubscriptionCancelScheduled
            | Self::SubscriptionMissingExternally => false,
            Self::MissedSuccess
            | Self::MissedCancel
            | Self::PaidLocallyNotExternally
            | Self::MissingExternally
            | Self::InvalidPaymentIntentId
            | Self::InvalidCheckoutSessionId
            | Self::AuthorizationExpiring
            | Self::StuckProcessing
            | Self::Abandoned
            | Self::PersistentlyUnverifiable
            | Self::WriteRefused
            | Self::Unexpected { .. } => false,
        }
    }

    /// Whether an open finding of this kind blocks every repair of its
    /// payment (docs/findings.md, "Finding kinds": the money kinds and the aging
    /// kinds are NEEDS_REVIEW and never repaired; the scan enqueues no
    /// command for the payment, the repair worker skips one).
    pub const fn is_blocking(&self) -> bool {
        match self {
            Self::Refunded
            | Self::RefundedLocallyNotExternally
            | Self::Disputed
            | Self::AmountMismatch
            | Self::CurrencyMismatch
            | Self::DuplicatePaymentIntent
            | Self::MissingLocally
            | Self::AuthorizationExpiring
            | Self::StuckProcessing
            | Self::Abandoned
            | Self::PersistentlyUnverifiable => true,
            // A subscription's repair is one compare-and-set per row on the
            // values the scan saw (docs/subscriptions.md, "Repairs"): its
            // money kinds are what the repair ends (a missed cancel), not a
            // reason to hold it.
            Self::SubscriptionMissedCancel
            | Self::SubscriptionAccessWithoutPayment
            | Self::SubscriptionPaidButBlocked
            | Self::SubscriptionStatusMismatch
            | Self::SubscriptionPeriodStale
            | Self::SubscriptionCancelScheduled
            | Self::SubscriptionPriceMismatch
            | Self::SubscriptionQuantityMismatch
            | Self::SubscriptionMissingExternally
            | Self::SubscriptionMissingLocally => false,
            Self::MissedSuccess
            | Self::MissedCancel
            | Self::PaidLocallyNotExternally
            | Self::MissingExternally
            | Self::InvalidPaymentIntentId
            | Self::InvalidCheckoutSessionId
            // The refusal says nothing about the money; whatever the database
            // refused for the scan it refuses for the writer too.
            | Self::WriteRefused
            | Self::Unexpected { .. } => false,
        }
    }

    /// Whether the kind is about a subscription row (docs/subscriptions.md),
    /// not a payment: its name starts with `subscription_`.
    pub const fn is_subscription(&self) -> bool {
        matches!(
            self,
            Self::SubscriptionMissedCancel
                | Self::SubscriptionAccessWithoutPayment
                | Self::SubscriptionPaidButBlocked
                | Self::SubscriptionStatusMismatch
                | Self::SubscriptionPeriodStale
                | Self::SubscriptionCancelScheduled
                | Self::SubscriptionPriceMismatch
                | Self::SubscriptionQuantityMismatch
                | Self::SubscriptionMissingExternally
                | Self::SubscriptionMissingLocally
        )
    }

    /// The database values of the money kinds, for a `text[]` parameter.
    pub fn money_kinds() -> Vec<&'static str> {
        Self::names_where(Self::is_money)
    }

    /// The database values of the blocking kinds, for a `text[]` parameter.
    pub fn blocking_kinds() -> Vec<&'static str> {
        Self::names_where(Self::is_blocking)
    }

    fn names_where(keep: impl Fn(&Self) -> bool) -> Vec<&'static str> {
        Self::ALL
            .iter()
            .filter(|k| keep(k))
            .filter_map(Self::fixed_name)
            .collect()
    }
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use serde::de::{self, Visitor};

    use super::*;
    use crate::labels::{kind_label, KNOWN_KINDS, OTHER_KIND};

    /// What a log line or a notification shows of a kind is its database
    /// string, the same for fixed kinds and the composed `unexpected:` ones.
    #[test]
    fn a_kind_displays_as_its_database_string() {
        assert_eq!(FindingKind::MissedSuccess.to_string(), "missed_success");
        let unexpected = FindingKind::Unexpected {
            local: "failed".into(),
            external: "succeeded".into(),
        };
        assert_eq!(unexpected.to_string(), "unexpected:failed->succeeded");
        for k in FindingKind::ALL {
            assert_eq!(k.to_string(), k.as_str(), "{k:?}");
        }
    }

    /// A deserializer that only records the variant names serde's derive
    /// hands to `deserialize_enum`: every variant the enum has, whether or
    /// not anyone remembered to list it in [`FindingKind::ALL`].
    struct VariantNames<'a>(&'a mut &'static [&'static str]);

    impl<'de> de::Deserializer<'de> for VariantNames<'_> {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("only an enum"))
        }

        fn deserialize_enum<V: Visitor<'de>>(
            self,
            _: &'static str,
            variants: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = variants;
            Err(de::Error::custom("names recorded"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map struct identifier ignored_any
        }
    }

    fn every_variant_name() -> &'static [&'static str] {
        let mut names: &'static [&'static str] = &[];
        let _ = <FindingKind as serde::Deserialize>::deserialize(VariantNames(&mut names));
        names
    }

    #[test]
    fn all_lists_every_variant_but_unexpected_under_its_database_name() {
        let declared: Vec<&str> = every_variant_name()
            .iter()
            .copied()
            .filter(|n| *n != "unexpected")
            .collect();
        assert_eq!(declared.len(), every_variant_name().len() - 1);
        let listed: Vec<Option<&str>> = FindingKind::ALL.iter().map(|k| k.fixed_name()).collect();
        let declared: Vec<Option<&str>> = declared.into_iter().map(Some).collect();
        assert_eq!(
            listed, declared,
            "FindingKind::ALL must list every kind with a fixed name, in declaration order, \
             and fixed_name must be the snake_case of the variant"
        );
    }

    #[test]
    fn every_kind_is_its_own_metric_label() {
        assert_eq!(KNOWN_KINDS.len(), FindingKind::ALL.len());
        let mut seen = HashSet::new();
        for kind in FindingKind::ALL {
            let name = kind.as_str();
            assert_ne!(kind_label(&name), OTHER_KIND, "{name} has no label");
            assert_eq!(kind_label(&name), name, "{name} keeps its name");
            assert!(seen.insert(name.clone()), "{name} is listed twice");
        }
    }

    #[test]
    fn the_store_lists_follow_the_match_arms() {
        let money = FindingKind::money_kinds();
        let blocking = FindingKind::blocking_kinds();
        assert_eq!(
            money,
            [
                "refunded",
                "refunded_locally_not_externally",
                "disputed",
                "amount_mismatch",
                "currency_mismatch",
                "duplicate_payment_intent",
                "missing_locally",
                "subscription_missed_cancel",
                "subscription_access_without_payment",
                "subscription_price_mismatch",
                "subscription_quantity_mismatch",
                "subscription_missing_locally"
            ]
        );
        assert_eq!(
            blocking,
            [
                "refunded",
                "refunded_locally_not_externally",
                "disputed",
                "amount_mismatch",
                "currency_mismatch",
                "duplicate_payment_intent",
                "authorization_expiring",
                "stuck_processing",
                "abandoned",
                "missing_locally",
                "persistently_unverifiable"
            ]
        );
        for kind in FindingKind::ALL {
            let name = kind.as_str();
            assert_eq!(kind.is_subscription(), name.starts_with("subscription_"));
            if kind.is_subscription() {
                assert!(!kind.is_blocking(), "{kind}: a subscription never blocks");
            } else {
                assert!(
                    !kind.is_money() || kind.is_blocking(),
                    "{kind}: a payment's money blocks"
                );
            }
        }
        // Status drift is repaired or reviewed, never a block.
        for c in crate::RepairCommand::ALL {
            assert!(!c.finding_kind().is_blocking());
        }
        let unexpected = FindingKind::Unexpected {
            local: "failed".into(),
            external: "succeeded".into(),
        };
        assert_eq!(unexpected.as_str(), "unexpected:failed->succeeded");
        assert!(!unexpected.is_money() && !unexpected.is_blocking());
    }
}
