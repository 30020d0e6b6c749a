//! The gateway's errors: the three outcomes the reconciler distinguishes
//! (design note: `ExternalNotFound`, `GatewayUnavailable`, plus a rejected key).

/// Why a PaymentIntent could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Stripe answered 404 with its own error envelope (`resource_missing`).
    #[error("Stripe has no such PaymentIntent (HTTP 404, request {})", request_id.as_deref().unwrap_or("-"))]
    NotFound {
        /// Stripe's `Request-Id` header.
        request_id: Option<String>,
    },
    /// Stripe rejected the key (401/403): a configuration fault; the run aborts.
    #[error("Stripe rejected the API key (HTTP {status}, request {}); check STRIPE_API_KEY and its permissions", request_id.as_deref().unwrap_or("-"))]
    Rejected {
        /// 401 or 403.
        status: u16,
        /// Stripe's `Request-Id` header.
        request_id: Option<String>,
    },
    /// A 404 carrying Stripe's error body with a code other than
    /// `resource_missing` (e.g. "Unrecognized request URL": STRIPE_API_BASE
    /// has a wrong path): a configuration fault; the run aborts.
    #[error("Stripe answered HTTP {status} with code {code:?} (request {}); check STRIPE_API_BASE", request_id.as_deref().unwrap_or("-"))]
    Misconfigured {
        /// The HTTP status.
        status: u16,
        /// The error envelope's `code`, if any.
        code: Option<String>,
        /// Stripe's `Request-Id` header.
        request_id: Option<String>,
    },
    /// Stripe could not be asked, after the retry budget: the row is UNVERIFIABLE.
    #[error("Stripe unavailable after {attempts} attempt(s) (request {}): {cause}", request_id.as_deref().unwrap_or("-"))]
    Unavailable {
        /// Attempts made, including the first.
        attempts: u32,
        /// What the last attempt ended with.
        #[source]
        cause: Unavailable,
        /// The last response's `Request-Id`, if there was a response.
        request_id: Option<String>,
    },
}

/// What the last attempt of an unavailable read ended with.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// No response within `RECONCILER_HTTP_TIMEOUT_SECONDS`.
    #[error("request timed out")]
    Timeout,
    /// Connection refused, reset, DNS or TLS failure.
    #[error("connection failed")]
    Connection(#[source] reqwest::Error),
    /// An HTTP status that is neither success nor a known final answer
    /// (429, 5xx, 409, unexpected 4xx).
    #[error("HTTP {0}")]
    Status(u16),
    /// The body is not a PaymentIntent: an HTML page from a proxy, truncated
    /// JSON, a missing or non-string `status`, another object.
    #[error("response is not a PaymentIntent: {0}")]
    InvalidBody(String),
    /// The body exceeded [`super::client::MAX_BODY_BYTES`].
    #[error("response body exceeds {0} bytes")]
    TooLarge(usize),
}

/// Could not build the HTTP client (TLS backend initialisation).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the Stripe HTTP client")]
pub struct BuildError(#[source] pub reqwest::Error);
