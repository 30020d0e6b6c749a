//! The events feed: `GET /v1/events` for the event types that can change a
//! verdict ([`EVENT_TYPES`]), one page at a time, newest first. Only what
//! the events job needs crosses the boundary ([`PaymentIntentEvent`]): the
//! event's id, type and `created`, the PaymentIntent it names, and, for a
//! PaymentIntent event, the status and metadata its embedded object showed.
//! The embedded object is rendered in the API version the event was created
//! with, not the pinned one, so only fields that are the same in every
//! version are read (`id`, `object`, `status`, `metadata`, `payment_intent`);
//! the job re-reads the PaymentIntent before deciding anything.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::account::AccountId;
use super::counting::Endpoint;
use super::error::{GatewayError, InvalidBody, Unavailable};
use super::gateway::StripeGateway;
use super::id::{CheckoutSessionId, PaymentIntentId};
use super::parsing::json_body;
use super::transport::MAX_LIST_BODY_BYTES;
use super::wire;
use crate::reconcile::ExternalStatus;

/// The event types the feed asks for: the PaymentIntent events, the
/// charge, refund and dispute events, whose object names its PaymentIntent
/// in `payment_intent`, and the Checkout Session events (issue 32), whose
/// object is the session (twenty in all: Stripe's limit). A refund or a dispute never changes the
/// PaymentIntent's status and emits no `payment_intent.*` event (DESIGN.md,
/// "Turn 3 contract"; Stripe API reference, "Types of events").
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
    /// `checkout.session.completed` (issue 32)
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
    /// A Checkout Session (`checkout.session.*`, issue 32).
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

/// Events per page (Stripe's maximum).
pub const EVENTS_PAGE_LIMIT: u32 = 100;

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

/// One `checkout.session.*` event (issue 32): the session it is about and
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
    /// [`EVENT_TYPES`] (logged and skipped).
    pub skipped: usize,
    /// Charge, refund and dispute events whose object names no PaymentIntent
    /// (a charge made without one): logged and counted, nothing to re-read.
    pub without_payment_intent: usize,
    /// The page's Checkout Session events, newest first (issue 32).
    pub sessions: Vec<SessionEvent>,
    /// Stripe says older events follow.
    pub has_more: bool,
    /// The id to pass as `starting_after` for the next (older) page: the
    /// page's last entry, readable or not.
    pub next_after: Option<String>,
}

impl StripeGateway {
    /// Reads one page of the events of [`EVENT_TYPES`] created at or after
    /// `created_gte` (Unix seconds), newest first, older than `starting_after`
    /// when given: `GET /v1/events?types[]=...&created[gte]=..&limit=100
    /// [&starting_after=evt_...]`, under the shared rate limit and retry rule.
    ///
    /// # Errors
    /// As [`StripeGateway::payment_intent_events_in`].
    pub async fn payment_intent_events(
        &self,
        created_gte: i64,
        starting_after: Option<&str>,
    ) -> Result<EventPage, GatewayError> {
        self.payment_intent_events_in(None, created_gte, None, starting_after)
            .await
    }

    /// Reads one page of the events of `account` (a connected account, sent
    /// as `Stripe-Account`; `None`: the platform's own feed) created in
    /// `[created_gte, created_lt)` (Unix seconds; no upper bound when
    /// `created_lt` is `None`), newest first, older than `starting_after` when
    /// given: `GET /v1/events?types[]=...&created[gte]=..[&created[lt]=..]
    /// &limit=100[&starting_after=evt_...]` (Stripe's list filters on
    /// `created`), under the shared rate limit and retry rule.
    ///
    /// # Errors
    /// - [`GatewayError::Rejected`]: 401/403 (a restricted key needs read
    ///   access to Events).
    /// - [`GatewayError::Misconfigured`]: a 404 that is Stripe's unknown URL.
    /// - [`GatewayError::AccountUnreachable`]: with `account`, Stripe says the
    ///   platform has no access to it.
    /// - [`GatewayError::Unavailable`]: timeouts, 429, 5xx, a body that is not
    ///   a Stripe list, after the retry budget.
    #[tracing::instrument(name = "stripe.events", level = "debug", skip_all, fields(stripe_account = account.map(AccountId::as_str), created_gte, created_lt, request_id = tracing::field::Empty, http_status = tracing::field::Empty))]
    pub async fn payment_intent_events_in(
        &self,
        account: Option<&AccountId>,
        created_gte: i64,
        created_lt: Option<i64>,
        starting_after: Option<&str>,
    ) -> Result<EventPage, GatewayError> {
        let mut url = self.v1(&["events"]);
        {
            let mut q = url.query_pairs_mut();
            for t in EVENT_TYPES {
                q.append_pair("types[]", t);
            }
            q.append_pair("created[gte]", &created_gte.to_string());
            if let Some(lt) = created_lt {
                q.append_pair("created[lt]", &lt.to_string());
            }
            q.append_pair("limit", &EVENTS_PAGE_LIMIT.to_string());
            if let Some(after) = starting_after {
                q.append_pair("starting_after", after);
            }
        }
        self.request_capped(
            Endpoint::Events,
            &url,
            account,
            MAX_LIST_BODY_BYTES,
            |headers, body| parse_page(&json_body(headers, body)?),
        )
        .await
    }
}

