//! An event of `GET /v1/events` as Stripe sends it:
//! `{"id", "type", "created", "data": {"object": {...}}}`. The embedded
//! object is rendered in the API version the event was created with, not
//! the pinned one, so only fields that are the same in every version are
//! modelled ([`WireEventObject`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::field::Field;
use super::payment_intent::{status_word, string_values};
use crate::reconcile::ExternalStatus;

/// One entry of an events page.
#[derive(Debug, Deserialize)]
pub(crate) struct WireEvent {
    #[serde(default)]
    id: Field<String>,
    #[serde(default, rename = "type")]
    event_type: Field<String>,
    #[serde(default)]
    created: Field<i64>,
    #[serde(default)]
    data: Field<WireEventData>,
}

/// An event's `data`.
#[derive(Debug, Deserialize)]
struct WireEventData {
    #[serde(default)]
    object: Field<WireEventObject>,
}

/// The version-stable fields of an event's `data.object`.
#[derive(Debug, Deserialize)]
pub(crate) struct WireEventObject {
    /// The object's own id (`pi_...`, `cs_...`, `ch_...`).
    #[serde(default)]
    pub id: Field<String>,
    /// Its kind (`payment_intent`, `charge`, `checkout.session`, ...).
    #[serde(default)]
    pub object: Field<String>,
    /// Its `status` (a PaymentIntent's, a Checkout Session's).
    #[serde(default)]
    pub status: Field<String>,
    /// A Checkout Session's `payment_status`.
    #[serde(default)]
    pub payment_status: Field<String>,
    #[serde(default)]
    metadata: Field<Map<String, Value>>,
    /// The PaymentIntent a charge, refund, dispute or session names.
    #[serde(default)]
    pub payment_intent: Field<Expandable>,
}

/// A field that holds an id, or the object itself when expanded.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Expandable {
    /// Not expanded: the id.
    Id(String),
    /// Expanded: the object, of which only its id is read.
    Object {
        #[serde(default)]
        id: Field<String>,
    },
}

impl Expandable {
    /// The id, when it is a string.
    pub fn id(&self) -> Option<&str> {
        match self {
            Expandable::Id(id) => Some(id),
            Expandable::Object { id } => id.as_str(),
        }
    }
}

/// A well-formed event: an `evt_` id, a type, a `created` time and a
/// `data.object`.
#[derive(Debug)]
pub(crate) struct Envelope<'a> {
    /// `evt_...`
    pub id: &'a str,
    /// Stripe's name of the type, as sent (possibly one the feed does not read).
    pub event_type: &'a str,
    /// When Stripe created the event (second precision).
    pub created: DateTime<Utc>,
    /// The embedded object.
    pub object: &'a WireEventObject,
}

/// An embedded object that is not a JSON object (`null`, a string) reads
/// as an object without fields.
static WITHOUT_FIELDS: WireEventObject = WireEventObject {
    id: Field::Absent,
    object: Field::Absent,
    status: Field::Absent,
    payment_status: Field::Absent,
    metadata: Field::Absent,
    payment_intent: Field::Absent,
};

impl WireEvent {
    /// The event's id, as sent, for logs (`None` when not a string).
    pub fn raw_id(&self) -> Option<&str> {
        self.id.as_str()
    }

    /// The event's id when it is a well-formed `evt_` id (the feed's
    /// `starting_after`).
    pub fn event_id(&self) -> Option<&str> {
        self.raw_id().filter(|id| is_event_id(id))
    }

    /// The envelope, when every part of it is there and well-formed.
    pub fn envelope(&self) -> Option<Envelope<'_>> {
        let object = match &self.data.get()?.object {
            Field::Absent => return None,
            Field::Is(object) => object,
            Field::Null | Field::Other => &WITHOUT_FIELDS,
        };
        Some(Envelope {
            id: self.event_id()?,
            event_type: self.event_type.get()?,
            created: DateTime::from_timestamp(*self.created.get()?, 0)?,
            object,
        })
    }
}

impl WireEventObject {
    /// The object does not say it is anything other than `kind` (its
    /// `object` is absent or `kind`).
    pub fn may_be(&self, kind: &str) -> bool {
        match &self.object {
            Field::Absent => true,
            Field::Is(o) => o == kind,
            Field::Null | Field::Other => false,
        }
    }

    /// `status` as a PaymentIntent's, when it is a status word.
    pub fn payment_intent_status(&self) -> Option<ExternalStatus> {
        self.status.get().and_then(|s| status_word(s))
    }

    /// `metadata`'s string values (others dropped; empty when absent).
    pub fn metadata(&self) -> BTreeMap<String, String> {
        self.metadata.get().map(string_values).unwrap_or_default()
    }
}

/// A well-formed event id: `evt_` and letters, digits or `_`, at most 255
/// bytes (it goes into a query string and logs).
fn is_event_id(id: &str) -> bool {
    id.len() <= 255
        && id.strip_prefix("evt_").is_some_and(|r| {
            !r.is_empty() && r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
}
