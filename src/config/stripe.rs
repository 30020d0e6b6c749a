//! How the binary reaches Stripe: `STRIPE_API_KEY`, `STRIPE_API_BASE` and the
//! read budget `RECONCILER_RATE_LIMIT_RPS`, `RECONCILER_MAX_IN_FLIGHT`,
//! `RECONCILER_HTTP_TIMEOUT_SECONDS` (DESIGN.md, Interface).

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use url::Url;

use super::error::{invalid, ConfigError};
use super::{value, JobSettings};

/// Stripe's production API.
pub const DEFAULT_STRIPE_API_BASE: &str = "https://api.stripe.com";

#[derive(Deserialize)]
struct StripeVars {
    stripe_api_key: Option<SecretString>,
    stripe_api_base: Option<String>,
    reconciler_rate_limit_rps: Option<String>,
    reconciler_max_in_flight: Option<String>,
    reconciler_http_timeout_seconds: Option<String>,
}

/// The Stripe group, validated.
pub(super) struct Stripe {
    pub(super) api_key: Option<SecretString>,
    pub(super) api_base: Url,
    pub(super) rate_limit_rps: u32,
    pub(super) max_in_flight: u32,
    pub(super) http_timeout: Duration,
}

/// Parses the Stripe group; defaults from [`JobSettings::default`].
///
/// # Errors
/// [`ConfigError`] naming the first malformed variable.
pub(super) fn parse<I>(vars: I) -> Result<Stripe, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: StripeVars = value::read(None, vars)?;
    let d = JobSettings::default();
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
