//! Stripe's JSON shapes, parsed leniently: only the fields the reconciler
//! needs; unknown fields are ignored and a field of an unexpected shape
//! spoils no more than what needs it. These types never leave the gateway.
//!
//! - `field`: [`Field`], one field as it came (absent, null, of the expected shape, other).
//! - `list`: [`WireList`], a list page (`object`, `data[]`, `has_more`).
//! - `event`: [`WireEvent`], an event's envelope and the version-stable fields of its object.
//! - `payment_intent`: a PaymentIntent object's facts, status and metadata.
//! - `error`: [`WireErrorEnvelope`], Stripe's error body.

mod error;
mod event;
mod field;
mod list;
mod payment_intent;

pub(crate) use error::WireErrorEnvelope;
pub(crate) use event::{Envelope, WireEvent};
pub(crate) use field::Field;
pub(crate) use list::WireList;
pub(crate) use payment_intent::{is_status_word, payment_intent_facts};
