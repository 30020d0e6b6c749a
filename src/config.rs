//! Settings from the environment (DESIGN.md, Interface): two flat envy structs,
//! one for the un-prefixed connection variables and one for `RECONCILER_*`,
//! validated into [`Settings`]. Secrets are [`SecretString`]s: their `Debug`
//! prints `[REDACTED]`.

use std::str::FromStr;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use sqlx::postgres::PgConnectOptions;
use url::Url;

use crate::reconcile::Rules;

/// A missing or malformed setting. Every variant names the variable; none
/// carries a secret's value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is not set.
    #[error("{0} is required but not set")]
    Missing(String),
    /// A variable is set but its value is not acceptable.
    #[error("{var} is invalid: {reason}")]
    Invalid {
        /// The environment variable's name.
        var: String,
        /// What is wrong, without the value when the variable is secret.
        reason: String,
    },
}

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
struct ConnectionVars {
    database_url: Option<SecretString>,
    stripe_api_key: Option<SecretString>,
    stripe_api_base: Option<String>,
    pushgateway_url: Option<String>,
}

#[derive(Deserialize)]
struct JobVars {
    job: Option<String>,
    batch_size: Option<String>,
    batches_per_run: Option<String>,
    grace_seconds: Option<String>,
    rate_limit_rps: Option<String>,
    max_in_flight: Option<String>,
    http_timeout_seconds: Option<String>,
    run_deadline_seconds: Option<String>,
    log_format: Option<String>,
    amount_column: Option<String>,
    currency_column: Option<String>,
    auth_expiry_warn_seconds: Option<String>,
    processing_max_seconds: Option<String>,
    abandoned_after_seconds: Option<String>,
    unverifiable_cycles: Option<String>,
    events_lookback_seconds: Option<String>,
    events_max_pages: Option<String>,
    orphan_metadata_key: Option<String>,
    read_mode: Option<String>,
    list_window_slack_seconds: Option<String>,
    list_max_pages: Option<String>,
}

/// Everything the binary reads from its environment, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `DATABASE_URL` (secret: it may hold the password).
    pub database_url: SecretString,
    /// `STRIPE_API_KEY`; required by `run`, `None` for commands that do not call Stripe.
    pub stripe_api_key: Option<SecretString>,
    /// `STRIPE_API_BASE`, default `https://api.stripe.com`.
    pub stripe_api_base: Url,
    /// `PUSHGATEWAY_URL`; `None` disables the push.
    pub pushgateway_url: Option<Url>,
    /// The job's tuning (`RECONCILER_*`).
    pub job: JobSettings,
    /// `RECONCILER_LOG_FORMAT`, default json.
    pub log_format: LogFormat,
}

