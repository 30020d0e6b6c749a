//! [`StripeGateway`]: reads PaymentIntents over HTTP under one shared rate
//! limit, with the retry rule of [`super::retry`].

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use reqwest::StatusCode;
use secrecy::{ExposeSecret, SecretString};
use tokio::time::Instant;
use tracing::Span;
use url::Url;

use super::error::{BuildError, GatewayError, Unavailable};
use super::id::PaymentIntentId;
use super::retry::{self, Attempt, AttemptOutcome, RetryPolicy};
use super::wire::{payment_intent_facts, WireErrorEnvelope};
use crate::reconcile::{ExternalStatus, PaymentIntentFacts};

/// The Stripe API version every request pins (`Stripe-Version` header), so a
/// change of the account's default version cannot change the shapes we parse.
pub const STRIPE_VERSION: &str = "2024-06-20";

/// Largest response body read, in bytes. A PaymentIntent is a few KiB; a
/// bigger body is garbage (or an attack) and is not buffered.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// Largest body of a list page (`/v1/payment_intents`, `/v1/events`), in
/// bytes: 100 PaymentIntents with their expanded charges, or 100 events each
/// embedding a PaymentIntent, are a few hundred KiB.
pub const MAX_LIST_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Extra spacing between reads, as a share of `1 / RECONCILER_RATE_LIMIT_RPS`:
/// at 25/s reads leave every 41.2 ms, so 26 of them span 1.03 s and a read
/// delayed by up to 30 ms on the way still keeps every one-second window at
/// or below 25, while 97% of the budget is used (measured in BENCHMARKS.md).
pub const RATE_HEADROOM: f64 = 0.03;

/// Longest status string accepted from Stripe, in bytes.
const MAX_STATUS_LEN: usize = 64;

/// How the gateway is set up.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// `STRIPE_API_BASE`, e.g. `https://api.stripe.com`.
    pub base: Url,
    /// `STRIPE_API_KEY`.
    pub api_key: SecretString,
    /// Reads per second shared by every request of the run.
    pub rate_limit_rps: NonZeroU32,
    /// Timeout of one request, connect to last body byte.
    pub timeout: Duration,
    /// Retry budget.
    pub retry: RetryPolicy,
    /// No retry waits past this instant (the run's deadline), if set.
    pub deadline: Option<Instant>,
}

/// Reads PaymentIntent statuses from Stripe.
///
/// One gateway serves a whole run: its rate limiter is shared by every
/// concurrent read, and a 429 rate limit pauses all of them.
pub struct StripeGateway {
    http: reqwest::Client,
    base: Url,
    api_key: SecretString,
    limiter: DefaultDirectRateLimiter,
    paused_until: Mutex<Option<Instant>>,
    retry: RetryPolicy,
    deadline: Option<Instant>,
    requests: [AtomicU64; 3],
}

/// HTTP requests sent to Stripe per endpoint (every attempt, retries
/// included: each one spends the rate budget). The metric
/// `stripe_reconciler_stripe_requests{endpoint}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RequestCounts {
    /// `GET /v1/payment_intents/{id}`.
    pub retrieve: u64,
    /// `GET /v1/payment_intents` (list pages and the outage probe).
    pub list: u64,
    /// `GET /v1/events`.
    pub events: u64,
}

impl RequestCounts {
    /// `(endpoint label, count)` for the metric.
    pub fn by_endpoint(&self) -> [(&'static str, u64); 3] {
        [
            ("retrieve", self.retrieve),
            ("list", self.list),
            ("events", self.events),
        ]
    }

    /// All requests.
    pub fn total(&self) -> u64 {
        self.retrieve + self.list + self.events
    }

    /// The requests sent since `earlier` (the same gateway's counts).
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        RequestCounts {
            retrieve: self.retrieve.saturating_sub(earlier.retrieve),
            list: self.list.saturating_sub(earlier.list),
            events: self.events.saturating_sub(earlier.events),
        }
    }
}

/// Largest `limit` Stripe accepts on a list request.
pub const LIST_PAGE_LIMIT: u32 = 100;

/// The `created` bounds of a list request: Unix seconds, both inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreatedWindow {
    /// `created[gte]`
    pub gte: i64,
    /// `created[lte]`
    pub lte: i64,
}

/// One PaymentIntent of a list page.
#[derive(Debug, Clone)]
pub struct ListedPaymentIntent {
    /// Its id (items without a well-formed id are dropped from the page).
    pub id: PaymentIntentId,
    /// Its facts, or why this item could not be used (its row then falls
    /// back to a retrieve).
    pub facts: Result<PaymentIntentFacts, String>,
}

