//! Settings from the environment (every variable: docs/configuration.md),
//! validated into [`Settings`]. Each group of variables has its own
//! flat envy struct and one parser; every error names its variable
//! ([`ConfigError::var`]). Secrets are [`SecretString`](secrecy::SecretString)s: their `Debug`
//! prints `[REDACTED]`.
//!
//! - `error`: [`ConfigError`].
//! - `database`: [`DatabaseSettings`]: `DATABASE_URL`, the connect options and the pools.
//! - `stripe`: `STRIPE_API_KEY`, and [`StripeSettings`]: `STRIPE_API_BASE` and the
//!   read budget (rate, in flight, timeout); it builds the gateway.
//! - `run`: [`RunSettings`]: the job's name, grace, deadline and unverifiable cycles.
//! - `scan`: [`ScanSettings`] (batch and run sizes, the cycle target, [`ReadMode`],
//!   list reads).
//! - `rules`: the money columns ([`ColumnName`]) and the aging thresholds.
//! - `schema`: [`SchemaSettings`]: how `payments` is read (columns, unit,
//!   status words, partition), the group `store::payments` takes.
//! - `statuses`: the application's status words ([`StatusMap`]) and amount unit ([`AmountUnit`]).
//! - `events`: [`EventsSettings`] of `stripe-reconciler events`.
//! - `outbox`: [`OutboxSettings`]: `RECONCILER_OUTBOX_TABLE` and `RECONCILER_OUTBOX_SHAPE`.
//! - `partition`: [`Partition`]: `RECONCILER_PARTITION_COLUMN` and `RECONCILER_PARTITION_VALUE`.
//! - `output`: [`LogFormat`] and `PUSHGATEWAY_URL`.
//! - `timestamps`: [`PaymentTimes`]: `RECONCILER_TIMESTAMP_ZONE` and the detected
//!   types of `payments.created_at` / `updated_at`.
//! - `subscriptions`: [`SubscriptionSettings`]: `RECONCILER_SUBSCRIPTIONS_TABLE`, the
//!   `RECONCILER_SUBSCRIPTION_*` columns and words, `RECONCILER_PAST_DUE_ACCESS`
//!   (docs/subscriptions.md).
//! - `value`: the number and URL parsers the groups share.
//! - `word_map`: the `key=word,word;…` form the status maps share.

mod database;
mod error;
mod events;
mod notify;
mod outbox;
mod output;
mod partition;
mod rules;
mod run;
mod scan;
mod schema;
mod statuses;
mod stripe;
mod subscriptions;
mod timestamps;
mod value;
pub mod variables;
mod word_map;

use url::Url;

pub use database::{ConnectError, DatabaseSettings};
pub use error::ConfigError;
pub use events::{EventsSettings, STRIPE_EVENTS_RETENTION};
pub use notify::{NotifyFormat, NotifyKinds, NotifySettings};
pub use outbox::{OutboxSettings, OutboxShape, OutboxTable};
pub use output::LogFormat;
pub use partition::{Partition, PartitionKind, PartitionSetting};
pub use rules::ColumnName;
pub use run::RunSettings;
pub use scan::{ReadMode, ScanSettings, Sizing, LIST_BATCH_SIZE, RETRIEVE_BATCH_SIZE};
pub use schema::SchemaSettings;
pub use statuses::{AmountUnit, StatusMap, DEFAULT_LOCAL_STATUSES};
pub use stripe::{GatewaySetupError, StripeSettings, DEFAULT_STRIPE_API_BASE};
pub use subscriptions::{
    parse_statuses as parse_subscription_statuses, SubscriptionSettings, SubscriptionsTable,
    NO_STATUS_COLUMN,
};
pub use timestamps::{PaymentTimes, TimeColumn, TimestampZone};

use crate::reconcile::Rules;

