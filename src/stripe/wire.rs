//! Stripe's JSON shapes, parsed leniently: only the fields the reconciler needs;
//! unknown fields and nulls are ignored. These types never leave the gateway.

use serde::Deserialize;

/// The part of a PaymentIntent object we read (`GET /v1/payment_intents/{id}`).
#[derive(Debug, Deserialize)]
pub(crate) struct WirePaymentIntent {
    pub id: Option<String>,
    pub object: Option<String>,
    /// Left as a JSON value so a non-string status is reported, not a parse error.
    pub status: Option<serde_json::Value>,
}

/// Stripe's error envelope: `{"error": {"type", "code", "message", ...}}`.
#[derive(Debug, Deserialize)]
pub(crate) struct WireErrorEnvelope {
    pub error: WireError,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireError {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub code: Option<String>,
}

impl WireErrorEnvelope {
    /// Parses an error body; `None` when the body is not Stripe's envelope
    /// (an HTML page from a proxy, an empty body, ...).
    pub fn parse(body: &[u8]) -> Option<WireError> {
        serde_json::from_slice::<WireErrorEnvelope>(body)
            .ok()
            .map(|e| e.error)
    }
}
