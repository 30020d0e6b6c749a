//! What one page of the feed hands the events job: the events that name a
//! PaymentIntent, the Checkout Session events, and what was skipped.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::types::EventObject;
use crate::reconcile::ExternalStatus;
use crate::stripe::id::{CheckoutSessionId, PaymentIntentId};

/// One event that names a PaymentIntent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentIntentEvent {
    /// `evt_...`
    pub id: String,
    /// e.g. `payment_intent.succeeded`.
    pub event_type: String,
    /// When Stripe created the event (its clock, second precision).
    pub created: DateTime<Utc>,
    /// What `data.object` is.
    pub object: EventObject,
    /// The PaymentIntent the event is about: `data.object.id` of a
    /// PaymentIntent, `data.object.payment_intent` of a charge, refund or
    /// dispute.
    pub payment_intent: PaymentIntentId,
    /// The PaymentIntent's `status` as the event rendered it; `None` when
    /// absent or not a status word, and always for a charge, refund or
    /// dispute (their objects carry no PaymentIntent status).
    pub status: Option<ExternalStatus>,
    /// The PaymentIntent's `metadata` (string values only); empty for a
    /// charge, refund or dispute.
    pub metadata: BTreeMap<String, String>,
}

/// One `checkout.session.*` event (docs/checkout-sessions.md, "Events"): the session it is
/// about and
/// what its object showed. The job re-reads the session (or its
/// PaymentIntent) before deciding anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEvent {
    /// `evt_...`
    pub id: String,
    /// e.g. `checkout.session.completed`.
    pub event_type: String,
    /// When Stripe created the event.
    pub created: DateTime<Utc>,
    /// The session.
    pub checkout_session: CheckoutSessionId,
    /// Its PaymentIntent, when the object named one.
    pub payment_intent: Option<PaymentIntentId>,
    /// The object showed `status: complete` and `payment_status: paid`.
    pub paid: bool,
    /// The session's `metadata` (string values only).
    pub metadata: BTreeMap<String, String>,
}

impl SessionEvent {
    /// The event as one about the session's PaymentIntent (when it names
    /// one), for a session no row is judged by: re-read like a charge
    /// event's PaymentIntent, and shown `succeeded` when the session was
    /// paid, so that money no row names becomes `missing_locally`.
    pub fn as_payment_intent_event(&self) -> Option<PaymentIntentEvent> {
        Some(PaymentIntentEvent {
            id: self.id.clone(),
            event_type: self.event_type.clone(),
            created: self.created,
            object: EventObject::CheckoutSession,
            payment_intent: self.payment_intent.clone()?,
            status: self.paid.then_some(ExternalStatus::Succeeded),
            metadata: self.metadata.clone(),
        })
    }
}

/// One page of the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPage {
    /// The page's PaymentIntent events, newest first.
    pub events: Vec<PaymentIntentEvent>,
    /// Entries of the page that were not a readable event of
    /// [`EVENT_TYPES`](super::EVENT_TYPES) (logged and skipped).
    pub skipped: usize,
    /// Charge, refund and dispute events whose object names no PaymentIntent
    /// (a charge made without one): logged and counted, nothing to re-read.
    pub without_payment_intent: usize,
    /// The page's Checkout Session events, newest first.
    pub sessions: Vec<SessionEvent>,
    /// Stripe says older events follow.
    pub has_more: bool,
    /// The id to pass as `starting_after` for the next (older) page: the
    /// page's last entry, readable or not.
    pub next_after: Option<String>,
}