fn parse_page(list: &Value) -> Result<EventPage, Unavailable> {
    let invalid = Unavailable::InvalidBody;
    if list.get("object").and_then(Value::as_str) != Some("list") {
        return Err(invalid(InvalidBody::NotAList));
    }
    let data = list
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(InvalidBody::ListWithoutData))?;
    let has_more = list
        .get("has_more")
        .and_then(Value::as_bool)
        .ok_or_else(|| invalid(InvalidBody::ListWithoutHasMore))?;
    let next_after = match data.last() {
        None => None,
        Some(last) => Some(
            last.get("id")
                .and_then(Value::as_str)
                .filter(|id| is_event_id(id))
                .ok_or_else(|| invalid(InvalidBody::LastEventWithoutId))?
                .to_owned(),
        ),
    };
    let mut events = Vec::with_capacity(data.len());
    let mut sessions = Vec::new();
    let mut skipped = 0;
    let mut without_payment_intent = 0;
    for entry in data {
        let id = entry.get("id").and_then(Value::as_str).unwrap_or("-");
        match parse_event(entry) {
            Parsed::Event(e) => events.push(e),
            Parsed::Session(e) => sessions.push(e),
            Parsed::WithoutPaymentIntent { event_type } => {
                without_payment_intent += 1;
                tracing::info!(
                    event = id,
                    event_type,
                    "event's object names no PaymentIntent (a charge made without one); nothing to re-read"
                );
            }
            Parsed::Unreadable => {
                skipped += 1;
                tracing::warn!(
                    event = id,
                    "event is not a readable event of the feed's types; skipped"
                );
            }
        }
    }
    Ok(EventPage {
        events,
        sessions,
        skipped,
        without_payment_intent,
        has_more,
        next_after,
    })
}

