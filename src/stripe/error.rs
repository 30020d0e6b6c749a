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
    /// STRIPE_API_BASE answered with a redirect (3xx): a configuration fault;
    /// the run aborts. The redirect is not followed, so the key is never sent
    /// to the `Location` (the client's redirect policy is `none`).
    #[error("STRIPE_API_BASE answered HTTP {status}, a redirect to {}; it was not followed and the API key was not sent there; set STRIPE_API_BASE to Stripe's API (https://api.stripe.com) or to a proxy that answers itself", location_host.as_deref().unwrap_or("an unusable Location"))]
    Redirected {
        /// The 3xx status.
        status: u16,
        /// The host of the `Location` header (resolved against the request's
        /// URL); `None` when the header is absent or not a URL. Only the host
        /// is kept: it is all the operator needs, and a parsed host holds no
        /// control characters.
        location_host: Option<String>,
        /// The `Request-Id` header, if any.
        request_id: Option<String>,
    },
    /// A read made for a connected account (`Stripe-Account`) that Stripe
    /// refused because the platform has no access to that account (a 403
    /// "does not have access to account", a revoked application, code
    /// `account_invalid`): that account's rows are UNVERIFIABLE for the rest
    /// of the run, the other accounts go on (docs/connect.md). Stripe's message is
    /// not kept (it quotes part of the key).
    #[error("the platform has no access to connected account {account} (HTTP {status}{}, request {}): the account was disconnected, the application revoked, or the id is not one of this platform's accounts", code.as_deref().map(|c| format!(", code {c}")).unwrap_or_default(), request_id.as_deref().unwrap_or("-"))]
    AccountUnreachable {
        /// The `acct_` id the request was made for.
        account: String,
        /// 400, 401 or 403.
        status: u16,
        /// The error envelope's `code` (a lowercase word), if any.
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

impl GatewayError {
    /// Whether Stripe refused the key or the account rather than the one
    /// request: 401/403 ([`GatewayError::Rejected`]), a base URL Stripe does
    /// not serve ([`GatewayError::Misconfigured`]) or a redirect
    /// ([`GatewayError::Redirected`]). Every read stops the run on it
    /// (`RunError::StripeRejected`, exit 78): no other request would fare
    /// better.
    pub fn is_rejected(&self) -> bool {
        matches!(
            self,
            GatewayError::Rejected { .. }
                | GatewayError::Misconfigured { .. }
                | GatewayError::Redirected { .. }
        )
    }
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
    InvalidBody(InvalidBody),
    /// The body exceeded [`super::MAX_BODY_BYTES`].
    #[error("response body exceeds {0} bytes")]
    TooLarge(usize),
}

/// Why an answer could not be used as the answer it claims to be.
#[derive(Debug, thiserror::Error)]
pub enum InvalidBody {
    /// A 200 whose `Content-Type` is not JSON (a proxy's HTML page).
    #[error("content type {0:?}, expected application/json")]
    ContentType(String),
    /// A 200 whose body does not parse as JSON (truncated, garbage). The
    /// parser's position is shown inline: these reads are logged per row with
    /// the error's display, never through the cause chain.
    #[error("not JSON ({0})")]
    NotJson(serde_json::Error),
    /// A JSON body that is not a usable PaymentIntent.
    #[error("{0}")]
    PaymentIntent(#[from] MalformedPaymentIntent),
    /// A list endpoint's body without `"object": "list"`.
    #[error("not a Stripe list")]
    NotAList,
    /// A list without its `data` array.
    #[error("list without a data array")]
    ListWithoutData,
    /// A list without its `has_more` flag.
    #[error("list without has_more")]
    ListWithoutHasMore,
    /// An events page whose last entry has no `evt_` id, so the feed cannot
    /// be paged past it.
    #[error("the page's last event has no usable id")]
    LastEventWithoutId,
    /// A 404 with Stripe's error envelope but a code other than
    /// `resource_missing`: it says nothing about the PaymentIntent.
    #[error("HTTP 404 with code {0:?}, not resource_missing")]
    NotFoundCode(String),
    /// A 404 without Stripe's error envelope (a proxy, a test double).
    #[error("HTTP 404 without Stripe's error body")]
    NotFoundWithoutEnvelope,
    /// A 404 `resource_missing` on a list path says nothing about a
    /// PaymentIntent.
    #[error("HTTP 404 resource_missing on a list")]
    NotFoundOnList,
    /// A JSON body that is not a usable Checkout Session.
    #[error("{0}")]
    CheckoutSession(#[from] MalformedSession),
    /// The body is not a usable Subscription (docs/subscriptions.md).
    #[error("{0}")]
    Subscription(#[from] super::subscription::MalformedSubscription),
}

/// Why a Checkout Session JSON object (a retrieve's body or one item of a
/// list page) is not usable (docs/checkout-sessions.md).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MalformedSession {
    /// A required field is missing or not what Stripe sends: which.
    #[error("not a usable Checkout Session: {0}")]
    Field(&'static str),
    /// Its expanded `payment_intent` is not a usable PaymentIntent.
    #[error("the Checkout Session's PaymentIntent: {0}")]
    PaymentIntent(MalformedPaymentIntent),
}

/// Why a PaymentIntent JSON object (a retrieve's body or one item of a list
/// page) is not usable. The checks are those of `super::wire`: `status` must
/// be a short lowercase Stripe word; everything else is read leniently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MalformedPaymentIntent {
    /// Not a JSON object at all.
    #[error("not a JSON object")]
    NotAnObject,
    /// `object` is present and is not `payment_intent`.
    #[error("object is not a payment_intent")]
    NotAPaymentIntent,
    /// A retrieve's body names another PaymentIntent than the one asked for.
    #[error("id does not match the requested PaymentIntent")]
    IdMismatch,
    /// `status` is absent.
    #[error("status is missing")]
    StatusMissing,
    /// `status` is not a JSON string.
    #[error("status is not a string")]
    StatusNotAString,
    /// `status` is a string but not a Stripe status word (empty, too long,
    /// or other than lowercase ASCII and `_`).
    #[error("status is not a Stripe status word")]
    StatusNotAWord,
}

/// Could not build the HTTP client (TLS backend initialisation).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the Stripe HTTP client")]
pub struct BuildError(#[source] pub reqwest::Error);
