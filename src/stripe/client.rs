//! [`StripeGateway`]: the reads the reconciler makes (retrieve, probe, list;
//! the events feed is in [`super::events`]), over the transport of
//! `super::transport`, counted per [`Endpoint`] by [`super::counting`].

use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use tokio::time::Instant;
use url::Url;

use super::account::{AccountAccess, AccountId};
use super::counting::{Endpoint, RequestCounter};
use super::error::{BuildError, GatewayError, InvalidBody, Unavailable};
pub use super::gateway::StripeGateway;
use super::id::PaymentIntentId;
use super::parsing::{parse_any_list, parse_list_page, parse_payment_intent};
use super::retry::RetryPolicy;
use super::transport::{rate_limiter, MAX_LIST_BODY_BYTES};
use crate::reconcile::{ExternalStatus, PaymentIntentFacts};

// The old paths of what moved to the transport, counting and parsing files.
pub use super::counting::RequestCounts;
pub use super::parsing::{ListPage, ListedPaymentIntent};
pub use super::transport::{MAX_BODY_BYTES, RATE_HEADROOM, STRIPE_VERSION};

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

impl StripeGateway {
    /// Builds the gateway. Redirects are never followed (the key would go
    /// with them); a 3xx is [`GatewayError::Redirected`]. Warns once (tracing
    /// `warn`) when a live key would travel over plain `http://`; see
    /// [`live_key_over_plain_http`].
    ///
    /// # Errors
    /// [`BuildError`] when the HTTP client cannot be built.
    pub fn new(config: GatewayConfig) -> Result<Self, BuildError> {
        if live_key_over_plain_http(&config.base, &config.api_key) {
            // Only the host: the key never goes into a log line.
            tracing::warn!(
                stripe_api_base_host = config.base.host_str().unwrap_or("-"),
                "STRIPE_API_KEY is a live key and STRIPE_API_BASE is plain http://: the key leaves this process unencrypted; this is only safe to a local proxy that adds TLS"
            );
        }
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(5)))
            .user_agent(concat!("stripe-reconciler/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(BuildError)?;
        Ok(StripeGateway {
            http,
            base: config.base,
            api_key: config.api_key,
            limiter: rate_limiter(config.rate_limit_rps),
            paused_until: Mutex::new(None),
            retry: config.retry,
            deadline: config.deadline,
            requests: RequestCounter::default(),
            accounts: AccountAccess::default(),
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

    /// [`StripeGateway::payment_intent_status`] on `account` (`None`: the platform).
    ///
    /// # Errors
    /// As [`StripeGateway::payment_intent_on`].
    pub async fn payment_intent_status_on(
        &self,
        account: Option<&AccountId>,
        id: &PaymentIntentId,
    ) -> Result<ExternalStatus, GatewayError> {
        self.payment_intent_on(account, id)
            .await
            .map(|pi| pi.status)
    }

    /// Reads one PaymentIntent of the platform's own account; see
    /// [`StripeGateway::payment_intent_on`].
    ///
    /// # Errors
    /// As [`StripeGateway::payment_intent_on`].
    pub async fn payment_intent(
        &self,
        id: &PaymentIntentId,
    ) -> Result<PaymentIntentFacts, GatewayError> {
        self.payment_intent_on(None, id).await
    }

    /// The connected accounts this gateway (one run) found unreachable.
    pub fn accounts(&self) -> &AccountAccess {
        &self.accounts
    }

    /// Reads one PaymentIntent with its latest charge
    /// (`GET /v1/payment_intents/{id}?expand[]=latest_charge`), on the
    /// connected `account` (`Stripe-Account` header) or, with `None`, on the
    /// platform's own account.
    ///
    /// # Errors
    /// - [`GatewayError::NotFound`]: Stripe's 404 `resource_missing`.
    /// - [`GatewayError::Rejected`]: 401/403, the key is wrong.
    /// - [`GatewayError::Misconfigured`]: a Stripe 404 that is not
    ///   `resource_missing` (wrong base path).
    /// - [`GatewayError::Redirected`]: a 3xx (STRIPE_API_BASE is not the API).
    /// - [`GatewayError::AccountUnreachable`]: with `account`, Stripe says the
    ///   platform has no access to it (the account is then remembered in
    ///   [`StripeGateway::accounts`]).
    /// - [`GatewayError::Unavailable`]: timeouts, connection errors, 429, 5xx,
    ///   or a body that is not a PaymentIntent, after the retry budget.
    #[tracing::instrument(name = "stripe.retrieve", level = "debug", skip_all, fields(payment_intent = %id, stripe_account = account.map(AccountId::as_str), request_id = tracing::field::Empty, http_status = tracing::field::Empty))]
    pub async fn payment_intent_on(
        &self,
        account: Option<&AccountId>,
        id: &PaymentIntentId,
    ) -> Result<PaymentIntentFacts, GatewayError> {
        let mut url = self.v1(&["payment_intents", id.as_str()]);
        // The charge in the same request: refunds and disputes live there.
        url.query_pairs_mut()
            .append_pair("expand[]", "latest_charge");
        self.request(Endpoint::Retrieve, &url, account, |headers, body| {
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
        self.request(Endpoint::List, &url, None, parse_any_list)
            .await
    }

    /// Lists the PaymentIntents of `account` (`Stripe-Account` header;
    /// `None`: the platform's own account) created in `window`, newest first,
    /// with their latest charge: `GET /v1/payment_intents?created[gte]
    /// &created[lte]&limit=100&expand[]=data.latest_charge[&starting_after=..]`.
    /// Same rate limit, retry rule and error mapping as
    /// [`StripeGateway::payment_intent`].
    ///
    /// # Errors
    /// - [`GatewayError::Rejected`] / [`GatewayError::Misconfigured`] /
    ///   [`GatewayError::AccountUnreachable`] as for a retrieve.
    /// - [`GatewayError::Unavailable`]: timeouts, 429, 5xx, or a body that is
    ///   not a Stripe list, after the retry budget.
    #[tracing::instrument(name = "stripe.list", level = "debug", skip_all, fields(gte = window.gte, lte = window.lte, stripe_account = account.map(AccountId::as_str), request_id = tracing::field::Empty, http_status = tracing::field::Empty))]
    pub async fn list_payment_intents_on(
        &self,
        account: Option<&AccountId>,
        window: CreatedWindow,
        starting_after: Option<&PaymentIntentId>,
    ) -> Result<ListPage, GatewayError> {
        self.list_page(
            (&["payment_intents"], "data.latest_charge"),
            account,
            window,
            starting_after.map(PaymentIntentId::as_str),
            parse_list_page,
        )
        .await
    }

    /// One page of a Stripe list endpoint (`path` under `/v1`, with
    /// `expand[]=<expand>`) created in `window` on `account`, newest first,
    /// [`LIST_PAGE_LIMIT`] objects after `starting_after`; the body capped at
    /// [`MAX_LIST_BODY_BYTES`]. Shared by the PaymentIntents' and the
    /// Checkout Sessions' lists.
    ///
    /// # Errors
    /// As [`StripeGateway::list_payment_intents_on`]; a 404 on a list path says
    /// nothing about an object, so it is [`GatewayError::Unavailable`]
    /// ([`InvalidBody::NotFoundOnList`]).
    pub(super) async fn list_page<T>(
        &self,
        (path, expand): (&[&str], &str),
        account: Option<&AccountId>,
        window: CreatedWindow,
        starting_after: Option<&str>,
        parse: impl Fn(&reqwest::header::HeaderMap, &[u8]) -> Result<T, Unavailable>,
    ) -> Result<T, GatewayError> {
        let mut url = self.v1(path);
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("created[gte]", &window.gte.to_string())
                .append_pair("created[lte]", &window.lte.to_string())
                .append_pair("limit", &LIST_PAGE_LIMIT.to_string())
                .append_pair("expand[]", expand);
            if let Some(after) = starting_after {
                query.append_pair("starting_after", after);
            }
        }
        match self
            .request_capped(Endpoint::List, &url, account, MAX_LIST_BODY_BYTES, parse)
            .await
        {
            Err(GatewayError::NotFound { request_id }) => Err(GatewayError::Unavailable {
                attempts: 1,
                cause: Unavailable::InvalidBody(InvalidBody::NotFoundOnList),
                request_id,
            }),
            other => other,
        }
    }

    /// Requests sent so far by this gateway, per endpoint.
    pub fn request_counts(&self) -> RequestCounts {
        self.requests.snapshot()
    }
}

/// A live key (`sk_live_`, `rk_live_`: Stripe's secret and restricted live
/// keys) with a `http://` base. Not refused: a local egress proxy that
/// originates TLS to Stripe is a legitimate setup (docs/scan.md, "Guards"); the operator is
/// told once instead.
pub fn live_key_over_plain_http(base: &Url, api_key: &SecretString) -> bool {
    let key = api_key.expose_secret();
    base.scheme() == "http" && (key.starts_with("sk_live_") || key.starts_with("rk_live_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_live_key_over_http_is_warned_about() {
        let http: Url = "http://127.0.0.1:8080".parse().unwrap();
        let https: Url = "https://api.stripe.com".parse().unwrap();
        let key = |k: &str| SecretString::from(k.to_owned());
        assert!(live_key_over_plain_http(&http, &key("sk_live_abc")));
        assert!(live_key_over_plain_http(&http, &key("rk_live_abc")));
        assert!(!live_key_over_plain_http(&http, &key("sk_test_abc")));
        assert!(!live_key_over_plain_http(&https, &key("sk_live_abc")));
    }
}
