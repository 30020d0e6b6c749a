//! One GET to Stripe: the shared rate limit and 429 pause, the retry rule of
//! [`super::retry`], the HTTP status mapping onto [`GatewayError`], and a
//! capped body read. What a 200's body means is the caller's `parse`
//! ([`super::parsing`]).

use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use reqwest::header::{HeaderMap, LOCATION};
use reqwest::StatusCode;
use secrecy::ExposeSecret;
use tokio::time::Instant;
use tracing::Span;
use url::Url;

use super::account::AccountId;
use super::counting::Endpoint;
use super::error::{GatewayError, InvalidBody, Unavailable};
use super::gateway::StripeGateway;
use super::parsing::header;
use super::retry::{self, Attempt, AttemptOutcome};
use super::wire::WireErrorEnvelope;

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

/// The run's one rate limiter for `rps` reads per second.
pub(super) fn rate_limiter(rps: NonZeroU32) -> DefaultDirectRateLimiter {
    RateLimiter::direct(rate_quota(rps))
}

/// The quota of [`rate_limiter`]: a burst of one, and spacing a little wider
/// than 1/rate: requests leave evenly, and network jitter of up to
/// RATE_HEADROOM of a second cannot put rate + 1 arrivals into one second as
/// Stripe counts them.
fn rate_quota(rps: NonZeroU32) -> Quota {
    let spacing = Duration::from_secs(1).mul_f64(1.0 + RATE_HEADROOM) / rps.get();
    Quota::with_period(spacing)
        .unwrap_or_else(|| Quota::per_second(rps))
        .allow_burst(NonZeroU32::MIN)
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
    /// One GET to `endpoint` under the rate limit and the retry rule; `parse`
    /// turns a 200's body into the answer. With `account`, the request carries
    /// `Stripe-Account` (Stripe API reference, Connected Accounts) and a
    /// refusal of access to that account is [`GatewayError::AccountUnreachable`],
    /// remembered in the gateway's [`super::AccountAccess`].
    pub(super) async fn request<T>(
        &self,
        endpoint: Endpoint,
        url: &Url,
        account: Option<&AccountId>,
        parse: impl Fn(&HeaderMap, &[u8]) -> Result<T, Unavailable>,
    ) -> Result<T, GatewayError> {
        self.request_capped(endpoint, url, account, MAX_BODY_BYTES, parse)
            .await
    }

    /// [`StripeGateway::request`] reading bodies of up to `max_body` bytes.
    pub(super) async fn request_capped<T>(
        &self,
        endpoint: Endpoint,
        url: &Url,
        account: Option<&AccountId>,
        max_body: usize,
        parse: impl Fn(&HeaderMap, &[u8]) -> Result<T, Unavailable>,
    ) -> Result<T, GatewayError> {
        let result = self
            .request_once(endpoint, url, account, max_body, parse)
            .await;
        if let (Some(account), Err(e @ GatewayError::AccountUnreachable { .. })) =
            (account, &result)
        {
            self.accounts.mark_unreachable(account, e.to_string());
        }
        result
    }

    async fn request_once<T>(
        &self,
        endpoint: Endpoint,
        url: &Url,
        account: Option<&AccountId>,
        max_body: usize,
        parse: impl Fn(&HeaderMap, &[u8]) -> Result<T, Unavailable>,
    ) -> Result<T, GatewayError> {
        let parse = &parse;
        let (result, attempts) = retry::execute(
            &self.retry,
            self.deadline,
            || async move {
                self.wait_turn().await;
                self.requests.count(endpoint);
                match self.attempt(url, account, max_body, parse).await {
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

    /// A GET of `url` with the key and the API version, on `account`'s
    /// behalf when given.
    fn get_request(&self, url: &Url, account: Option<&AccountId>) -> reqwest::RequestBuilder {
        let request = self
            .http
            .get(url.clone())
            .bearer_auth(self.api_key.expose_secret())
            .header("Stripe-Version", STRIPE_VERSION);
        match account {
            // Only a parsed `acct_[A-Za-z0-9]+`: never a stored value as such.
            Some(account) => request.header("Stripe-Account", account.as_str()),
            None => request,
        }
    }

    async fn attempt<T>(
        &self,
        url: &Url,
        account: Option<&AccountId>,
        max_body: usize,
        parse: &impl Fn(&HeaderMap, &[u8]) -> Result<T, Unavailable>,
    ) -> Result<T, AttemptError> {
        let response = self
            .get_request(url, account)
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
            .map_err(|cause| body_unreadable(cause, request_id.clone()))?;
        match status {
            StatusCode::OK => {
                parse(&headers, &body).map_err(|cause| final_unavailable(cause, request_id))
            }
            StatusCode::BAD_REQUEST | StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
                if account.is_some_and(|_| no_access_to_account(&body)) =>
            {
                let error = WireErrorEnvelope::parse(&body);
                Err(AttemptError::Final(GatewayError::AccountUnreachable {
                    account: account.map(|a| a.as_str().to_owned()).unwrap_or_default(),
                    status: status.as_u16(),
                    code: error.and_then(|e| e.code).filter(|c| is_word(c)),
                    request_id,
                }))
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                Err(AttemptError::Final(GatewayError::Rejected {
                    status: status.as_u16(),
                    request_id,
                }))
            }
            StatusCode::NOT_FOUND => Err(not_found(&body, request_id)),
            redirect if redirect.is_redirection() => {
                Err(AttemptError::Final(GatewayError::Redirected {
                    status: redirect.as_u16(),
                    location_host: location_host(url, &headers),
                    request_id,
                }))
            }
            other => Err(other_status(other, &headers, &body, request_id)),
        }
    }
}

/// A response body that could not be read: retried when the connection
/// failed or timed out, final otherwise (too large).
fn body_unreadable(cause: Unavailable, request_id: Option<String>) -> AttemptError {
    match cause {
        Unavailable::Timeout | Unavailable::Connection(_) => AttemptError::Retryable {
            outcome: AttemptOutcome::Connection,
            cause,
            request_id,
        },
        cause => final_unavailable(cause, request_id),
    }
}

/// Stripe's refusal of a request made for a connected account the platform
/// cannot read: code `account_invalid` ("the account ID provided as a value
/// for the Stripe-Account header is invalid"), or the message "... does not
/// have access to account 'acct_...' (or that account does not exist).
/// Application access may have been revoked." (Stripe's error of a
/// disconnected account or a revoked OAuth application). Any other 401/403
/// on such a request is still the key's fault ([`GatewayError::Rejected`]).
fn no_access_to_account(body: &[u8]) -> bool {
    let Some(e) = WireErrorEnvelope::parse(body) else {
        return false;
    };
    let message = e.message.as_deref().unwrap_or("");
    e.code.as_deref() == Some("account_invalid")
        || message.contains("does not have access to account")
        || message.contains("Application access may have been revoked")
}

/// A short error code worth keeping (Stripe's codes are lowercase words).
fn is_word(code: &str) -> bool {
    !code.is_empty()
        && code.len() <= 64
        && code
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// A 404 is classified by its body: only `resource_missing` says the
/// PaymentIntent is missing, only Stripe's "Unrecognized request URL" says the
/// base URL is wrong; any other 404 (a proxy, a test double, an odd gateway)
/// says nothing, and the row is UNVERIFIABLE.
fn not_found(body: &[u8], request_id: Option<String>) -> AttemptError {
    match WireErrorEnvelope::parse(body) {
        Some(e) if e.code.as_deref() == Some("resource_missing") => {
            AttemptError::Final(GatewayError::NotFound { request_id })
        }
        Some(e) if e.is_unrecognized_url() => AttemptError::Final(GatewayError::Misconfigured {
            status: StatusCode::NOT_FOUND.as_u16(),
            code: e.code,
            request_id,
        }),
        Some(e) => final_unavailable(
            Unavailable::InvalidBody(InvalidBody::NotFoundCode(
                e.code.unwrap_or_else(|| "-".to_owned()),
            )),
            request_id,
        ),
        None => final_unavailable(
            Unavailable::InvalidBody(InvalidBody::NotFoundWithoutEnvelope),
            request_id,
        ),
    }
}

/// Every other status goes to the retry rule (429, 409, 5xx, odd 4xx).
fn other_status(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    request_id: Option<String>,
) -> AttemptError {
    let error = WireErrorEnvelope::parse(body);
    let code = error.as_ref().and_then(|e| e.code.as_deref());
    // Old API versions signalled rate limits as 400 `rate_limit`.
    let status = if status == StatusCode::BAD_REQUEST && code == Some("rate_limit") {
        429
    } else {
        status.as_u16()
    };
    tracing::debug!(error_type = ?error.as_ref().and_then(|e| e.kind.as_deref()), ?code, "Stripe error response");
    AttemptError::Retryable {
        outcome: AttemptOutcome::Status {
            status,
            should_retry: header(headers, "stripe-should-retry").and_then(|v| v.parse().ok()),
            lock_timeout: code == Some("lock_timeout"),
        },
        cause: Unavailable::Status(status),
        request_id,
    }
}

/// The host a redirect points at: `Location` resolved against the request's
/// URL (a relative `Location` stays on the base's host).
fn location_host(url: &Url, headers: &HeaderMap) -> Option<String> {
    let location = headers.get(LOCATION)?.to_str().ok()?;
    let target = url.join(location).ok()?;
    target.host_str().map(str::to_owned)
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

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    /// At 2 reads a second: one read goes at once, the second is refused
    /// until 1.03 / 2 s (515 ms) have passed (a burst of one).
    #[test]
    fn the_limiter_at_two_a_second_allows_one_read_at_once() {
        let clock = FakeRelativeClock::default();
        let limiter =
            RateLimiter::direct_with_clock(rate_quota(NonZeroU32::new(2).unwrap()), clock.clone());
        assert!(limiter.check().is_ok(), "the first read goes at once");
        assert!(limiter.check().is_err(), "the second is refused");
        clock.advance(Duration::from_millis(514));
        assert!(limiter.check().is_err(), "still refused at 514 ms");
        clock.advance(Duration::from_millis(1));
        assert!(limiter.check().is_ok(), "allowed at 515 ms");
        assert!(limiter.check().is_err(), "and again one only");
    }
}
