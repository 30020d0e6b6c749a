//! The scan's shape: `RECONCILER_JOB`, the batch and run sizes (a number or
//! `auto`), the cycle target and the schedule interval `auto` plans with, the
//! grace window, the run deadline, the read mode and the
//! `persistently_unverifiable` threshold (DESIGN.md, Interface, Reads and
//! "Turn 3 contract").

use std::time::Duration;

use serde::Deserialize;

use super::error::{invalid, ConfigError};
use super::{value, JobSettings};

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

/// Rows per batch in list mode when `RECONCILER_BATCH_SIZE` is unset: the
/// benchmark's best (BENCHMARKS.md, L1: 2,076 rows/s at 25/s with 1,900).
pub const LIST_BATCH_SIZE: u32 = 1_900;
/// Rows per batch in retrieve mode when `RECONCILER_BATCH_SIZE` is unset (the seed's 200).
pub const RETRIEVE_BATCH_SIZE: u32 = 200;

/// A size the job may choose itself: `auto` or an operator's number
/// (`RECONCILER_BATCHES_PER_RUN`, `RECONCILER_LIST_MAX_PAGES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sizing {
    /// The job sizes it (DESIGN.md, "Turn 3 contract").
    #[default]
    Auto,
    /// Exactly this many.
    Fixed(u32),
}

impl Sizing {
    /// `auto` or the number.
    pub fn as_text(self) -> String {
        match self {
            Sizing::Auto => "auto".to_owned(),
            Sizing::Fixed(n) => n.to_string(),
        }
    }
}

/// `auto` (also when unset) or a whole number within `min..=max`.
fn sizing(
    var: &'static str,
    raw: Option<String>,
    min: u32,
    max: u32,
) -> Result<Sizing, ConfigError> {
    match raw {
        None => Ok(Sizing::Auto),
        Some(text) if text.trim().eq_ignore_ascii_case("auto") => Ok(Sizing::Auto),
        Some(text) => value::number(var, Some(text.clone()), min, min, max)
            .map(Sizing::Fixed)
            .map_err(|_| {
                invalid(
                    var,
                    format!("{text:?} is neither auto nor a whole number within {min}..={max}"),
                )
            }),
    }
}

#[derive(Deserialize)]
struct ScanVars {
    job: Option<String>,
    batch_size: Option<String>,
    batches_per_run: Option<String>,
    grace_seconds: Option<String>,
    run_deadline_seconds: Option<String>,
    unverifiable_cycles: Option<String>,
    read_mode: Option<String>,
    list_window_slack_seconds: Option<String>,
    list_max_pages: Option<String>,
    target_cycle_seconds: Option<String>,
    schedule_interval_seconds: Option<String>,
}

/// The scan group, validated.
pub(super) struct Scan {
    pub(super) job: String,
    pub(super) batch_size: u32,
    pub(super) batches_per_run: Sizing,
    pub(super) target_cycle: Duration,
    pub(super) schedule_interval: Duration,
    pub(super) grace: Duration,
    pub(super) run_deadline: Option<Duration>,
    pub(super) unverifiable_cycles: u32,
    pub(super) read_mode: ReadMode,
    pub(super) list_window_slack: Duration,
    pub(super) list_max_pages: Sizing,
}

/// `RECONCILER_JOB`: a URL path segment of the Pushgateway's grouping key.
fn job_name(job: String) -> Result<String, ConfigError> {
    if job.is_empty() || job.len() > 100 || job.contains('/') {
        return Err(invalid(
            "RECONCILER_JOB",
            "must be 1 to 100 characters without '/'",
        ));
    }
    Ok(job)
}

/// `RECONCILER_READ_MODE`: `list` (default) or `retrieve`.
fn read_mode(raw: Option<&str>) -> Result<ReadMode, ConfigError> {
    match raw.map(str::trim) {
        None | Some("list") => Ok(ReadMode::List),
        Some("retrieve") => Ok(ReadMode::Retrieve),
        Some(_) => Err(invalid("RECONCILER_READ_MODE", "must be list or retrieve")),
    }
}

/// Parses the scan group; defaults from [`JobSettings::default`].
///
/// # Errors
/// [`ConfigError`] naming the first malformed variable.
pub(super) fn parse<I>(vars: I) -> Result<Scan, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: ScanVars = value::read(Some("RECONCILER_"), vars)?;
    let d = JobSettings::default();
    let job = job_name(raw.job.unwrap_or(d.job))?;
    let read_mode = read_mode(raw.read_mode.as_deref())?;
    let default_batch = match read_mode {
        ReadMode::List => LIST_BATCH_SIZE,
        ReadMode::Retrieve => RETRIEVE_BATCH_SIZE,
    };
    Ok(Scan {
        job,
        batch_size: value::number(
            "RECONCILER_BATCH_SIZE",
            raw.batch_size,
            default_batch,
            1,
            10_000,
        )?,
        batches_per_run: sizing(
            "RECONCILER_BATCHES_PER_RUN",
            raw.batches_per_run,
            1,
            100_000,
        )?,
        target_cycle: Duration::from_secs(value::number(
            "RECONCILER_TARGET_CYCLE_SECONDS",
            raw.target_cycle_seconds,
            d.target_cycle.as_secs(),
            60,
            365 * 24 * 3600,
        )?),
        schedule_interval: Duration::from_secs(value::number(
            "RECONCILER_SCHEDULE_INTERVAL_SECONDS",
            raw.schedule_interval_seconds,
            d.schedule_interval.as_secs(),
            60,
            31 * 24 * 3600,
        )?),
        grace: Duration::from_secs(value::number(
            "RECONCILER_GRACE_SECONDS",
            raw.grace_seconds,
            d.grace.as_secs(),
            0,
            7 * 24 * 3600,
        )?),
        run_deadline: match value::number(
            "RECONCILER_RUN_DEADLINE_SECONDS",
            raw.run_deadline_seconds,
            0,
            0,
            7 * 24 * 3600,
        )? {
            0 => None,
            secs => Some(Duration::from_secs(secs)),
        },
        unverifiable_cycles: value::number(
            "RECONCILER_UNVERIFIABLE_CYCLES",
            raw.unverifiable_cycles,
            d.unverifiable_cycles,
            1,
            100,
        )?,
        read_mode,
        list_window_slack: Duration::from_secs(value::number(
            "RECONCILER_LIST_WINDOW_SLACK_SECONDS",
            raw.list_window_slack_seconds,
            d.list_window_slack.as_secs(),
            0,
            30 * 24 * 3600,
        )?),
        list_max_pages: sizing("RECONCILER_LIST_MAX_PAGES", raw.list_max_pages, 1, 1000)?,
    })
}
