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
    pub const ALL: [FindingKind; 18] = [
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
            | Self::MissingLocally => true,
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
    use crate::reconcile::labels::{kind_label, KNOWN_KINDS, OTHER_KIND};

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
                "missing_locally"
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
            assert!(
                !kind.is_money() || kind.is_blocking(),
                "{kind}: money blocks"
            );
        }
        // Status drift is repaired or reviewed, never a block.
        for c in crate::reconcile::RepairCommand::ALL {
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
