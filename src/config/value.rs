//! Value parsers shared by the groups; each error names its variable.

use std::str::FromStr;

use url::Url;

use super::error::{invalid, ConfigError};

/// A whole number within `min..=max`; `default` when the variable is unset.
pub(super) fn number<T>(
    var: &'static str,
    raw: Option<String>,
    default: T,
    min: T,
    max: T,
) -> Result<T, ConfigError>
where
    T: FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let Some(raw) = raw else { return Ok(default) };
    let value: T = raw
        .trim()
        .parse()
        .map_err(|_| invalid(var, format!("{raw:?} is not a whole number")))?;
    if value < min || value > max {
        return Err(invalid(var, format!("{value} is outside {min}..={max}")));
    }
    Ok(value)
}

/// An `http://` or `https://` URL with a host and no credentials.
pub(super) fn http_url(var: &'static str, value: &str) -> Result<Url, ConfigError> {
    let url = Url::parse(value.trim()).map_err(|e| invalid(var, format!("not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(invalid(
            var,
            "must be an http:// or https:// URL with a host",
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(var, "must not carry credentials"));
    }
    Ok(url)
}

/// Reads one group's flat envy struct. Every field is an `Option<String>` (or
/// a secret), so envy cannot fail on a value; the group's parser validates.
pub(super) fn read<T, I>(prefix: Option<&str>, vars: I) -> Result<T, ConfigError>
where
    T: serde::de::DeserializeOwned,
    I: IntoIterator<Item = (String, String)>,
{
    match prefix {
        Some(prefix) => envy::prefixed(prefix).from_iter(vars),
        None => envy::from_iter(vars),
    }
    .map_err(ConfigError::Environment)
}
