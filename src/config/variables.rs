//! Every environment variable the binary reads, by where it is read. The
//! page `docs/configuration.md` documents them, and `tests/it/docs.rs` fails
//! when the page misses a `RECONCILER_*` variable listed here or names one that
//! is not. The unit tests below keep these lists equal to what the code reads:
//!
//! - [`SETTINGS`] against [`super::Settings::from_vars`] itself: each group's
//!   envy struct rejects a field given twice ("duplicate field"), which no
//!   unknown variable triggers, so every word of `src/` is tried as a variable
//!   name (as is and with the `RECONCILER_` prefix) and the ones that trip a
//!   duplicate error are exactly the ones a group reads;
//! - [`COMMAND_LINE`] against the `env = "..."` of every flag in
//!   [`crate::cli::Cli`] (clap's own command tree);
//! - [`PROCESS`] against the literal names given to `std::env::var` /
//!   `var_os` in `src/` and tracing's `RUST_LOG` filter.

/// Read by [`super::Settings::from_vars`] (the settings groups' envy
/// structs), sorted. A missing or malformed one stops every command with
/// exit 78 naming it.
pub const SETTINGS: &[&str] = &[
    "DATABASE_URL",
    "PUSHGATEWAY_URL",
    "RECONCILER_ABANDONED_AFTER_SECONDS",
    "RECONCILER_ACCOUNT_COLUMN",
    "RECONCILER_AMOUNT_COLUMN",
    "RECONCILER_AMOUNT_UNIT",
    "RECONCILER_AUTH_EXPIRY_WARN_SECONDS",
    "RECONCILER_BATCHES_PER_RUN",
    "RECONCILER_BATCH_SIZE",
    "RECONCILER_CHECKOUT_SESSION_COLUMN",
    "RECONCILER_CURRENCY_COLUMN",
    "RECONCILER_EVENTS_ACCOUNT_ACTIVE_SECONDS",
    "RECONCILER_EVENTS_LOOKBACK_SECONDS",
    "RECONCILER_EVENTS_MAX_PAGES",
    "RECONCILER_GRACE_SECONDS",
    "RECONCILER_HTTP_TIMEOUT_SECONDS",
    "RECONCILER_JOB",
    "RECONCILER_LIST_MAX_PAGES",
    "RECONCILER_LIST_WINDOW_SLACK_SECONDS",
    "RECONCILER_LOCAL_STATUSES",
    "RECONCILER_LOG_FORMAT",
    "RECONCILER_MAX_IN_FLIGHT",
    "RECONCILER_NOTIFY_FORMAT",
    "RECONCILER_NOTIFY_KINDS",
    "RECONCILER_NOTIFY_URL",
    "RECONCILER_ORPHAN_METADATA_KEY",
    "RECONCILER_OUTBOX_SHAPE",
    "RECONCILER_OUTBOX_TABLE",
    "RECONCILER_PARTITION_COLUMN",
    "RECONCILER_PARTITION_VALUE",
    "RECONCILER_PAST_DUE_ACCESS",
    "RECONCILER_PROCESSING_MAX_SECONDS",
    "RECONCILER_RATE_LIMIT_RPS",
    "RECONCILER_READ_MODE",
    "RECONCILER_RUN_DEADLINE_SECONDS",
    "RECONCILER_SCHEDULE_INTERVAL_SECONDS",
    "RECONCILER_SUBSCRIPTIONS_TABLE",
    "RECONCILER_SUBSCRIPTION_ACCOUNT_COLUMN",
    "RECONCILER_SUBSCRIPTION_CREATED_COLUMN",
    "RECONCILER_SUBSCRIPTION_ENDS_AT_COLUMN",
    "RECONCILER_SUBSCRIPTION_ID_COLUMN",
    "RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN",
    "RECONCILER_SUBSCRIPTION_PRICE_COLUMN",
    "RECONCILER_SUBSCRIPTION_QUANTITY_COLUMN",
    "RECONCILER_SUBSCRIPTION_STATUSES",
    "RECONCILER_SUBSCRIPTION_STATUS_COLUMN",
    "RECONCILER_SUBSCRIPTION_UPDATED_COLUMN",
    "RECONCILER_TARGET_CYCLE_SECONDS",
    "RECONCILER_TIMESTAMP_ZONE",
    "RECONCILER_UNVERIFIABLE_CYCLES",
    "STRIPE_API_BASE",
    "STRIPE_API_KEY",
];

/// Read by the command line parser as the default of a flag
/// (`findings list --dashboard`, `findings resolve --by`), sorted.
pub const COMMAND_LINE: &[&str] = &["RECONCILER_DASHBOARD_MODE", "USER"];

/// Read directly from the process environment, sorted: the lease owner's
/// host name, `NO_COLOR` for pretty logs, the log filter.
pub const PROCESS: &[&str] = &["HOSTNAME", "NO_COLOR", "RUST_LOG"];