/// One page of `GET /v1/payment_intents`, newest first.
#[derive(Debug, Clone)]
pub struct ListPage {
    /// The page's PaymentIntents with a well-formed id.
    pub items: Vec<ListedPaymentIntent>,
    /// `starting_after` for the next page: the last item's id when Stripe
    /// said `has_more`; `None` at the end of the window.
    pub next_after: Option<PaymentIntentId>,
}

/// One attempt's failure, before the retry rule has looked at it.
enum AttemptError {
    Final(GatewayError),
    Retryable {
        outcome: AttemptOutcome,
        cause: Unavailable,
        request_id: Option<String>,
    },
}

impl StripeGateway {
    /// Builds the gateway.
    ///
    /// # Errors
    /// [`BuildError`] when the HTTP client cannot be built.
    pub fn new(config: GatewayConfig) -> Result<Self, BuildError> {
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(5)))
            .user_agent(concat!("stripe-reconciler/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(BuildError)?;
        // Burst of one, and spacing a little wider than 1/rate: requests leave
        // evenly, and network jitter of up to RATE_HEADROOM of a second cannot
        // put rate + 1 arrivals into one second as Stripe counts them.
        let spacing =
            Duration::from_secs(1).mul_f64(1.0 + RATE_HEADROOM) / config.rate_limit_rps.get();
        let quota = Quota::with_period(spacing)
            .unwrap_or_else(|| Quota::per_second(config.rate_limit_rps))
            .allow_burst(NonZeroU32::MIN);
        Ok(StripeGateway {
            http,
            base: config.base,
            api_key: config.api_key,
            limiter: RateLimiter::direct(quota),
            paused_until: Mutex::new(None),
            retry: config.retry,
            deadline: config.deadline,
            requests: Default::default(),
        })
    }

    /// Reads one PaymentIntent's status (`GET /v1/payment_intents/{id}`); see
    /// [`StripeGateway::payment_intent`].
    ///
    /// # Errors
    /// As [`StripeGateway::payment_intent`].
    pub async fn payment_intent_status(
        &self,
        id: &PaymentIntentId,
    ) -> Result<ExternalStatus, GatewayError> {
        self.payment_intent(id).await.map(|pi| pi.status)
    }

    /// Reads one PaymentIntent with its latest charge
    /// (`GET /v1/payment_intents/{id}?expand[]=latest_charge`).
    ///
    /// # Errors
    /// - [`GatewayError::NotFound`]: Stripe's 404 `resource_missing`.
    /// - [`GatewayError::Rejected`]: 401/403, the key is wrong.
    /// - [`GatewayError::Misconfigured`]: a Stripe 404 that is not
    ///   `resource_missing` (wrong base path).
    /// - [`GatewayError::Unavailable`]: timeouts, connection errors, 429, 5xx,
    ///   or a body that is not a PaymentIntent, after the retry budget.
    #[tracing::instrument(name = "stripe.retrieve", level = "debug", skip_all, fields(payment_intent = %id, request_id = tracing::field::Empty, http_status = tracing::field::Empty))]
    pub async fn payment_intent(
        &self,
        id: &PaymentIntentId,
    ) -> Result<PaymentIntentFacts, GatewayError> {
        let url = self.url_for(id);
        self.request(&url, |headers, body| {
            parse_payment_intent(headers, body, id)
        })
        .await
    }

    /// Asks Stripe whether it answers at all with this key:
    /// `GET /v1/payment_intents?limit=1`, under the same rate limit and retry
    /// rule as every read. A batch whose reads mostly failed calls this before
    /// concluding that Stripe is down: if Stripe answers, the failures belong
    /// to those rows.
    ///
    /// # Errors
    /// As [`StripeGateway::payment_intent`] (`NotFound` aside).
    #[tracing::instrument(name = "stripe.probe", level = "debug", skip_all, fields(request_id = tracing::field::Empty, http_status = tracing::field::Empty))]
    pub async fn probe(&self) -> Result<(), GatewayError> {
        let mut url = self.v1(&["payment_intents"]);
        url.query_pairs_mut().append_pair("limit", "1");
        self.request(&url, |headers, body| {
            let list: serde_json::Value = json_body(headers, body)?;
            match list.get("object").and_then(|o| o.as_str()) {
                Some("list") => Ok(()),
                _ => Err(Unavailable::InvalidBody("not a Stripe list".into())),
            }
        })
        .await
    }

    /// Lists the PaymentIntents created in `window`, newest first, with their
    /// latest charge: `GET /v1/payment_intents?created[gte]&created[lte]
    /// &limit=100&expand[]=data.latest_charge[&starting_after=..]`. Same rate
    /// limit, retry rule and error mapping as [`StripeGateway::payment_intent`].
    ///
    /// # Errors
    /// - [`GatewayError::Rejected`] / [`GatewayError::Misconfigured`] as for a retrieve.
    /// - [`GatewayError::Unavailable`]: timeouts, 429, 5xx, or a body that is
    ///   not a Stripe list, after the retry budget.
    #[tracing::instrument(name = "stripe.list", level = "debug", skip_all, fields(gte = window.gte, lte = window.lte, request_id = tracing::field::Empty, http_status = tracing::field::Empty))]
    pub async fn list_payment_intents(
        &self,
        window: CreatedWindow,
        starting_after: Option<&PaymentIntentId>,
    ) -> Result<ListPage, GatewayError> {
        let mut url = self.v1(&["payment_intents"]);
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("created[gte]", &window.gte.to_string())
                .append_pair("created[lte]", &window.lte.to_string())
                .append_pair("limit", &LIST_PAGE_LIMIT.to_string())
                .append_pair("expand[]", "data.latest_charge");
            if let Some(after) = starting_after {
                query.append_pair("starting_after", after.as_str());
            }
        }
        match self
            .request_capped(&url, MAX_LIST_BODY_BYTES, parse_list_page)
            .await
        {
            // A 404 on the list path says nothing about a PaymentIntent.
            Err(GatewayError::NotFound { request_id }) => Err(GatewayError::Unavailable {
                attempts: 1,
                cause: Unavailable::InvalidBody("HTTP 404 resource_missing on a list".into()),
                request_id,
            }),
            other => other,
        }
    }

    /// Requests sent so far by this gateway, per endpoint.
    pub fn request_counts(&self) -> RequestCounts {
        let [retrieve, list, events] = &self.requests;
        RequestCounts {
            retrieve: retrieve.load(Ordering::Relaxed),
            list: list.load(Ordering::Relaxed),
            events: events.load(Ordering::Relaxed),
        }
    }

    fn count_request(&self, url: &Url) {
        let path = url.path().trim_end_matches('/');
        let slot = if path.ends_with("/v1/payment_intents") {
            1
        } else if path.ends_with("/v1/events") {
            2
        } else {
            0
        };
        self.requests[slot].fetch_add(1, Ordering::Relaxed);
    }

    /// One GET under the rate limit and the retry rule; `parse` turns a 200's
    /// body into the answer.
    pub(super) async fn request<T>(
        &self,
        url: &Url,
        parse: impl Fn(&HeaderMap, &[u8]) -> Result<T, Unavailable>,
    ) -> Result<T, GatewayError> {
        self.request_capped(url, MAX_BODY_BYTES, parse).await
    }

    /// [`StripeGateway::request`] reading bodies of up to `max_body` bytes.
    pub(super) async fn request_capped<T>(
        &self,
        url: &Url,
        max_body: usize,
        parse: impl Fn(&HeaderMap, &[u8]) -> Result<T, Unavailable>,
    ) -> Result<T, GatewayError> {
        let parse = &parse;
        let (result, attempts) = retry::execute(
            &self.retry,
            self.deadline,
            || async move {
                self.wait_turn().await;
                match self.attempt(url, max_body, parse).await {
                    Ok(answer) => Attempt::Done(Ok(answer)),
                    Err(AttemptError::Final(e)) => Attempt::Done(Err(e)),
                    Err(AttemptError::Retryable {
                        outcome,
                        cause,
                        request_id,
                    }) => Attempt::Retry(
                        outcome,
                        GatewayError::Unavailable {
                            attempts: 1,
                            cause,
                            request_id,
                        },
                    ),
                }
            },
            |pause| self.pause_all(pause),
        )
        .await;
        result.map_err(|e| match e {
            GatewayError::Unavailable {
                cause, request_id, ..
            } => GatewayError::Unavailable {
                attempts,
                cause,
                request_id,
            },
            other => other,
        })
    }

    /// `{base}/v1/{segments...}`. Segments are pushed one by one, so anything
    /// outside `[A-Za-z0-9_]` would be percent-encoded, never change the path.
    pub(super) fn v1(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().push("v1").extend(segments);
        }
        url
    }

    fn url_for(&self, id: &PaymentIntentId) -> Url {
        let mut url = self.v1(&["payment_intents", id.as_str()]);
        // The charge in the same request: refunds and disputes live there.
        url.query_pairs_mut()
            .append_pair("expand[]", "latest_charge");
        url
    }

    async fn wait_turn(&self) {
        loop {
            let until = *self.paused_until.lock().unwrap_or_else(|p| p.into_inner());
            match until {
                Some(t) if t > Instant::now() => tokio::time::sleep_until(t).await,
                _ => break,
            }
        }
        self.limiter.until_ready().await;
    }

    fn pause_all(&self, delay: Duration) {
        let until = Instant::now() + delay;
        let mut guard = self.paused_until.lock().unwrap_or_else(|p| p.into_inner());
        if guard.map_or(true, |t| t < until) {
            *guard = Some(until);
        }
    }

    async fn attempt<T>(
        &self,
        url: &Url,
        max_body: usize,
        parse: &impl Fn(&HeaderMap, &[u8]) -> Result<T, Unavailable>,
    ) -> Result<T, AttemptError> {
        self.count_request(url);
        let response = self
            .http
            .get(url.clone())
            .bearer_auth(self.api_key.expose_secret())
            .header("Stripe-Version", STRIPE_VERSION)
            .send()
            .await
            .map_err(transport_error)?;
        let status = response.status();
        let headers = response.headers().clone();
        let request_id = header(&headers, "request-id");
        let span = Span::current();
        span.record("http_status", status.as_u16());
        if let Some(rid) = &request_id {
            span.record("request_id", rid.as_str());
        }
        let body = read_capped(response, max_body)
            .await
            .map_err(|cause| match cause {
                Unavailable::Timeout | Unavailable::Connection(_) => AttemptError::Retryable {
                    outcome: AttemptOutcome::Connection,
                    cause,
                    request_id: request_id.clone(),
                },
                cause => final_unavailable(cause, request_id.clone()),
            })?;
        match status {
            StatusCode::OK => {
                parse(&headers, &body).map_err(|cause| final_unavailable(cause, request_id))
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                Err(AttemptError::Final(GatewayError::Rejected {
                    status: status.as_u16(),
                    request_id,
                }))
            }
            // A 404 is classified by its body: only `resource_missing` says
            // the PaymentIntent is missing, only Stripe's "Unrecognized request
            // URL" says the base URL is wrong; any other 404 (a proxy, a test
            // double, an odd gateway) says nothing, and the row is UNVERIFIABLE.
            StatusCode::NOT_FOUND => match WireErrorEnvelope::parse(&body) {
                Some(e) if e.code.as_deref() == Some("resource_missing") => {
                    Err(AttemptError::Final(GatewayError::NotFound { request_id }))
                }
                Some(e) if e.is_unrecognized_url() => {
                    Err(AttemptError::Final(GatewayError::Misconfigured {
                        status: status.as_u16(),
                        code: e.code,
                        request_id,
                    }))
                }
                Some(e) => Err(final_unavailable(
                    Unavailable::InvalidBody(format!(
                        "HTTP 404 with code {:?}, not resource_missing",
                        e.code.as_deref().unwrap_or("-")
                    )),
                    request_id,
                )),
                None => Err(final_unavailable(
                    Unavailable::InvalidBody("HTTP 404 without Stripe's error body".into()),
                    request_id,
                )),
            },
            other => {
                let error = WireErrorEnvelope::parse(&body);
                let code = error.as_ref().and_then(|e| e.code.as_deref());
                // Old API versions signalled rate limits as 400 `rate_limit`.
                let status = if other == StatusCode::BAD_REQUEST && code == Some("rate_limit") {
                    429
                } else {
                    other.as_u16()
                };
                tracing::debug!(error_type = ?error.as_ref().and_then(|e| e.kind.as_deref()), ?code, "Stripe error response");
                Err(AttemptError::Retryable {
                    outcome: AttemptOutcome::Status {
                        status,
                        should_retry: header(&headers, "stripe-should-retry")
                            .and_then(|v| v.parse().ok()),
                        lock_timeout: code == Some("lock_timeout"),
                    },
                    cause: Unavailable::Status(status),
                    request_id,
                })
            }
        }
    }
}