/// Everything the binary reads from its environment, validated: one public
/// field per group. A job takes the groups it uses (e.g.
/// [`crate::scan::ScanGroups`]), never the whole.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `DATABASE_URL` and the pools it opens.
    pub database: DatabaseSettings,
    /// `PUSHGATEWAY_URL`; `None` disables the push.
    pub pushgateway_url: Option<Url>,
    /// The run-wide variables: `RECONCILER_JOB`, `RECONCILER_GRACE_SECONDS`,
    /// `RECONCILER_RUN_DEADLINE_SECONDS`, `RECONCILER_UNVERIFIABLE_CYCLES`.
    pub run: RunSettings,
    /// The scan's shape: batch and run sizes, the cycle `auto` plans for,
    /// the read mode and list reads (`RECONCILER_BATCH_SIZE`, …).
    pub scan: ScanSettings,
    /// The Stripe group: `STRIPE_API_KEY`, `STRIPE_API_BASE` and the read
    /// budget (`RECONCILER_RATE_LIMIT_RPS`, `RECONCILER_MAX_IN_FLIGHT`,
    /// `RECONCILER_HTTP_TIMEOUT_SECONDS`); it builds the gateway.
    pub stripe: StripeSettings,
    /// How the application's `payments` table is read: the money and
    /// account columns, the amount's unit, the status words, the partition.
    pub schema: SchemaSettings,
    /// The aging thresholds: `RECONCILER_AUTH_EXPIRY_WARN_SECONDS` (default
    /// 432,000), `RECONCILER_PROCESSING_MAX_SECONDS` (default 1,209,600) and
    /// `RECONCILER_ABANDONED_AFTER_SECONDS` (default 0 = off).
    pub rules: Rules,
    /// The events job's settings (`RECONCILER_EVENTS_*`,
    /// `RECONCILER_ORPHAN_METADATA_KEY`).
    pub events: EventsSettings,
    /// `RECONCILER_OUTBOX_TABLE` and `RECONCILER_OUTBOX_SHAPE`: where repair
    /// commands go and who delivers them (default `outbox`, `reconciler`).
    pub outbox: OutboxSettings,
    /// `RECONCILER_LOG_FORMAT`, default json.
    pub log_format: LogFormat,
    /// `RECONCILER_NOTIFY_*`; `None` when `RECONCILER_NOTIFY_URL` is unset.
    pub notify: Option<NotifySettings>,
    /// The subscriptions table and its columns (`RECONCILER_SUBSCRIPTIONS_TABLE`,
    /// `RECONCILER_SUBSCRIPTION_*`, `RECONCILER_PAST_DUE_ACCESS`); `None` when
    /// the table is unset (docs/subscriptions.md).
    pub subscriptions: Option<SubscriptionSettings>,
}

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
        let database = database::parse(vars.clone())?;
        let stripe = stripe::parse(vars.clone())?;
        let output = output::parse(vars.clone())?;
        let run = run::parse(vars.clone())?;
        let scan = scan::parse(vars.clone())?;
        let checks = rules::parse(vars.clone())?;
        let vocabulary = statuses::parse(vars.clone(), checks.currency_column.is_some())?;
        let outbox = outbox::parse(vars.clone())?;
        let partition = partition::parse(vars.clone())?;
        let zone = timestamps::parse(vars.clone())?;
        if partition.is_some() && run.job == RunSettings::default().job {
            // Two partitions under one job name would share one cursor and
            // one lease: each run would walk the other's cursor, or lose it.
            return Err(error::invalid(
                "RECONCILER_JOB",
                "must be set to a name of its own when RECONCILER_PARTITION_COLUMN is set (one job, cursor and lease per partition)",
            ));
        }
        let notify = notify::parse(vars.clone())?;
        let subscriptions = subscriptions::parse(vars.clone())?;
        let events = events::parse(vars)?;
        Ok(Settings {
            database,
            pushgateway_url: output.pushgateway_url,
            run,
            scan,
            stripe,
            schema: SchemaSettings {
                amount_column: checks.amount_column,
                currency_column: checks.currency_column,
                account_column: checks.account_column,
                checkout_session_column: checks.checkout_session_column,
                amount_unit: vocabulary.amount_unit,
                statuses: vocabulary.statuses,
                partition,
                timestamp_zone: zone,
            },
            rules: checks.rules,
            events,
            outbox,
            log_format: output.log_format,
            notify,
            subscriptions,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use secrecy::ExposeSecret;

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
        assert_eq!(s.run, RunSettings::default());
        assert_eq!(s.scan, ScanSettings::default());
        assert_eq!(s.stripe, StripeSettings::default());
        assert_eq!(s.schema, SchemaSettings::default());
        assert_eq!(s.rules, Rules::default());
        assert_eq!(s.events, EventsSettings::default());
        assert_eq!(s.outbox, OutboxSettings::default());
        let base = s.stripe.base().unwrap();
        assert_eq!(base.as_str(), "https://api.stripe.com/");
        assert_eq!(base.as_str().trim_end_matches('/'), DEFAULT_STRIPE_API_BASE);
        assert!(s.pushgateway_url.is_none());
        assert!(s.stripe.api_key.is_none());
        assert_eq!(
            s.stripe.require_key().unwrap_err().var(),
            Some("STRIPE_API_KEY")
        );
        assert_eq!(s.log_format, LogFormat::Json);
    }

    #[test]
    fn every_variable_reaches_its_own_setting() {
        let s = Settings::from_vars(vars(&[
            DB,
            ("STRIPE_API_KEY", "sk_test_k"),
            ("STRIPE_API_BASE", "http://127.0.0.1:12111"),
            ("PUSHGATEWAY_URL", "http://pushgateway:9091"),
            ("RECONCILER_JOB", "shard-a"),
            ("RECONCILER_BATCH_SIZE", "11"),
            ("RECONCILER_BATCHES_PER_RUN", "12"),
            ("RECONCILER_GRACE_SECONDS", "13"),
            ("RECONCILER_RATE_LIMIT_RPS", "14"),
            ("RECONCILER_MAX_IN_FLIGHT", "15"),
            ("RECONCILER_HTTP_TIMEOUT_SECONDS", "16"),
            ("RECONCILER_RUN_DEADLINE_SECONDS", "17"),
            ("RECONCILER_LOG_FORMAT", "pretty"),
            ("RECONCILER_AMOUNT_COLUMN", "amount_cents"),
            ("RECONCILER_CURRENCY_COLUMN", "currency"),
            ("RECONCILER_AUTH_EXPIRY_WARN_SECONDS", "18"),
            ("RECONCILER_PROCESSING_MAX_SECONDS", "19"),
            ("RECONCILER_ABANDONED_AFTER_SECONDS", "20"),
            ("RECONCILER_UNVERIFIABLE_CYCLES", "21"),
            ("RECONCILER_EVENTS_LOOKBACK_SECONDS", "22"),
            ("RECONCILER_EVENTS_MAX_PAGES", "23"),
            ("RECONCILER_EVENTS_ACCOUNT_ACTIVE_SECONDS", "86400"),
            ("RECONCILER_ORPHAN_METADATA_KEY", "app"),
            ("RECONCILER_READ_MODE", "retrieve"),
            ("RECONCILER_LIST_WINDOW_SLACK_SECONDS", "24"),
            ("RECONCILER_LIST_MAX_PAGES", "25"),
            ("RECONCILER_AMOUNT_UNIT", "major"),
            (
                "RECONCILER_LOCAL_STATUSES",
                "pending=open;paid=complete;failed=canceled;refunded=refunded",
            ),
            ("RECONCILER_OUTBOX_TABLE", "app.commands"),
            ("RECONCILER_OUTBOX_SHAPE", "debezium"),
            ("RECONCILER_ACCOUNT_COLUMN", "stripe_account"),
            ("RECONCILER_CHECKOUT_SESSION_COLUMN", "checkout_session"),
            ("RECONCILER_TARGET_CYCLE_SECONDS", "3600"),
            ("RECONCILER_SCHEDULE_INTERVAL_SECONDS", "300"),
            ("RECONCILER_PARTITION_COLUMN", "legal_entity"),
            ("RECONCILER_PARTITION_VALUE", "eu'; --"),
            ("RECONCILER_TIMESTAMP_ZONE", "Europe/Paris"),
        ]))
        .unwrap();
        let column = |var, name| Some(ColumnName::parse(var, name).unwrap());
        let secs = Duration::from_secs;
        assert_eq!(
            s.run,
            RunSettings {
                job: "shard-a".into(),
                grace: secs(13),
                run_deadline: Some(secs(17)),
                unverifiable_cycles: 21,
            }
        );
        assert_eq!(
            s.scan,
            ScanSettings {
                batch_size: 11,
                batches_per_run: Sizing::Fixed(12),
                target_cycle: secs(3600),
                schedule_interval: secs(300),
                read_mode: ReadMode::Retrieve,
                list_window_slack: secs(24),
                list_max_pages: Sizing::Fixed(25),
            }
        );
        assert_eq!(
            s.stripe,
            StripeSettings {
                api_key: Some("sk_test_k".to_owned().into()),
                api_base: Some(Url::parse("http://127.0.0.1:12111").unwrap()),
                rate_limit_rps: 14,
                max_in_flight: 15,
                http_timeout: secs(16),
            }
        );
        assert_eq!(
            s.schema,
            SchemaSettings {
                amount_column: column("RECONCILER_AMOUNT_COLUMN", "amount_cents"),
                currency_column: column("RECONCILER_CURRENCY_COLUMN", "currency"),
                account_column: column("RECONCILER_ACCOUNT_COLUMN", "stripe_account"),
                checkout_session_column: column(
                    "RECONCILER_CHECKOUT_SESSION_COLUMN",
                    "checkout_session"
                ),
                amount_unit: AmountUnit::Major,
                statuses: StatusMap::parse(
                    "pending=open;paid=complete;failed=canceled;refunded=refunded"
                )
                .unwrap(),
                partition: Some(PartitionSetting {
                    column: ColumnName::parse("RECONCILER_PARTITION_COLUMN", "legal_entity")
                        .unwrap(),
                    value: "eu'; --".into(),
                }),
                timestamp_zone: TimestampZone::parse("Europe/Paris").unwrap(),
            }
        );
        assert_eq!(
            s.rules,
            Rules {
                auth_expiry_warn_seconds: 18,
                processing_max_seconds: 19,
                abandoned_after_seconds: Some(20),
            }
        );
        assert_eq!(
            s.events,
            EventsSettings {
                lookback: secs(22),
                max_pages: 23,
                orphan_metadata_key: Some("app".into()),
                account_active: secs(86_400),
            }
        );
        assert_eq!(
            s.outbox,
            OutboxSettings {
                table: OutboxTable::parse("app.commands").unwrap(),
                shape: OutboxShape::Debezium,
            }
        );
        assert_eq!(s.log_format, LogFormat::Pretty);
        assert_eq!(s.stripe.base().unwrap().as_str(), "http://127.0.0.1:12111/");
        assert_eq!(
            s.pushgateway_url.map(String::from).as_deref(),
            Some("http://pushgateway:9091/")
        );
        assert_eq!(
            s.stripe.api_key.as_ref().map(ExposeSecret::expose_secret),
            Some("sk_test_k")
        );
    }

    #[test]
    fn auto_sizes_and_the_batch_size_follow_the_read_mode() {
        let s = Settings::from_vars(vars(&[
            DB,
            ("RECONCILER_BATCHES_PER_RUN", " Auto "),
            ("RECONCILER_LIST_MAX_PAGES", "auto"),
        ]))
        .unwrap();
        assert_eq!(s.scan.batches_per_run, Sizing::Auto);
        assert_eq!((s.scan.batch_size, s.scan.list_page_cap()), (1_900, 22));
        let retrieve =
            Settings::from_vars(vars(&[DB, ("RECONCILER_READ_MODE", "retrieve")])).unwrap();
        assert_eq!(retrieve.scan.batch_size, 200);
        let explicit = Settings::from_vars(vars(&[
            DB,
            ("RECONCILER_BATCH_SIZE", "500"),
            ("RECONCILER_LIST_MAX_PAGES", "3"),
        ]))
        .unwrap();
        assert_eq!(
            (explicit.scan.batch_size, explicit.scan.list_page_cap()),
            (500, 3)
        );
        let mut small = explicit.scan.clone();
        small.list_max_pages = Sizing::Auto;
        assert_eq!(small.list_page_cap(), 10, "never fewer than 10 pages");
        small.batch_size = 5_000;
        assert_eq!(
            small.list_page_cap(),
            56,
            "50 pages of 100, 10% more, and one"
        );
    }

    #[test]
    fn missing_database_url_names_the_variable() {
        let e = Settings::from_vars(vars(&[])).unwrap_err();
        assert_eq!(e.to_string(), "DATABASE_URL is required but not set");
        assert_eq!(e.var(), Some("DATABASE_URL"));
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
            ("RECONCILER_LIST_MAX_PAGES", "most"),
            ("RECONCILER_BATCHES_PER_RUN", "-1"),
            ("RECONCILER_BATCHES_PER_RUN", "automatic"),
            ("RECONCILER_TARGET_CYCLE_SECONDS", "0"),
            ("RECONCILER_TARGET_CYCLE_SECONDS", "1d"),
            ("RECONCILER_SCHEDULE_INTERVAL_SECONDS", "30"),
            ("RECONCILER_JOB", "a/b"),
            ("RECONCILER_EVENTS_LOOKBACK_SECONDS", "2592001"),
            ("RECONCILER_EVENTS_MAX_PAGES", "0"),
            ("RECONCILER_ORPHAN_METADATA_KEY", "key[0]"),
            ("RECONCILER_LOCAL_STATUSES", "paid=paid;failed=failed"),
            (
                "RECONCILER_LOCAL_STATUSES",
                "pending=pending;paid=paid;failed=failed;x=y",
            ),
            ("RECONCILER_AMOUNT_UNIT", "major"),
            ("RECONCILER_AMOUNT_UNIT", "cents"),
            ("STRIPE_API_KEY", " sk_test_padded"),
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
            assert_eq!(e.var(), Some(var), "{var}={value}: {e}");
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
            let parsed = s.stripe.base().unwrap();
            assert_eq!(parsed.as_str().trim_end_matches('/'), base);
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
