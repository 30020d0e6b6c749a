//! Where the run's logs and figures go: `RECONCILER_LOG_FORMAT` and
//! `PUSHGATEWAY_URL` (docs/configuration.md; docs/operations.md, "Pushing the metrics").

use serde::Deserialize;
use url::Url;

use super::error::{invalid, ConfigError};
use super::value;

/// Log output format (`RECONCILER_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One JSON object per line (for the cluster's log pipeline).
    Json,
    /// Human-readable lines (for a terminal).
    Pretty,
}

#[derive(Deserialize)]
struct OutputVars {
    pushgateway_url: Option<String>,
    reconciler_log_format: Option<String>,
}

/// The output group, validated.
pub(super) struct Output {
    pub(super) pushgateway_url: Option<Url>,
    pub(super) log_format: LogFormat,
}

/// Parses the output group: no push when `PUSHGATEWAY_URL` is unset or
/// blank; json logs by default.
///
/// # Errors
/// [`ConfigError`] naming the first malformed variable.
pub(super) fn parse<I>(vars: I) -> Result<Output, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: OutputVars = value::read(None, vars)?;
    let pushgateway_url = raw
        .pushgateway_url
        .filter(|s| !s.trim().is_empty())
        .map(|s| value::http_url("PUSHGATEWAY_URL", &s))
        .transpose()?;
    let log_format = match raw.reconciler_log_format.as_deref().map(str::trim) {
        None | Some("json") => LogFormat::Json,
        Some("pretty") => LogFormat::Pretty,
        Some(_) => return Err(invalid("RECONCILER_LOG_FORMAT", "must be json or pretty")),
    };
    Ok(Output {
        pushgateway_url,
        log_format,
    })
}