fn final_unavailable(cause: Unavailable, request_id: Option<String>) -> AttemptError {
    AttemptError::Final(GatewayError::Unavailable {
        attempts: 1,
        cause,
        request_id,
    })
}

fn transport_error(e: reqwest::Error) -> AttemptError {
    if e.is_timeout() {
        AttemptError::Retryable {
            outcome: AttemptOutcome::Timeout,
            cause: Unavailable::Timeout,
            request_id: None,
        }
    } else {
        AttemptError::Retryable {
            outcome: AttemptOutcome::Connection,
            cause: Unavailable::Connection(e.without_url()),
            request_id: None,
        }
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.chars().take(200).collect())
}

async fn read_capped(
    mut response: reqwest::Response,
    max_body: usize,
) -> Result<Vec<u8>, Unavailable> {
    if response
        .content_length()
        .is_some_and(|len| len > max_body as u64)
    {
        return Err(Unavailable::TooLarge(max_body));
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > max_body {
                    return Err(Unavailable::TooLarge(max_body));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) if e.is_timeout() => return Err(Unavailable::Timeout),
            Err(e) => return Err(Unavailable::Connection(e.without_url())),
        }
    }
}

/// A JSON body of a 200 answer; anything else (a proxy's HTML page, truncated
/// JSON) is [`Unavailable::InvalidBody`].
pub(super) fn json_body(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<serde_json::Value, Unavailable> {
    let content_type = header(headers, CONTENT_TYPE.as_str()).unwrap_or_default();
    if !content_type.starts_with("application/json") {
        return Err(Unavailable::InvalidBody(format!(
            "content type {content_type:?}, expected application/json"
        )));
    }
    serde_json::from_slice(body).map_err(|e| Unavailable::InvalidBody(format!("not JSON ({e})")))
}

fn parse_payment_intent(
    headers: &HeaderMap,
    body: &[u8],
    id: &PaymentIntentId,
) -> Result<PaymentIntentFacts, Unavailable> {
    let pi = json_body(headers, body)?;
    if pi.get("id").and_then(|v| v.as_str()) != Some(id.as_str()) && pi.is_object() {
        if pi
            .get("object")
            .is_some_and(|o| o.as_str() != Some("payment_intent"))
        {
            return Err(Unavailable::InvalidBody(
                "object is not a payment_intent".into(),
            ));
        }
        return Err(Unavailable::InvalidBody(
            "id does not match the requested PaymentIntent".into(),
        ));
    }
    payment_intent_object(&pi).map_err(|why| Unavailable::InvalidBody(why.to_owned()))
}

/// A PaymentIntent JSON object into its facts, the same checks for a
/// retrieve's body and for each item of a list page.
fn payment_intent_object(pi: &serde_json::Value) -> Result<PaymentIntentFacts, &'static str> {
    if !pi.is_object() {
        return Err("not a JSON object");
    }
    if pi
        .get("object")
        .is_some_and(|o| o.as_str() != Some("payment_intent"))
    {
        return Err("object is not a payment_intent");
    }
    let status = match pi.get("status") {
        Some(serde_json::Value::String(s))
            if !s.is_empty()
                && s.len() <= MAX_STATUS_LEN
                && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') =>
        {
            ExternalStatus::parse(s)
        }
        Some(serde_json::Value::String(_)) => return Err("status is not a Stripe status word"),
        Some(_) => return Err("status is not a string"),
        None => return Err("status is missing"),
    };
    Ok(payment_intent_facts(pi, status))
}