/// The `RECONCILER_*` variables that shape a run.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSettings {
    /// `RECONCILER_JOB`: cursor name and Pushgateway `job` label.
    pub job: String,
    /// `RECONCILER_BATCH_SIZE`: B, rows per batch (1..=10000, default 200).
    pub batch_size: u32,
    /// `RECONCILER_BATCHES_PER_RUN`: batches per invocation (>= 1, default 10).
    pub batches_per_run: u32,
    /// `RECONCILER_GRACE_SECONDS`: rows updated more recently are IN_FLIGHT (default 600 s).
    pub grace: Duration,
    /// `RECONCILER_RATE_LIMIT_RPS`: Stripe reads per second (>= 1, default 10).
    pub rate_limit_rps: u32,
    /// `RECONCILER_MAX_IN_FLIGHT`: concurrent Stripe reads (1..=100, default 8).
    pub max_in_flight: u32,
    /// `RECONCILER_HTTP_TIMEOUT_SECONDS`: per Stripe request (>= 1, default 10 s).
    pub http_timeout: Duration,
    /// `RECONCILER_RUN_DEADLINE_SECONDS`: after this long (seconds from the
    /// start) a run starts no new batch and no Stripe retry waits past it.
    /// Set it below the CronJob's `activeDeadlineSeconds`. Default 0: none.
    pub run_deadline: Option<Duration>,
    /// `RECONCILER_AMOUNT_COLUMN`: a `payments` column holding the amount in
    /// minor units, compared with the PaymentIntent's `amount`. Default unset.
    pub amount_column: Option<ColumnName>,
    /// `RECONCILER_CURRENCY_COLUMN`: a `payments` column holding the ISO
    /// currency code, compared case-insensitively. Default unset.
    pub currency_column: Option<ColumnName>,
    /// The aging thresholds: `RECONCILER_AUTH_EXPIRY_WARN_SECONDS` (default
    /// 432,000), `RECONCILER_PROCESSING_MAX_SECONDS` (default 1,209,600) and
    /// `RECONCILER_ABANDONED_AFTER_SECONDS` (default 0 = off).
    pub rules: Rules,
    /// `RECONCILER_UNVERIFIABLE_CYCLES`: consecutive cycles a row may stay
    /// UNVERIFIABLE before it gets a `persistently_unverifiable` finding
    /// (1..=100, default 3).
    pub unverifiable_cycles: u32,
    /// The events job's settings (`RECONCILER_EVENTS_*`,
    /// `RECONCILER_ORPHAN_METADATA_KEY`).
    pub events: EventsSettings,
    /// `RECONCILER_READ_MODE`: how phase 2 reads Stripe (default `list`).
    pub read_mode: ReadMode,
    /// `RECONCILER_LIST_WINDOW_SLACK_SECONDS`: seconds the batch's
    /// `created_at` window is widened by on each side in list mode
    /// (0..=2,592,000, default 3600).
    pub list_window_slack: Duration,
    /// `RECONCILER_LIST_MAX_PAGES`: list requests per batch before the rows
    /// not yet seen fall back to one retrieve each (1..=1000, default 10).
    pub list_max_pages: u32,
}

/// How phase 2 reads PaymentIntents (`RECONCILER_READ_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadMode {
    /// `GET /v1/payment_intents?created[gte]..&created[lte]..&limit=100`
    /// over the batch's `created_at` window, up to 100 PaymentIntents per
    /// request; rows the window did not contain fall back to [`ReadMode::Retrieve`].
    #[default]
    List,
    /// `GET /v1/payment_intents/{id}`, one request per row.
    Retrieve,
}

impl ReadMode {
    /// `list` or `retrieve`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadMode::List => "list",
            ReadMode::Retrieve => "retrieve",
        }
    }
}

/// How far Stripe keeps events: 30 days.
pub const STRIPE_EVENTS_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// The settings of `stripe-reconciler events`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsSettings {
    /// `RECONCILER_EVENTS_LOOKBACK_SECONDS`: how far back the first run reads
    /// (default 86,400 s; at most 30 days, Stripe's retention).
    pub lookback: Duration,
    /// `RECONCILER_EVENTS_MAX_PAGES`: list pages of 100 events read per run,
    /// newest first (1..=10,000, default 100). Older events of a longer
    /// window are logged as a gap and left to the scan.
    pub max_pages: u32,
    /// `RECONCILER_ORPHAN_METADATA_KEY`: only PaymentIntents whose metadata
    /// has this key can become `missing_locally` (an account shared with
    /// other applications). Default unset: every succeeded PaymentIntent.
    pub orphan_metadata_key: Option<String>,
}

impl Default for EventsSettings {
    fn default() -> Self {
        EventsSettings {
            lookback: Duration::from_secs(86_400),
            max_pages: 100,
            orphan_metadata_key: None,
        }
    }
}

/// A validated column name of `payments` (`RECONCILER_AMOUNT_COLUMN`,
/// `RECONCILER_CURRENCY_COLUMN`): 1 to 63 ASCII letters, digits and `_`, not
/// starting with a digit. Only such a name is ever put into SQL, and always
/// double-quoted (so it is matched exactly, case included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnName(String);

