//! How the binary reaches Stripe: `STRIPE_API_KEY`, `STRIPE_API_BASE` and the
//! read budget `RECONCILER_RATE_LIMIT_RPS`, `RECONCILER_MAX_IN_FLIGHT`,
//! `RECONCILER_HTTP_TIMEOUT_SECONDS` (DESIGN.md, Interface).

use std::num::NonZeroU32;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use url::Url;

use super::error::{invalid, ConfigError};
use super::value;
use crate::stripe::{BuildError, GatewayConfig, RetryPolicy, StripeGateway};

/// Stripe's production API.
pub const DEFAULT_STRIPE_API_BASE: &str = "https://api.stripe.com";

/// The Stripe group: where the reads go and their budget. The key is not
/// part of it: it is a secret held by [`super::Settings`] (required by the
/// commands that call Stripe) and handed to [`StripeSettings::gateway`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeSettings {
    /// `STRIPE_API_BASE`, default [`DEFAULT_STRIPE_API_BASE`].
    pub api_base: Url,
    /// `RECONCILER_RATE_LIMIT_RPS`: Stripe reads per second (>= 1, default 10).
    pub rate_limit_rps: u32,
    /// `RECONCILER_MAX_IN_FLIGHT`: concurrent Stripe reads (1..=100, default 8).
    pub max_in_flight: u32,
    /// `RECONCILER_HTTP_TIMEOUT_SECONDS`: per Stripe request (>= 1, default 10 s).
    pub http_timeout: Duration,
}

impl Default for StripeSettings {
    fn default() -> Self {
        StripeSettings {
            api_base: default_api_base(),
            rate_limit_rps: 10,
            max_in_flight: 8,
            http_timeout: Duration::from_secs(10),
        }
    }
}

/// [`DEFAULT_STRIPE_API_BASE`] as a URL.
fn default_api_base() -> Url {
    // A constant that parses: checked by the unit tests of `config`.
    Url::parse(DEFAULT_STRIPE_API_BASE).unwrap_or_else(|_| unreachable!("a valid constant URL"))
}

impl StripeSettings {
    /// The run's Stripe gateway: this base, rate and timeout, the default
    /// retry policy, and no retry waiting past `deadline` (from now; the
    /// run's `RECONCILER_RUN_DEADLINE_SECONDS`).
    ///
    /// # Errors
    /// [`BuildError`] when the HTTP client cannot be built.
    pub fn gateway(
        &self,
        api_key: SecretString,
        deadline: Option<Duration>,
    ) -> Result<StripeGateway, BuildError> {
        StripeGateway::new(GatewayConfig {
            base: self.api_base.clone(),
            api_key,
            rate_limit_rps: NonZeroU32::new(self.rate_limit_rps).unwrap_or(NonZeroU32::MIN),
            timeout: self.http_timeout,
            retry: RetryPolicy::default(),
            deadline: deadline.map(|d| tokio::time::Instant::now() + d),
        })
    }
}

#[derive(Deserialize)]
struct StripeVars {
    stripe_api_key: Option<SecretString>,
    stripe_api_base: Option<String>,
    reconciler_rate_limit_rps: Option<String>,
    reconciler_max_in_flight: Option<String>,
    reconciler_http_timeout_seconds: Option<String>,
}

/// The Stripe group and the key, validated.
pub(super) struct Stripe {
    pub(super) api_key: Option<SecretString>,
    pub(super) settings: StripeSettings,
}

/// Parses the Stripe group; defaults from [`StripeSettings::default`].
///
/// # Errors
/// [`ConfigError`] naming the first malformed variable.
pub(super) fn parse<I>(vars: I) -> Result<Stripe, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: StripeVars = value::read(None, vars)?;
    let d = StripeSettings::default();
    let api_key = raw.stripe_api_key.filter(|k| !k.expose_secret().is_empty());
    if let Some(key) = &api_key {
        if key.expose_secret().trim() != key.expose_secret() {
            return Err(invalid(
                "STRIPE_API_KEY",
                "has leading or trailing whitespace",
            ));
        }
    }
    Ok(Stripe {
        api_key,
        settings: StripeSettings {
            api_base: api_base(
                raw.stripe_api_base
                    .as_deref()
                    .unwrap_or(DEFAULT_STRIPE_API_BASE),
            )?,
            rate_limit_rps: value::number(
                "RECONCILER_RATE_LIMIT_RPS",
                raw.reconciler_rate_limit_rps,
                d.rate_limit_rps,
                1,
                10_000,
            )?,
            max_in_flight: value::number(
                "RECONCILER_MAX_IN_FLIGHT",
                raw.reconciler_max_in_flight,
                d.max_in_flight,
                1,
                100,
            )?,
            http_timeout: Duration::from_secs(value::number(
                "RECONCILER_HTTP_TIMEOUT_SECONDS",
                raw.reconciler_http_timeout_seconds,
                d.http_timeout.as_secs(),
                1,
                300,
            )?),
        },
    })
}

/// STRIPE_API_BASE carries the Bearer key: plain http only to this machine
/// (a local stand-in or a sidecar proxy), and no `/v1` (the client adds it).
fn api_base(raw: &str) -> Result<Url, ConfigError> {
    let var = "STRIPE_API_BASE";
    let url = value::http_url(var, raw)?;
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    if url.scheme() == "http" && !loopback {
        return Err(invalid(
            var,
            "must be https:// (plain http only to localhost): it carries the API key",
        ));
    }
    if url.path().trim_end_matches('/').ends_with("/v1") {
        return Err(invalid(
            var,
            "must not end with /v1: the client adds /v1/payment_intents/{id}",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(var, "must not have a query or fragment"));
    }
    Ok(url)
}
