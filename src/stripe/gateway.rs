//! [`StripeGateway`]: the state one run's Stripe reads share (HTTP client,
//! key, rate limiter, retry budget, counts, account access). Its reads are
//! [`super::client`] and [`super::events`], its requests
//! [`super::transport`].

use std::sync::Mutex;

use governor::DefaultDirectRateLimiter;
use secrecy::SecretString;
use tokio::time::Instant;
use url::Url;

use super::account::AccountAccess;
use super::counting::RequestCounter;
use super::retry::RetryPolicy;

/// Reads PaymentIntent statuses from Stripe.
///
/// One gateway serves a whole run: its rate limiter is shared by every
/// concurrent read, and a 429 rate limit pauses all of them.
pub struct StripeGateway {
    pub(super) http: reqwest::Client,
    pub(super) base: Url,
    pub(super) api_key: SecretString,
    pub(super) limiter: DefaultDirectRateLimiter,
    pub(super) paused_until: Mutex<Option<Instant>>,
    pub(super) retry: RetryPolicy,
    pub(super) deadline: Option<Instant>,
    pub(super) requests: RequestCounter,
    pub(super) accounts: AccountAccess,
}
