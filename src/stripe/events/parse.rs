//! A page of `GET /v1/events` into what the events job reads: the typed
//! wire model ([`WireList`] of [`WireEvent`]) decides what is well-formed;
//! this module decides what each event is about. A body that is not a
//! list is [`Unavailable::InvalidBody`]; one entry that is not a readable
//! event of the feed's types is skipped and counted, never failing its page.

use std::collections::BTreeMap;

use serde_json::Value;

use super::page::{EventPage, PaymentIntentEvent, SessionEvent};
use super::types::EventObject;
use crate::stripe::error::{InvalidBody, Unavailable};
use crate::stripe::id::{CheckoutSessionId, PaymentIntentId};
use crate::stripe::wire::{Envelope, Field, WireEvent, WireList};

/// A page's body into an [`EventPage`].
///
/// # Errors
/// [`Unavailable::InvalidBody`]: not a Stripe list (as [`WireList::read`]),
/// or a last entry without an `evt_` id (the feed cannot be paged past it).
pub(super) fn parse_page(list: &Value) -> Result<EventPage, Unavailable> {
    let invalid = Unavailable::InvalidBody;
    let (data, has_more) = WireList::<WireEvent>::read(list).map_err(invalid)?;
    let next_after = match data.last() {
        None => None,
        Some(last) => Some(
            last.get()
                .and_then(WireEvent::event_id)
                .ok_or(invalid(InvalidBody::LastEventWithoutId))?
                .to_owned(),
        ),
    };
    let mut page = EventPage {
        events: Vec::with_capacity(data.len()),
        sessions: Vec::new(),
        skipped: 0,
        without_payment_intent: 0,
        has_more,
        next_after,
    };
    for entry in &data {
        add(&mut page, entry);
    }
    Ok(page)
}

/// One entry of the page into `page`: an event, a session event, or a count.
fn add(page: &mut EventPage, entry: &Field<WireEvent>) {
    let id = entry.get().and_then(WireEvent::raw_id).unwrap_or("-");
    match entry.get().map_or(Parsed::Unreadable, parse_event) {
        Parsed::Event(e) => page.events.push(e),
        Parsed::Session(e) => page.sessions.push(e),
        Parsed::WithoutPaymentIntent { event_type } => {
            page.without_payment_intent += 1;
            tracing::info!(
                event = id,
                event_type,
                "event's object names no PaymentIntent (a charge made without one); nothing to re-read"
            );
        }
        Parsed::Unreadable => {
            page.skipped += 1;
            tracing::warn!(
                event = id,
                "event is not a readable event of the feed's types; skipped"
            );
        }
    }
}

enum Parsed {
    Event(PaymentIntentEvent),
    Session(SessionEvent),
    WithoutPaymentIntent { event_type: String },
    Unreadable,
}

fn parse_event(e: &WireEvent) -> Parsed {
    let Some(envelope) = e.envelope() else {
        return Parsed::Unreadable;
    };
    let Some(kind) = EventObject::of_type(envelope.event_type) else {
        return Parsed::Unreadable;
    };
    let object = envelope.object;
    if !object.may_be(kind.as_str()) {
        return Parsed::Unreadable;
    }
    if kind == EventObject::CheckoutSession {
        return session_event(&envelope);
    }
    let pi = if kind == EventObject::PaymentIntent {
        object.id.as_str()
    } else {
        // A string id, or the PaymentIntent object when the event was
        // expanded; `null` for a charge made without a PaymentIntent.
        match &object.payment_intent {
            Field::Absent | Field::Null => {
                return Parsed::WithoutPaymentIntent {
                    event_type: envelope.event_type.to_owned(),
                }
            }
            Field::Is(expandable) => expandable.id(),
            Field::Other => None,
        }
    };
    let Some(payment_intent) = pi.and_then(|id| PaymentIntentId::parse(id).ok()) else {
        return Parsed::Unreadable;
    };
    let (status, metadata) = if kind == EventObject::PaymentIntent {
        (object.payment_intent_status(), object.metadata())
    } else {
        (None, BTreeMap::new())
    };
    Parsed::Event(PaymentIntentEvent {
        id: envelope.id.to_owned(),
        event_type: envelope.event_type.to_owned(),
        created: envelope.created,
        object: kind,
        payment_intent,
        status,
        metadata,
    })
}

/// A `checkout.session.*` event: its session id must be well-formed; its
/// `payment_intent` is an id, the expanded object, or null.
fn session_event(envelope: &Envelope<'_>) -> Parsed {
    let object = envelope.object;
    let Some(checkout_session) = object
        .id
        .as_str()
        .and_then(|id| CheckoutSessionId::parse(id).ok())
    else {
        return Parsed::Unreadable;
    };
    let payment_intent = object
        .payment_intent
        .get()
        .and_then(|p| p.id())
        .and_then(|id| PaymentIntentId::parse(id).ok());
    Parsed::Session(SessionEvent {
        id: envelope.id.to_owned(),
        event_type: envelope.event_type.to_owned(),
        created: envelope.created,
        checkout_session,
        payment_intent,
        paid: object.status.as_str() == Some("complete")
            && object.payment_status.as_str() == Some("paid"),
        metadata: object.metadata(),
    })
}

#[cfg(test)]
mod tests;