impl ColumnName {
    /// Validates `name` for the variable `var`.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `var`.
    pub fn parse(var: &str, name: &str) -> Result<Self, ConfigError> {
        let name = name.trim();
        let ok = !name.is_empty()
            && name.len() <= 63
            && !name.as_bytes()[0].is_ascii_digit()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if ok {
            Ok(ColumnName(name.to_owned()))
        } else {
            Err(invalid(
                var,
                &format!("{name:?} is not a column name (1-63 letters, digits or _, not starting with a digit)"),
            ))
        }
    }

    /// The name as given (as `information_schema.columns` spells it).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name double-quoted for SQL (safe: it holds no quote).
    pub fn quoted(&self) -> String {
        format!("\"{}\"", self.0)
    }
}

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            job: "payments-vs-stripe".to_owned(),
            batch_size: 200,
            batches_per_run: 10,
            grace: Duration::from_secs(600),
            rate_limit_rps: 10,
            max_in_flight: 8,
            http_timeout: Duration::from_secs(10),
            run_deadline: None,
            amount_column: None,
            currency_column: None,
            rules: Rules::default(),
            unverifiable_cycles: 3,
            events: EventsSettings::default(),
            read_mode: ReadMode::List,
            list_window_slack: Duration::from_secs(3600),
            list_max_pages: 10,
        }
    }
}

/// Stripe's production API.
pub const DEFAULT_STRIPE_API_BASE: &str = "https://api.stripe.com";

