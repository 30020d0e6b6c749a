//! The event types the feed reads and the object each carries: Stripe's
//! names as enums with `ALL`, and the `types[]` lists derived from them at
//! compile time.

/// The event types the feed asks for: the PaymentIntent events, the
/// charge, refund and dispute events, whose object names its PaymentIntent
/// in `payment_intent`, and the Checkout Session events, whose
/// object is the session (twenty in all: Stripe's limit). A refund or a dispute never changes the
/// PaymentIntent's status and emits no `payment_intent.*` event (docs/events.md;
/// Stripe API reference, "Types of events").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `payment_intent.succeeded`
    PaymentIntentSucceeded,
    /// `payment_intent.canceled`
    PaymentIntentCanceled,
    /// `payment_intent.payment_failed`
    PaymentIntentPaymentFailed,
    /// `payment_intent.processing`
    PaymentIntentProcessing,
    /// `payment_intent.requires_action`
    PaymentIntentRequiresAction,
    /// `payment_intent.amount_capturable_updated`
    PaymentIntentAmountCapturableUpdated,
    /// `payment_intent.partially_funded`
    PaymentIntentPartiallyFunded,
    /// `charge.refunded`
    ChargeRefunded,
    /// `charge.refund.updated`
    ChargeRefundUpdated,
    /// `refund.created`
    RefundCreated,
    /// `refund.updated`
    RefundUpdated,
    /// `charge.dispute.created`
    ChargeDisputeCreated,
    /// `charge.dispute.updated`
    ChargeDisputeUpdated,
    /// `charge.dispute.closed`
    ChargeDisputeClosed,
    /// `charge.dispute.funds_withdrawn`
    ChargeDisputeFundsWithdrawn,
    /// `charge.dispute.funds_reinstated`
    ChargeDisputeFundsReinstated,
    /// `checkout.session.completed` (docs/checkout-sessions.md)
    CheckoutSessionCompleted,
    /// `checkout.session.async_payment_succeeded`
    CheckoutSessionAsyncPaymentSucceeded,
    /// `checkout.session.async_payment_failed`
    CheckoutSessionAsyncPaymentFailed,
    /// `checkout.session.expired`
    CheckoutSessionExpired,
}

impl EventType {
    /// Every type the feed asks for, the PaymentIntent events first.
    pub const ALL: [EventType; 20] = [
        EventType::PaymentIntentSucceeded,
        EventType::PaymentIntentCanceled,
        EventType::PaymentIntentPaymentFailed,
        EventType::PaymentIntentProcessing,
        EventType::PaymentIntentRequiresAction,
        EventType::PaymentIntentAmountCapturableUpdated,
        EventType::PaymentIntentPartiallyFunded,
        EventType::ChargeRefunded,
        EventType::ChargeRefundUpdated,
        EventType::RefundCreated,
        EventType::RefundUpdated,
        EventType::ChargeDisputeCreated,
        EventType::ChargeDisputeUpdated,
        EventType::ChargeDisputeClosed,
        EventType::ChargeDisputeFundsWithdrawn,
        EventType::ChargeDisputeFundsReinstated,
        EventType::CheckoutSessionCompleted,
        EventType::CheckoutSessionAsyncPaymentSucceeded,
        EventType::CheckoutSessionAsyncPaymentFailed,
        EventType::CheckoutSessionExpired,
    ];

