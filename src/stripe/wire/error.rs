//! Stripe's error envelope.

use serde::Deserialize;

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
    pub message: Option<String>,
}

impl WireError {
    /// Stripe's answer to a path it does not know ("Unrecognized request
    /// URL (GET: /v1/...)"): STRIPE_API_BASE has a wrong path.
    pub fn is_unrecognized_url(&self) -> bool {
        self.code.is_none()
            && self
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with("Unrecognized request URL"))
    }
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