impl Settings {
    /// Reads the process environment.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first missing or malformed variable.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(std::env::vars())
    }

    /// Reads settings from `(name, value)` pairs (tests use this instead of
    /// mutating the process environment).
    ///
    /// # Errors
    /// [`ConfigError`] naming the first missing or malformed variable.
    pub fn from_vars<I>(vars: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let vars: Vec<(String, String)> = vars.into_iter().collect();
        // Every field is an Option<String>, so envy cannot fail on a value.
        let conn: ConnectionVars = envy::from_iter(vars.clone()).map_err(envy_error)?;
        let vars_job: JobVars = envy::prefixed("RECONCILER_")
            .from_iter(vars)
            .map_err(envy_error)?;

        let database_url = conn
            .database_url
            .filter(|u| !u.expose_secret().trim().is_empty())
            .ok_or_else(|| ConfigError::Missing("DATABASE_URL".into()))?;
        check_database_url(&database_url)?;
        let stripe_api_key = conn
            .stripe_api_key
            .filter(|k| !k.expose_secret().is_empty());
        if let Some(key) = &stripe_api_key {
            if key.expose_secret().trim() != key.expose_secret() {
                return Err(invalid(
                    "STRIPE_API_KEY",
                    "has leading or trailing whitespace",
                ));
            }
        }
        let stripe_api_base = parse_stripe_base(
            conn.stripe_api_base
                .as_deref()
                .unwrap_or(DEFAULT_STRIPE_API_BASE),
        )?;
        let pushgateway_url = conn
            .pushgateway_url
            .filter(|s| !s.trim().is_empty())
            .map(|s| parse_http_url("PUSHGATEWAY_URL", &s))
            .transpose()?;

        let d = JobSettings::default();
        let job = vars_job;
        let job_name = job.job.unwrap_or(d.job);
        if job_name.is_empty() || job_name.len() > 100 || job_name.contains('/') {
            return Err(invalid(
                "RECONCILER_JOB",
                "must be 1 to 100 characters without '/'",
            ));
        }
        let log_format_raw = job.log_format.clone();
        let job = JobSettings {
            job: job_name,
            batch_size: number(
                "RECONCILER_BATCH_SIZE",
                job.batch_size,
                d.batch_size,
                1,
                10_000,
            )?,
            batches_per_run: number(
                "RECONCILER_BATCHES_PER_RUN",
                job.batches_per_run,
                d.batches_per_run,
                1,
                100_000,
            )?,
            grace: Duration::from_secs(number(
                "RECONCILER_GRACE_SECONDS",
                job.grace_seconds,
                d.grace.as_secs(),
                0,
                7 * 24 * 3600,
            )?),
            rate_limit_rps: number(
                "RECONCILER_RATE_LIMIT_RPS",
                job.rate_limit_rps,
                d.rate_limit_rps,
                1,
                10_000,
            )?,
            max_in_flight: number(
                "RECONCILER_MAX_IN_FLIGHT",
                job.max_in_flight,
                d.max_in_flight,
                1,
                100,
            )?,
            http_timeout: Duration::from_secs(number(
                "RECONCILER_HTTP_TIMEOUT_SECONDS",
                job.http_timeout_seconds,
                d.http_timeout.as_secs(),
                1,
                300,
            )?),
            run_deadline: match number(
                "RECONCILER_RUN_DEADLINE_SECONDS",
                job.run_deadline_seconds,
                0,
                0,
                7 * 24 * 3600,
            )? {
                0 => None,
                secs => Some(Duration::from_secs(secs)),
            },
            amount_column: column("RECONCILER_AMOUNT_COLUMN", job.amount_column)?,
            currency_column: column("RECONCILER_CURRENCY_COLUMN", job.currency_column)?,
            rules: Rules {
                auth_expiry_warn_seconds: number(
                    "RECONCILER_AUTH_EXPIRY_WARN_SECONDS",
                    job.auth_expiry_warn_seconds,
                    d.rules.auth_expiry_warn_seconds,
                    0,
                    // Below the ~7 days after which Stripe cancels an
                    // uncaptured authorisation: a later warning comes too late.
                    7 * 24 * 3600 - 1,
                )?,
                processing_max_seconds: number(
                    "RECONCILER_PROCESSING_MAX_SECONDS",
                    job.processing_max_seconds,
                    d.rules.processing_max_seconds,
                    1,
                    365 * 24 * 3600,
                )?,
                abandoned_after_seconds: match number(
                    "RECONCILER_ABANDONED_AFTER_SECONDS",
                    job.abandoned_after_seconds,
                    0,
                    0,
                    365 * 24 * 3600,
                )? {
                    0 => None,
                    secs => Some(secs),
                },
            },
            unverifiable_cycles: number(
                "RECONCILER_UNVERIFIABLE_CYCLES",
                job.unverifiable_cycles,
                d.unverifiable_cycles,
                1,
                100,
            )?,
            events: EventsSettings {
                lookback: Duration::from_secs(number(
                    "RECONCILER_EVENTS_LOOKBACK_SECONDS",
                    job.events_lookback_seconds,
                    d.events.lookback.as_secs(),
                    1,
                    STRIPE_EVENTS_RETENTION.as_secs(),
                )?),
                max_pages: number(
                    "RECONCILER_EVENTS_MAX_PAGES",
                    job.events_max_pages,
                    d.events.max_pages,
                    1,
                    10_000,
                )?,
                orphan_metadata_key: metadata_key(job.orphan_metadata_key)?,
            },
            read_mode: match job.read_mode.as_deref().map(str::trim) {
                None | Some("list") => ReadMode::List,
                Some("retrieve") => ReadMode::Retrieve,
                Some(_) => return Err(invalid("RECONCILER_READ_MODE", "must be list or retrieve")),
            },
            list_window_slack: Duration::from_secs(number(
                "RECONCILER_LIST_WINDOW_SLACK_SECONDS",
                job.list_window_slack_seconds,
                d.list_window_slack.as_secs(),
                0,
                30 * 24 * 3600,
            )?),
            list_max_pages: number(
                "RECONCILER_LIST_MAX_PAGES",
                job.list_max_pages,
                d.list_max_pages,
                1,
                1000,
            )?,
        };
        let log_format = match log_format_raw.as_deref().map(str::trim) {
            None | Some("json") => LogFormat::Json,
            Some("pretty") => LogFormat::Pretty,
            Some(_) => return Err(invalid("RECONCILER_LOG_FORMAT", "must be json or pretty")),
        };
        Ok(Settings {
            database_url,
            stripe_api_key,
            stripe_api_base,
            pushgateway_url,
            job,
            log_format,
        })
    }

    /// The Stripe key, or the error `run` reports when it is missing.
    ///
    /// # Errors
    /// [`ConfigError::Missing`] for `STRIPE_API_KEY`.
    pub fn require_stripe_key(&self) -> Result<&SecretString, ConfigError> {
        self.stripe_api_key
            .as_ref()
            .ok_or_else(|| ConfigError::Missing("STRIPE_API_KEY".into()))
    }

    /// PostgreSQL connect options from `DATABASE_URL`.
    ///
    /// Never `Debug`-print the result: sqlx's `Debug` shows the password.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for `DATABASE_URL`.
    pub fn connect_options(&self) -> Result<PgConnectOptions, ConfigError> {
        PgConnectOptions::from_str(self.database_url.expose_secret())
            .map(|o| o.application_name("stripe-reconciler"))
            .map_err(|_| {
                invalid(
                    "DATABASE_URL",
                    "is not a valid postgres:// connection string",
                )
            })
    }
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