/// A list page's body: `{"object": "list", "data": [...], "has_more": bool}`.
/// A body that is not a Stripe list is [`Unavailable::InvalidBody`] (a failed
/// read); an item that is not a usable PaymentIntent only spoils that item.
fn parse_list_page(headers: &HeaderMap, body: &[u8]) -> Result<ListPage, Unavailable> {
    let invalid = |why: &str| Unavailable::InvalidBody(why.to_owned());
    let list = json_body(headers, body)?;
    if list.get("object").and_then(|o| o.as_str()) != Some("list") {
        return Err(invalid("not a Stripe list"));
    }
    let Some(data) = list.get("data").and_then(|d| d.as_array()) else {
        return Err(invalid("list without a data array"));
    };
    let Some(has_more) = list.get("has_more").and_then(|h| h.as_bool()) else {
        return Err(invalid("list without has_more"));
    };
    let items: Vec<ListedPaymentIntent> = data
        .iter()
        .filter_map(|pi| {
            let id = PaymentIntentId::parse(pi.get("id")?.as_str()?).ok()?;
            let facts = payment_intent_object(pi).map_err(str::to_owned);
            Some(ListedPaymentIntent { id, facts })
        })
        .collect();
    // Paging goes on after the page's last item; if that item has no usable
    // id the window cannot be paged further (its rows fall back to retrieves).
    let last = data
        .last()
        .and_then(|pi| pi.get("id")?.as_str())
        .and_then(|id| PaymentIntentId::parse(id).ok());
    Ok(ListPage {
        items,
        next_after: if has_more { last } else { None },
    })
}