fn is_event_id(id: &str) -> bool {
    id.len() <= 255
        && id.strip_prefix("evt_").is_some_and(|r| {
            !r.is_empty() && r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
}

enum Parsed {
    Event(PaymentIntentEvent),
    Session(SessionEvent),
    WithoutPaymentIntent { event_type: String },
    Unreadable,
}

fn parse_event(e: &Value) -> Parsed {
    let Some((id, event_type, created, object)) = envelope(e) else {
        return Parsed::Unreadable;
    };
    let Some(kind) = EventObject::of_type(event_type) else {
        return Parsed::Unreadable;
    };
    if object
        .get("object")
        .is_some_and(|o| o.as_str() != Some(kind.as_str()))
    {
        return Parsed::Unreadable;
    }
    if kind == EventObject::CheckoutSession {
        return session_event(id, event_type, created, object);
    }
    let pi = if kind == EventObject::PaymentIntent {
        object.get("id")
    } else {
        // A string id, or the PaymentIntent object when the event was
        // expanded; `null` for a charge made without a PaymentIntent.
        match object.get("payment_intent") {
            None | Some(Value::Null) => {
                return Parsed::WithoutPaymentIntent {
                    event_type: event_type.to_owned(),
                }
            }
            Some(Value::Object(expanded)) => expanded.get("id"),
            Some(id) => Some(id),
        }
    };
    let Some(payment_intent) = pi
        .and_then(Value::as_str)
        .and_then(|id| PaymentIntentId::parse(id).ok())
    else {
        return Parsed::Unreadable;
    };
    let (status, metadata) = if kind == EventObject::PaymentIntent {
        (wire::status(object), wire::metadata(object))
    } else {
        (None, BTreeMap::new())
    };
    Parsed::Event(PaymentIntentEvent {
        id: id.to_owned(),
        event_type: event_type.to_owned(),
        created,
        object: kind,
        payment_intent,
        status,
        metadata,
    })
}

/// A `checkout.session.*` event: its session id must be well-formed; its
/// `payment_intent` is an id, the expanded object, or null.
fn session_event(id: &str, event_type: &str, created: DateTime<Utc>, object: &Value) -> Parsed {
    let Some(checkout_session) = object
        .get("id")
        .and_then(Value::as_str)
        .and_then(|id| CheckoutSessionId::parse(id).ok())
    else {
        return Parsed::Unreadable;
    };
    let payment_intent = match object.get("payment_intent") {
        Some(Value::Object(expanded)) => expanded.get("id"),
        other => other,
    }
    .and_then(Value::as_str)
    .and_then(|id| PaymentIntentId::parse(id).ok());
    let word = |field: &str| object.get(field).and_then(Value::as_str);
    Parsed::Session(SessionEvent {
        id: id.to_owned(),
        event_type: event_type.to_owned(),
        created,
        checkout_session,
        payment_intent,
        paid: word("status") == Some("complete") && word("payment_status") == Some("paid"),
        metadata: wire::metadata(object),
    })
}

/// `(id, type, created, data.object)` of a well-formed event.
fn envelope(e: &Value) -> Option<(&str, &str, DateTime<Utc>, &Value)> {
    let id = e
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| is_event_id(id))?;
    let event_type = e.get("type").and_then(Value::as_str)?;
    let created = e
        .get("created")
        .and_then(Value::as_i64)
        .and_then(|t| DateTime::from_timestamp(t, 0))?;
    let object = e.get("data").and_then(|d| d.get("object"))?;
    Some((id, event_type, created, object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(id: &str, pi: &str, status: &str, created: i64) -> Value {
        json!({"id": id, "object": "event", "api_version": "2019-02-19", "created": created,
               "type": format!("payment_intent.{status}"),
               "data": {"object": {"id": pi, "object": "payment_intent", "status": status,
                                   "metadata": {"order": "o1", "n": 3}}},
               "livemode": false, "pending_webhooks": 0, "request": {"id": null}})
    }

    #[test]
    fn a_page_keeps_readable_events_and_the_cursor_of_the_last_entry() {
        let page = parse_page(
            &json!({"object": "list", "has_more": true, "url": "/v1/events",
            "data": [event("evt_1", "pi_A", "succeeded", 1_700_000_000),
                     json!({"id": "evt_2", "type": "payment_intent.succeeded", "created": 1,
                            "data": {"object": {"id": "../x"}}}),
                     event("evt_3", "pi_B", "canceled", 1_699_999_999)]}),
        )
        .unwrap();
        assert_eq!(page.events.len(), 2);
        assert_eq!(page.skipped, 1);
        assert!(page.has_more);
        assert_eq!(page.next_after.as_deref(), Some("evt_3"));
        let first = &page.events[0];
        assert_eq!(first.payment_intent.as_str(), "pi_A");
        assert_eq!(first.status, Some(ExternalStatus::parse("succeeded")));
        assert_eq!(first.metadata.get("order").map(String::as_str), Some("o1"));
        assert!(
            !first.metadata.contains_key("n"),
            "non-string metadata is dropped"
        );
    }

    #[test]
    fn the_feed_asks_for_at_most_twenty_types_including_every_payment_intent_type() {
        assert!(EVENT_TYPES.len() <= 20, "Stripe accepts at most 20 types[]");
        for t in PAYMENT_INTENT_EVENT_TYPES {
            assert_eq!(EventObject::of_type(t), Some(EventObject::PaymentIntent));
        }
        let unique: std::collections::HashSet<_> = EVENT_TYPES.iter().collect();
        assert_eq!(unique.len(), EVENT_TYPES.len());
    }

    /// An event whose object is a charge, refund or dispute naming `pi`.
    fn money_event(id: &str, event_type: &str, object: &str, pi: Value) -> Value {
        json!({"id": id, "object": "event", "api_version": "2024-06-20", "created": 1_700_000_000,
               "type": event_type,
               "data": {"object": {"id": format!("{object}_1"), "object": object,
                                   "amount": 1099, "payment_intent": pi, "status": "succeeded",
                                   "metadata": {"order": "o1"}}},
               "livemode": false, "pending_webhooks": 0, "request": {"id": null}})
    }

    #[test]
    fn charge_refund_and_dispute_events_name_their_payment_intent() {
        let page = parse_page(&json!({"object": "list", "has_more": false, "data": [
            money_event("evt_1", "charge.refunded", "charge", json!("pi_A")),
            money_event("evt_2", "refund.created", "refund", json!({"id": "pi_B", "object": "payment_intent"})),
            money_event("evt_3", "charge.dispute.created", "dispute", json!("pi_C")),
            money_event("evt_4", "charge.refund.updated", "refund", Value::Null),
            money_event("evt_5", "charge.dispute.closed", "charge", json!("pi_D")),
            money_event("evt_6", "customer.created", "customer", json!("pi_E")),
        ]}))
        .unwrap();
        let named: Vec<_> = page
            .events
            .iter()
            .map(|e| (e.payment_intent.as_str(), e.object))
            .collect();
        assert_eq!(
            named,
            [
                ("pi_A", EventObject::Charge),
                ("pi_B", EventObject::Refund),
                ("pi_C", EventObject::Dispute)
            ]
        );
        assert!(
            page.events
                .iter()
                .all(|e| e.status.is_none() && e.metadata.is_empty()),
            "a charge's status and metadata are not the PaymentIntent's"
        );
        assert_eq!(
            page.without_payment_intent, 1,
            "the refund of a charge without a PaymentIntent"
        );
        assert_eq!(
            page.skipped, 2,
            "a dispute event carrying a charge, and a type not asked for"
        );
    }

    #[test]
    fn checkout_session_events_name_their_session_and_payment_intent() {
        let session = |id: &str, t: &str, pi: Value, status: &str, paid: &str| {
            json!({"id": id, "object": "event", "created": 1_700_000_000, "type": t,
                   "data": {"object": {"id": "cs_test_A1", "object": "checkout.session",
                                       "payment_intent": pi, "status": status,
                                       "payment_status": paid, "metadata": {"order": "o1"}}}})
        };
        let page = parse_page(&json!({"object": "list", "has_more": false, "data": [
            session("evt_1", "checkout.session.completed", json!("pi_A"), "complete", "paid"),
            session("evt_2", "checkout.session.expired", Value::Null, "expired", "unpaid"),
            session("evt_3", "checkout.session.async_payment_failed", json!({"id": "pi_B"}), "complete", "unpaid"),
        ]}))
        .unwrap();
        assert!(page.events.is_empty());
        let got: Vec<_> = page
            .sessions
            .iter()
            .map(|e| {
                (
                    e.checkout_session.as_str(),
                    e.payment_intent.as_ref().map(|p| p.as_str()),
                    e.paid,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("cs_test_A1", Some("pi_A"), true),
                ("cs_test_A1", None, false),
                ("cs_test_A1", Some("pi_B"), false)
            ]
        );
        let as_pi = page.sessions[0].as_payment_intent_event().unwrap();
        assert_eq!(as_pi.status, Some(ExternalStatus::Succeeded));
        assert_eq!(as_pi.object, EventObject::CheckoutSession);
        assert!(page.sessions[1].as_payment_intent_event().is_none());
        assert_eq!(EVENT_TYPES.len(), 20);
    }

    #[test]
    fn a_body_that_is_not_a_list_is_an_error() {
        assert!(parse_page(&json!({"object": "event"})).is_err());
        assert!(parse_page(&json!({"object": "list", "data": []})).is_err());
        let last_without_id = json!({"object": "list", "has_more": false, "data": [{"type": "x"}]});
        assert!(parse_page(&last_without_id).is_err());
    }
}