fn check_database_url(url: &SecretString) -> Result<(), ConfigError> {
    // The value is secret: the error says what is wrong, never what it was.
    let value = url.expose_secret();
    if !(value.starts_with("postgres://") || value.starts_with("postgresql://")) {
        return Err(invalid(
            "DATABASE_URL",
            "must start with postgres:// or postgresql://",
        ));
    }
    PgConnectOptions::from_str(value).map(|_| ()).map_err(|_| {
        invalid(
            "DATABASE_URL",
            "is not a valid postgres:// connection string",
        )
    })
}

/// STRIPE_API_BASE carries the Bearer key: plain http only to this machine
/// (a local stand-in or a sidecar proxy), and no `/v1` (the client adds it).
fn parse_stripe_base(value: &str) -> Result<Url, ConfigError> {
    let var = "STRIPE_API_BASE";
    let url = parse_http_url(var, value)?;
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

fn parse_http_url(var: &str, value: &str) -> Result<Url, ConfigError> {
    let url = Url::parse(value.trim()).map_err(|e| invalid(var, &format!("not a URL ({e})")))?;
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

fn number<T>(var: &str, raw: Option<String>, default: T, min: T, max: T) -> Result<T, ConfigError>
where
    T: FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let Some(raw) = raw else { return Ok(default) };
    let value: T = raw
        .trim()
        .parse()
        .map_err(|_| invalid(var, &format!("{raw:?} is not a whole number")))?;
    if value < min || value > max {
        return Err(invalid(var, &format!("{value} is outside {min}..={max}")));
    }
    Ok(value)
}

fn column(var: &str, raw: Option<String>) -> Result<Option<ColumnName>, ConfigError> {
    raw.filter(|s| !s.trim().is_empty())
        .map(|s| ColumnName::parse(var, &s))
        .transpose()
}

fn invalid(var: &str, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        var: var.to_owned(),
        reason: reason.to_owned(),
    }
}

