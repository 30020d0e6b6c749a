//! How the binary reaches Stripe: `STRIPE_API_KEY`, `STRIPE_API_BASE` and the
//! read budget `RECONCILER_RATE_LIMIT_RPS`, `RECONCILER_MAX_IN_FLIGHT`,
//! `RECONCILER_HTTP_TIMEOUT_SECONDS` (docs/configuration.md).

use std::num::NonZeroU32;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use url::Url;

use super::error::{invalid, ConfigError};
use super::value;
use crate::dashboard::DashboardMode;
use crate::stripe::{BuildError, GatewayConfig, RetryPolicy, StripeGateway};

/// Stripe's production API.
pub const DEFAULT_STRIPE_API_BASE: &str = "https://api.stripe.com";

/// The Stripe group: the key, where the reads go and their budget; it builds
/// the gateway ([`StripeSettings::gateway`]). Its `Debug` prints the key as
/// `[REDACTED]`.
#[derive(Debug, Clone)]
pub struct StripeSettings {
    /// `STRIPE_API_KEY` (secret); required by the commands that call Stripe
    /// ([`StripeSettings::require_key`]), `None` when unset or empty.
    pub api_key: Option<SecretString>,
    /// `STRIPE_API_BASE`; `None` (unset): Stripe's production API,
    /// [`DEFAULT_STRIPE_API_BASE`] ([`StripeSettings::base`]).
    pub api_base: Option<Url>,
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
            api_key: None,
            api_base: None,
            rate_limit_rps: 10,
            max_in_flight: 8,
            http_timeout: Duration::from_secs(10),
        }
    }
}

/// Two groups are equal when every setting is, the key compared by value
/// (tests compare parsed settings; [`SecretString`] has no `PartialEq`).
impl PartialEq for StripeSettings {
    fn eq(&self, other: &Self) -> bool {
        let key = |s: &Self| s.api_key.as_ref().map(|k| k.expose_secret().to_owned());
        key(self) == key(other)
            && self.api_base == other.api_base
            && self.rate_limit_rps == other.rate_limit_rps
            && self.max_in_flight == other.max_in_flight
            && self.http_timeout == other.http_timeout
    }
}

impl Eq for StripeSettings {}

/// Why the gateway could not be built.
#[derive(Debug, thiserror::Error)]
pub enum GatewaySetupError {
    /// `STRIPE_API_KEY` is missing (exit 78).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The HTTP client could not be built (exit 1).
    #[error(transparent)]
    Http(#[from] BuildError),
}

impl StripeSettings {
    /// The Dashboard a finding's link opens: `explicit` (`--dashboard`) if
    /// given, else the mode of `STRIPE_API_KEY`, else live
    /// ([`DashboardMode::choose`]).
    pub fn dashboard_mode(&self, explicit: Option<DashboardMode>) -> DashboardMode {
        DashboardMode::choose(explicit, self.api_key.as_ref().map(|k| k.expose_secret()))
    }

    /// The key, or the error the commands that call Stripe report when it
    /// is missing.
    ///
    /// # Errors
    /// [`ConfigError::Missing`] for `STRIPE_API_KEY`.
    pub fn require_key(&self) -> Result<&SecretString, ConfigError> {
        self.api_key.as_ref().ok_or(ConfigError::Missing {
            var: "STRIPE_API_KEY",
        })
    }

    /// `STRIPE_API_BASE`, or Stripe's production API when it is unset.
    ///
    /// # Errors
    /// [`ConfigError`] naming `STRIPE_API_BASE` if [`DEFAULT_STRIPE_API_BASE`]
    /// did not parse (it does: checked by a unit test).
    pub fn base(&self) -> Result<Url, ConfigError> {
        match &self.api_base {
            Some(url) => Ok(url.clone()),
            None => value::http_url("STRIPE_API_BASE", DEFAULT_STRIPE_API_BASE),
        }
    }

    /// The run's Stripe gateway: this key, base, rate and timeout, the
    /// default retry policy, and no retry waiting past `deadline` (from now;
    /// the run's `RECONCILER_RUN_DEADLINE_SECONDS`).
    ///
    /// # Errors
    /// [`GatewaySetupError::Config`] without a key,
    /// [`GatewaySetupError::Http`] when the HTTP client cannot be built.
    pub fn gateway(&self, deadline: Option<Duration>) -> Result<StripeGateway, GatewaySetupError> {
        let api_key = self.require_key()?.clone();
        Ok(StripeGateway::new(GatewayConfig {
            base: self.base()?,
            api_key,
            rate_limit_rps: NonZeroU32::new(self.rate_limit_rps).unwrap_or(NonZeroU32::MIN),
            timeout: self.http_timeout,
            retry: RetryPolicy::default(),
            deadline: deadline.map(|d| tokio::time::Instant::now() + d),
        })?)
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

/// Parses the Stripe group; defaults from [`StripeSettings::default`].
///
/// # Errors
/// [`ConfigError`] naming the first malformed variable.
pub(super) fn parse<I>(vars: I) -> Result<StripeSettings, ConfigError>
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
    Ok(StripeSettings {
        api_key,
        api_base: raw.stripe_api_base.as_deref().map(api_base).transpose()?,
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