/// Every variable of [`SETTINGS`], [`COMMAND_LINE`] and [`PROCESS`].
pub fn all() -> impl Iterator<Item = &'static str> {
    SETTINGS.iter().chain(COMMAND_LINE).chain(PROCESS).copied()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use super::super::{ConfigError, Settings};
    use super::*;

    const PREFIX: &str = "RECONCILER_";

    fn sources() -> Vec<(PathBuf, String)> {
        fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
            for entry in std::fs::read_dir(dir).expect("read src/") {
                let path = entry.expect("a directory entry").path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).expect("read a source file");
                    out.push((path, text));
                }
            }
        }
        let mut out = Vec::new();
        walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut out);
        assert!(out.len() > 20, "found only {} files under src/", out.len());
        out
    }

    const BASELINE: (&str, &str) = ("DATABASE_URL", "postgres://u@localhost/db");

    fn env(extra: &[(&str, &str)]) -> Vec<(String, String)> {
        std::iter::once(&BASELINE)
            .chain(extra)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Whether a settings group reads `name`: given twice, only a field of
    /// some group's envy struct makes serde report a duplicate.
    fn read_by_settings(name: &str) -> bool {
        match Settings::from_vars(env(&[(name, "1"), (name, "1")])) {
            Err(ConfigError::Environment(e)) => e.to_string().contains("duplicate field"),
            _ => false,
        }
    }

    fn sorted(list: &[&str]) -> bool {
        list.windows(2).all(|w| w[0] < w[1])
    }

    #[test]
    fn the_probe_tells_a_setting_from_any_other_variable() {
        assert!(Settings::from_vars(env(&[])).is_ok(), "the baseline parses");
        assert!(read_by_settings("RECONCILER_BATCH_SIZE"));
        assert!(read_by_settings("STRIPE_API_KEY"));
        assert!(!read_by_settings("RECONCILER_NO_SUCH_SETTING"));
        assert!(
            !read_by_settings("BATCH_SIZE"),
            "a prefixed group's field needs its prefix"
        );
        assert!(sorted(SETTINGS) && sorted(COMMAND_LINE) && sorted(PROCESS));
    }

    #[test]
    fn settings_lists_exactly_what_the_settings_groups_read() {
        let mut candidates: BTreeSet<String> = SETTINGS.iter().map(|s| s.to_string()).collect();
        for (_, text) in sources() {
            for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.len() < 2 || word.starts_with(|c: char| c.is_ascii_digit()) {
                    continue;
                }
                let upper = word.to_ascii_uppercase();
                // envy strips a repeated prefix too (`RECONCILER_RECONCILER_JOB`
                // is read as `RECONCILER_JOB`): one prefix at most.
                if upper.starts_with(&PREFIX.repeat(2)) {
                    continue;
                }
                if !upper.starts_with(PREFIX) {
                    candidates.insert(format!("{PREFIX}{upper}"));
                }
                candidates.insert(upper);
            }
        }
        assert!(
            candidates.len() > 1000,
            "only {} words in src/",
            candidates.len()
        );
        let read: BTreeSet<&str> = candidates
            .iter()
            .map(String::as_str)
            .filter(|name| read_by_settings(name))
            .collect();
        let listed: BTreeSet<&str> = SETTINGS.iter().copied().collect();
        assert_eq!(
            read, listed,
            "SETTINGS must list what Settings::from_vars reads"
        );
    }

    #[test]
    fn command_line_lists_every_flag_default_from_the_environment() {
        fn walk(cmd: &clap::Command, out: &mut BTreeSet<String>) {
            for arg in cmd.get_arguments() {
                if let Some(name) = arg.get_env() {
                    out.insert(name.to_string_lossy().into_owned());
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, out);
            }
        }
        let mut read = BTreeSet::new();
        walk(
            &<crate::cli::Cli as clap::CommandFactory>::command(),
            &mut read,
        );
        let listed: BTreeSet<String> = COMMAND_LINE.iter().map(|s| s.to_string()).collect();
        assert_eq!(read, listed);
    }

    #[test]
    fn process_lists_every_direct_read() {
        let mut read = BTreeSet::new();
        for (path, text) in sources() {
            if path.ends_with("config/variables.rs") {
                continue;
            }
            for call in ["var(\"", "var_os(\""] {
                for (i, _) in text.match_indices(call) {
                    let rest = &text[i + call.len()..];
                    let name = rest.split('"').next().unwrap_or_default();
                    read.insert(name.to_string());
                }
            }
            if text.contains("EnvFilter::try_from_default_env")
                || text.contains("EnvFilter::from_default_env")
            {
                read.insert(tracing_subscriber::EnvFilter::DEFAULT_ENV.to_string());
            }
        }
        let listed: BTreeSet<String> = PROCESS.iter().map(|s| s.to_string()).collect();
        assert_eq!(read, listed);
    }
}