fn envy_error(e: envy::Error) -> ConfigError {
    // Only reachable for malformed input envy itself rejects; its message
    // names the field, not the value.
    match e {
        envy::Error::MissingValue(field) => ConfigError::Missing(field.to_uppercase()),
        envy::Error::Custom(msg) => ConfigError::Invalid {
            var: "environment".into(),
            reason: msg,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const DB: (&str, &str) = (
        "DATABASE_URL",
        "postgres://app:hunter2-db-secret@db:5432/payments",
    );

    #[test]
    fn defaults_match_the_interface_table() {
        let s = Settings::from_vars(vars(&[DB])).unwrap();
        assert_eq!(s.job, JobSettings::default());
        assert_eq!(s.stripe_api_base.as_str(), "https://api.stripe.com/");
        assert!(s.pushgateway_url.is_none());
        assert!(s.stripe_api_key.is_none());
        assert_eq!(s.log_format, LogFormat::Json);
    }

    #[test]
    fn missing_database_url_names_the_variable() {
        let e = Settings::from_vars(vars(&[])).unwrap_err();
        assert_eq!(e.to_string(), "DATABASE_URL is required but not set");
    }

    #[test]
    fn malformed_values_name_the_variable() {
        for (var, value) in [
            ("RECONCILER_BATCH_SIZE", "0"),
            ("RECONCILER_BATCH_SIZE", "-5"),
            ("RECONCILER_BATCH_SIZE", "lots"),
            ("RECONCILER_BATCHES_PER_RUN", "0"),
            ("RECONCILER_RATE_LIMIT_RPS", "0"),
            ("RECONCILER_MAX_IN_FLIGHT", "0"),
            ("RECONCILER_HTTP_TIMEOUT_SECONDS", "0"),
            ("RECONCILER_GRACE_SECONDS", "1.5"),
            ("RECONCILER_RUN_DEADLINE_SECONDS", "-1"),
            ("RECONCILER_AMOUNT_COLUMN", "amount; DROP TABLE payments"),
            ("RECONCILER_AMOUNT_COLUMN", "9lives"),
            ("RECONCILER_CURRENCY_COLUMN", "cur\"rency"),
            ("RECONCILER_AUTH_EXPIRY_WARN_SECONDS", "-1"),
            ("RECONCILER_AUTH_EXPIRY_WARN_SECONDS", "five days"),
            ("RECONCILER_PROCESSING_MAX_SECONDS", "-3600"),
            ("RECONCILER_PROCESSING_MAX_SECONDS", "0"),
            ("RECONCILER_ABANDONED_AFTER_SECONDS", "-1"),
            ("RECONCILER_ABANDONED_AFTER_SECONDS", "1e6"),
            ("RECONCILER_UNVERIFIABLE_CYCLES", "0"),
            ("RECONCILER_UNVERIFIABLE_CYCLES", "x"),
            ("RECONCILER_LOG_FORMAT", "xml"),
            ("RECONCILER_READ_MODE", "events"),
            ("RECONCILER_LIST_WINDOW_SLACK_SECONDS", "-1"),
            ("RECONCILER_LIST_MAX_PAGES", "0"),
            ("STRIPE_API_BASE", "not a url"),
            ("STRIPE_API_BASE", "ftp://example.com"),
            ("STRIPE_API_BASE", "http://stripe-proxy.internal:8080"),
            ("STRIPE_API_BASE", "https://api.stripe.com/v1"),
            ("PUSHGATEWAY_URL", "pushgateway:9091"),
            ("DATABASE_URL", "mysql://nope"),
        ] {
            let mut v: Vec<_> = vars(&[DB]).into_iter().filter(|(k, _)| k != var).collect();
            v.push((var.into(), value.into()));
            let e = Settings::from_vars(v).unwrap_err();
            assert!(e.to_string().starts_with(var), "{var}={value}: {e}");
        }
    }

    #[test]
    fn a_local_stand_in_or_a_prefixed_https_proxy_is_accepted() {
        for base in [
            "http://127.0.0.1:12111",
            "http://localhost:8080",
            "https://proxy.example.com/stripe",
        ] {
            let s = Settings::from_vars(vars(&[DB, ("STRIPE_API_BASE", base)])).unwrap();
            assert_eq!(s.stripe_api_base.as_str().trim_end_matches('/'), base);
        }
    }

    #[test]
    fn debug_output_redacts_secrets() {
        let s =
            Settings::from_vars(vars(&[DB, ("STRIPE_API_KEY", "sk_test_SECRETKEY123")])).unwrap();
        let debug = format!("{s:?}");
        assert!(!debug.contains("hunter2-db-secret"), "{debug}");
        assert!(!debug.contains("sk_test_SECRETKEY123"), "{debug}");
    }

    #[test]
    fn an_invalid_database_url_error_does_not_echo_it() {
        let e = Settings::from_vars(vars(&[(
            "DATABASE_URL",
            "postgres://u:hunter2@host:notaport/db",
        )]))
        .unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(e.to_string().starts_with("DATABASE_URL"));
    }
}
