//! The scan's shape: the batch and run sizes (a number or `auto`), the cycle
//! target and the schedule interval `auto` plans with, the read mode and list
//! reads (docs/configuration.md; docs/scan.md, "Read modes"). The run-wide
//! variables (job name, grace, deadline, unverifiable cycles) are `run`.

use std::time::Duration;

use serde::Deserialize;

use super::error::{invalid, ConfigError};
use super::value;

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
    /// The job sizes it (docs/operations.md, "Sizing (`auto`)").
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
    batch_size: Option<String>,
    batches_per_run: Option<String>,
    read_mode: Option<String>,
    list_window_slack_seconds: Option<String>,
    list_max_pages: Option<String>,
    target_cycle_seconds: Option<String>,
    schedule_interval_seconds: Option<String>,
}

/// The scan's shape: how big a batch and a run are, the cycle `auto` plans
/// for, and how phase 2 reads (docs/configuration.md; docs/scan.md, "Read
/// modes").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanSettings {
    /// `RECONCILER_BATCH_SIZE`: B, rows per batch (1..=10000; default
    /// [`LIST_BATCH_SIZE`] in list mode, [`RETRIEVE_BATCH_SIZE`] in retrieve mode).
    pub batch_size: u32,
    /// `RECONCILER_BATCHES_PER_RUN`: `auto` (default; sized at the start of
    /// each run to finish a cycle within [`ScanSettings::target_cycle`], see
    /// [`crate::capacity::plan`]) or exactly that many (1..=100000).
    pub batches_per_run: Sizing,
    /// `RECONCILER_TARGET_CYCLE_SECONDS`: the cycle time `auto` plans for
    /// (60..=31,536,000, default 86,400 s).
    pub target_cycle: Duration,
    /// `RECONCILER_SCHEDULE_INTERVAL_SECONDS`: seconds between two runs (the
    /// chart sets it from `schedule`; 60..=2,678,400, default 600 s).
    pub schedule_interval: Duration,
    /// `RECONCILER_READ_MODE`: how phase 2 reads Stripe (default `list`).
    pub read_mode: ReadMode,
    /// `RECONCILER_LIST_WINDOW_SLACK_SECONDS`: seconds the batch's
    /// `created_at` window is widened by on each side in list mode
    /// (0..=2,592,000, default 3600).
    pub list_window_slack: Duration,
    /// `RECONCILER_LIST_MAX_PAGES`: list requests per batch before the rows
    /// not yet seen fall back to one retrieve each: `auto` (default, see
    /// [`ScanSettings::list_page_cap`]) or that cap (1..=1000).
    pub list_max_pages: Sizing,
}

impl Default for ScanSettings {
    fn default() -> Self {
        ScanSettings {
            batch_size: LIST_BATCH_SIZE,
            batches_per_run: Sizing::Auto,
            target_cycle: Duration::from_secs(86_400),
            schedule_interval: Duration::from_secs(600),
            read_mode: ReadMode::List,
            list_window_slack: Duration::from_secs(3600),
            list_max_pages: Sizing::Auto,
        }
    }
}

/// `auto` list pages: a page holds at most 100 PaymentIntents (Stripe's
/// `limit` maximum), and the batch's widened `created` window also holds
/// PaymentIntents of no row of the batch: 10% more than the batch, i.e.
/// 11 pages per 1,000 rows (integers: no float rounding at the boundary).
const LIST_PAGES_PER_1000_ROWS: u32 = 11;
/// `auto` never allows fewer pages than the earlier fixed default (10):
/// a small batch's window is mostly its slack, which may hold more
/// PaymentIntents than the batch itself.
const LIST_PAGES_FLOOR: u32 = 10;

impl ScanSettings {
    /// The list pages a batch may send: the fixed cap, or for `auto`
    /// `ceil(batch_size / 100 × 1.1) + 1`, at least 10 (1,900 rows: 22 pages).
    pub fn list_page_cap(&self) -> u32 {
        match self.list_max_pages {
            Sizing::Fixed(n) => n,
            Sizing::Auto => {
                let pages = (self.batch_size * LIST_PAGES_PER_1000_ROWS).div_ceil(1000);
                (pages + 1).max(LIST_PAGES_FLOOR)
            }
        }
    }
}

/// `RECONCILER_READ_MODE`: `list` (default) or `retrieve`.
fn read_mode(raw: Option<&str>) -> Result<ReadMode, ConfigError> {
    match raw.map(str::trim) {
        None | Some("list") => Ok(ReadMode::List),
        Some("retrieve") => Ok(ReadMode::Retrieve),
        Some(_) => Err(invalid("RECONCILER_READ_MODE", "must be list or retrieve")),
    }
}

/// A whole number of seconds in `min..=max` (seconds), `default` when unset.
fn seconds(
    var: &'static str,
    raw: Option<String>,
    default: Duration,
    (min, max): (u64, u64),
) -> Result<Duration, ConfigError> {
    value::number(var, raw, default.as_secs(), min, max).map(Duration::from_secs)
}

/// Parses the scan group; defaults from [`ScanSettings::default`].
///
/// # Errors
/// [`ConfigError`] naming the first malformed variable.
pub(super) fn parse<I>(vars: I) -> Result<ScanSettings, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: ScanVars = value::read(Some("RECONCILER_"), vars)?;
    scan_settings(&raw)
}

/// The [`ScanSettings`] group of `raw`; defaults from [`ScanSettings::default`].
fn scan_settings(raw: &ScanVars) -> Result<ScanSettings, ConfigError> {
    let ds = ScanSettings::default();
    let read_mode = read_mode(raw.read_mode.as_deref())?;
    let default_batch = match read_mode {
        ReadMode::List => LIST_BATCH_SIZE,
        ReadMode::Retrieve => RETRIEVE_BATCH_SIZE,
    };
    let batch_size = value::number(
        "RECONCILER_BATCH_SIZE",
        raw.batch_size.clone(),
        default_batch,
        1,
        10_000,
    )?;
    let batches_per_run = sizing(
        "RECONCILER_BATCHES_PER_RUN",
        raw.batches_per_run.clone(),
        1,
        100_000,
    )?;
    let target_cycle = seconds(
        "RECONCILER_TARGET_CYCLE_SECONDS",
        raw.target_cycle_seconds.clone(),
        ds.target_cycle,
        (60, 365 * 24 * 3600),
    )?;
    let schedule_interval = seconds(
        "RECONCILER_SCHEDULE_INTERVAL_SECONDS",
        raw.schedule_interval_seconds.clone(),
        ds.schedule_interval,
        (60, 31 * 24 * 3600),
    )?;
    let list_window_slack = seconds(
        "RECONCILER_LIST_WINDOW_SLACK_SECONDS",
        raw.list_window_slack_seconds.clone(),
        ds.list_window_slack,
        (0, 30 * 24 * 3600),
    )?;
    let list_max_pages = sizing(
        "RECONCILER_LIST_MAX_PAGES",
        raw.list_max_pages.clone(),
        1,
        1000,
    )?;
    Ok(ScanSettings {
        batch_size,
        batches_per_run,
        target_cycle,
        schedule_interval,
        read_mode,
        list_window_slack,
        list_max_pages,
    })
}
