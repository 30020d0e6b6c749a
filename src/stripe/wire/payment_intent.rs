//! A PaymentIntent object's fields, read leniently: amounts, words, status,
//! metadata and the latest charge in every API version's shape.

use std::collections::BTreeMap;

use chrono::DateTime;
use serde_json::{Map, Value};

use crate::reconcile::{Charge, ChargeFacts, ExternalStatus, PaymentIntentFacts};

/// A non-negative integer field (amounts in minor units); `None` when absent,
/// `null`, negative or not an integer.
fn amount(object: &Value, field: &str) -> Option<i64> {
    object
        .get(field)
        .and_then(Value::as_i64)
        .filter(|a| *a >= 0)
}

/// Short lowercase words only (currency codes, capture methods, method types):
/// anything else from the wire is dropped rather than stored or shown.
fn word(value: &Value) -> Option<String> {
    value
        .as_str()
        .filter(|s| !s.is_empty() && s.len() <= 64)
        .filter(|s| s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .map(str::to_owned)
}

/// Longest status string accepted from Stripe, in bytes.
const MAX_STATUS_LEN: usize = 64;

/// Whether `s` can be a PaymentIntent status: a short lowercase snake_case
/// word (anything else from the wire is refused, never stored or shown).
pub(crate) fn is_status_word(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_STATUS_LEN
        && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
}

/// A PaymentIntent's `status` text, when it is a status word.
pub(crate) fn status_word(s: &str) -> Option<ExternalStatus> {
    is_status_word(s).then(|| ExternalStatus::parse(s))
}

/// A `metadata` object's string values (others dropped).
pub(crate) fn string_values(metadata: &Map<String, Value>) -> BTreeMap<String, String> {
    metadata
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}

/// A PaymentIntent object's `metadata`: its string values (others dropped).
fn metadata(object: &Value) -> BTreeMap<String, String> {
    object
        .get("metadata")
        .and_then(Value::as_object)
        .map(string_values)
        .unwrap_or_default()
}

/// The facts of a PaymentIntent JSON object whose `status` the caller has
/// already validated: amounts, currency, `created`, `capture_method`,
/// `payment_method_types`, `metadata` and the latest charge. Wrong types
/// become `None`/empty, never an error.
pub(crate) fn payment_intent_facts(pi: &Value, status: ExternalStatus) -> PaymentIntentFacts {
    PaymentIntentFacts {
        status,
        amount: amount(pi, "amount"),
        amount_received: amount(pi, "amount_received"),
        currency: pi.get("currency").and_then(word),
        // Stripe's clock: Unix seconds from 2009 (Stripe's first objects) to
        // 2100; anything else is garbage and is dropped, not stored.
        created: pi
            .get("created")
            .and_then(Value::as_i64)
            .filter(|t| (1_230_768_000..4_102_444_800).contains(t))
            .and_then(|t| DateTime::from_timestamp(t, 0)),
        capture_method: pi.get("capture_method").and_then(word),
        payment_method_types: pi
            .get("payment_method_types")
            .and_then(Value::as_array)
            .map(|types| types.iter().filter_map(word).collect())
            .unwrap_or_default(),
        metadata: metadata(pi),
        charge: charge_facts(pi),
    }
}

/// The latest charge in any of its shapes: `latest_charge` as an expanded
/// object, a bare id (not expanded), `null` (no charge yet); or, from API
/// versions before 2022-11-15, absent with a `charges` list (newest first).
fn charge_facts(pi: &Value) -> ChargeFacts {
    let charge = |c: &Value| {
        ChargeFacts::Known(Charge {
            amount: amount(c, "amount"),
            amount_captured: amount(c, "amount_captured"),
            amount_refunded: amount(c, "amount_refunded"),
            refunded: c.get("refunded").and_then(Value::as_bool),
            disputed: c.get("disputed").and_then(Value::as_bool),
        })
    };
    match pi.get("latest_charge") {
        Some(Value::Object(_)) => charge(&pi["latest_charge"]),
        Some(Value::Null) => ChargeFacts::None,
        Some(_) => ChargeFacts::NotExpanded,
        None => match pi
            .get("charges")
            .and_then(|c| c.get("data"))
            .and_then(Value::as_array)
        {
            Some(list) => list.first().map_or(ChargeFacts::None, |c| {
                if c.is_object() {
                    charge(c)
                } else {
                    ChargeFacts::NotExpanded
                }
            }),
            None => ChargeFacts::NotExpanded,
        },
    }
}
