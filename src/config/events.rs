//! The settings of `stripe-reconciler events`: `RECONCILER_EVENTS_*` and
//! `RECONCILER_ORPHAN_METADATA_KEY` (docs/events.md).

use std::time::Duration;

use serde::Deserialize;

use super::error::{invalid, ConfigError};
use super::value;

/// How far Stripe keeps events: 30 days.
pub const STRIPE_EVENTS_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// The settings of `stripe-reconciler events`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsSettings {
    /// `RECONCILER_EVENTS_LOOKBACK_SECONDS`: how far back the first run reads
    /// (default 86,400 s; at most 30 days, Stripe's retention).
    pub lookback: Duration,
    /// `RECONCILER_EVENTS_MAX_PAGES`: list pages of 100 events read per run
    /// (1..=10,000, default 100), from the run's first page. A
    /// longer backlog is read by the next runs from the committed position,
    /// not dropped. A third of it bounds the held PaymentIntents read again
    /// per run ([`crate::events::held::held_limit`]).
    pub max_pages: u32,
    /// `RECONCILER_ORPHAN_METADATA_KEY`: only PaymentIntents whose metadata
    /// has this key can become `missing_locally` (an account shared with
    /// other applications). Default unset: every succeeded PaymentIntent.
    pub orphan_metadata_key: Option<String>,
    /// `RECONCILER_EVENTS_ACCOUNT_ACTIVE_SECONDS` (docs/connect.md, "Events
    /// per connected account"): with `RECONCILER_ACCOUNT_COLUMN`, the connected accounts
    /// with rows created or updated this recently get their own feed read
    /// (default 2,592,000 s = 30 days, Stripe's event retention; at least
    /// 60 s).
    pub account_active: Duration,
}

impl Default for EventsSettings {
    fn default() -> Self {
        EventsSettings {
            lookback: Duration::from_secs(86_400),
            max_pages: 100,
            orphan_metadata_key: None,
            account_active: STRIPE_EVENTS_RETENTION,
        }
    }
}

#[derive(Deserialize)]
struct EventsVars {
    events_lookback_seconds: Option<String>,
    events_max_pages: Option<String>,
    orphan_metadata_key: Option<String>,
    events_account_active_seconds: Option<String>,
}

/// Parses the events group.
///
/// # Errors
/// [`ConfigError`] naming the first malformed variable.
pub(super) fn parse<I>(vars: I) -> Result<EventsSettings, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: EventsVars = value::read(Some("RECONCILER_"), vars)?;
    let d = EventsSettings::default();
    Ok(EventsSettings {
        lookback: Duration::from_secs(value::number(
            "RECONCILER_EVENTS_LOOKBACK_SECONDS",
            raw.events_lookback_seconds,
            d.lookback.as_secs(),
            1,
            STRIPE_EVENTS_RETENTION.as_secs(),
        )?),
        max_pages: value::number(
            "RECONCILER_EVENTS_MAX_PAGES",
            raw.events_max_pages,
            d.max_pages,
            1,
            10_000,
        )?,
        orphan_metadata_key: metadata_key(raw.orphan_metadata_key)?,
        account_active: Duration::from_secs(value::number(
            "RECONCILER_EVENTS_ACCOUNT_ACTIVE_SECONDS",
            raw.events_account_active_seconds,
            d.account_active.as_secs(),
            60,
            10 * 365 * 86_400,
        )?),
    })
}

/// `RECONCILER_ORPHAN_METADATA_KEY`: Stripe metadata keys are at most 40
/// characters; blank means unset.
fn metadata_key(value: Option<String>) -> Result<Option<String>, ConfigError> {
    let Some(key) = value.map(|k| k.trim().to_owned()).filter(|k| !k.is_empty()) else {
        return Ok(None);
    };
    if key.chars().count() > 40 || key.contains('[') || key.contains(']') {
        return Err(invalid(
            "RECONCILER_ORPHAN_METADATA_KEY",
            "must be a Stripe metadata key: at most 40 characters, no square brackets",
        ));
    }
    Ok(Some(key))
}