    /// Stripe's name of the type.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventType::PaymentIntentSucceeded => "payment_intent.succeeded",
            EventType::PaymentIntentCanceled => "payment_intent.canceled",
            EventType::PaymentIntentPaymentFailed => "payment_intent.payment_failed",
            EventType::PaymentIntentProcessing => "payment_intent.processing",
            EventType::PaymentIntentRequiresAction => "payment_intent.requires_action",
            EventType::PaymentIntentAmountCapturableUpdated => {
                "payment_intent.amount_capturable_updated"
            }
            EventType::PaymentIntentPartiallyFunded => "payment_intent.partially_funded",
            EventType::ChargeRefunded => "charge.refunded",
            EventType::ChargeRefundUpdated => "charge.refund.updated",
            EventType::RefundCreated => "refund.created",
            EventType::RefundUpdated => "refund.updated",
            EventType::ChargeDisputeCreated => "charge.dispute.created",
            EventType::ChargeDisputeUpdated => "charge.dispute.updated",
            EventType::ChargeDisputeClosed => "charge.dispute.closed",
            EventType::ChargeDisputeFundsWithdrawn => "charge.dispute.funds_withdrawn",
            EventType::ChargeDisputeFundsReinstated => "charge.dispute.funds_reinstated",
            EventType::CheckoutSessionCompleted => "checkout.session.completed",
            EventType::CheckoutSessionAsyncPaymentSucceeded => {
                "checkout.session.async_payment_succeeded"
            }
            EventType::CheckoutSessionAsyncPaymentFailed => "checkout.session.async_payment_failed",
            EventType::CheckoutSessionExpired => "checkout.session.expired",
        }
    }

    /// The type Stripe calls `name`; `None` for a type the job does not read.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// The object an event of this type carries.
    pub const fn object(self) -> EventObject {
        match self {
            EventType::PaymentIntentSucceeded
            | EventType::PaymentIntentCanceled
            | EventType::PaymentIntentPaymentFailed
            | EventType::PaymentIntentProcessing
            | EventType::PaymentIntentRequiresAction
            | EventType::PaymentIntentAmountCapturableUpdated
            | EventType::PaymentIntentPartiallyFunded => EventObject::PaymentIntent,
            EventType::ChargeRefunded => EventObject::Charge,
            EventType::ChargeRefundUpdated
            | EventType::RefundCreated
            | EventType::RefundUpdated => EventObject::Refund,
            EventType::ChargeDisputeCreated
            | EventType::ChargeDisputeUpdated
            | EventType::ChargeDisputeClosed
            | EventType::ChargeDisputeFundsWithdrawn
            | EventType::ChargeDisputeFundsReinstated => EventObject::Dispute,
            EventType::CheckoutSessionCompleted
            | EventType::CheckoutSessionAsyncPaymentSucceeded
            | EventType::CheckoutSessionAsyncPaymentFailed
            | EventType::CheckoutSessionExpired => EventObject::CheckoutSession,
        }
    }
}

/// The names of [`EventType::ALL`] whose object is `object`, or of all of
/// them (`None`), in that order (PURE, at compile time).
const fn names<const N: usize>(object: Option<EventObject>) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut n) = (0, 0);
    while i < EventType::ALL.len() && n < N {
        let t = EventType::ALL[i];
        let keep = match object {
            None => true,
            Some(o) => t.object() as u8 == o as u8,
        };
        if keep {
            out[n] = t.as_str();
            n += 1;
        }
        i += 1;
    }
    out
}

/// The PaymentIntent event types the job reads ([`EventType`]).
pub const PAYMENT_INTENT_EVENT_TYPES: [&str; 7] = names(Some(EventObject::PaymentIntent));

/// Every event type the feed asks for (`types[]`; Stripe accepts at most 20,
/// API reference "List all events"): the names of [`EventType::ALL`].
pub const EVENT_TYPES: [&str; EventType::ALL.len()] = names(None);

/// What an event's `data.object` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventObject {
    /// A PaymentIntent: the event shows its status.
    PaymentIntent,
    /// A charge (`charge.refunded`).
    Charge,
    /// A refund (`refund.*`, `charge.refund.updated`).
    Refund,
    /// A dispute (`charge.dispute.*`).
    Dispute,
    /// A Checkout Session (`checkout.session.*`).
    CheckoutSession,
}

impl EventObject {
    /// The object an event type carries; `None` for a type the job does not
    /// read.
    pub fn of_type(event_type: &str) -> Option<Self> {
        EventType::parse(event_type).map(EventType::object)
    }

    /// Stripe's `object` word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            EventObject::PaymentIntent => "payment_intent",
            EventObject::Charge => "charge",
            EventObject::Refund => "refund",
            EventObject::Dispute => "dispute",
            EventObject::CheckoutSession => "checkout.session",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_feed_asks_for_at_most_twenty_types_including_every_payment_intent_type() {
        assert!(EVENT_TYPES.len() <= 20, "Stripe accepts at most 20 types[]");
        for t in PAYMENT_INTENT_EVENT_TYPES {
            assert_eq!(EventObject::of_type(t), Some(EventObject::PaymentIntent));
        }
        let unique: std::collections::HashSet<_> = EVENT_TYPES.iter().collect();
        assert_eq!(unique.len(), EVENT_TYPES.len());
    }
}
