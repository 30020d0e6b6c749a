//! The run-wide variables every scheduled job reads: `RECONCILER_JOB`, the
//! grace window, the run deadline and the `persistently_unverifiable`
//! threshold (docs/configuration.md).

use std::time::Duration;

use serde::Deserialize;

use super::error::{invalid, ConfigError};
use super::value;

/// The run group: what names a job's run and bounds it, whichever job runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSettings {
    /// `RECONCILER_JOB`: cursor name and Pushgateway `job` label (1 to 100
    /// characters without `/`; default `payments-vs-stripe`).
    pub job: String,
    /// `RECONCILER_GRACE_SECONDS`: rows updated more recently are IN_FLIGHT
    /// (0..=604,800, default 600 s).
    pub grace: Duration,
    /// `RECONCILER_RUN_DEADLINE_SECONDS`: after this long (seconds from the
    /// start) a run starts no new batch and no Stripe retry waits past it.
    /// Set it below the CronJob's `activeDeadlineSeconds`. Default 0: none.
    pub run_deadline: Option<Duration>,
    /// `RECONCILER_UNVERIFIABLE_CYCLES`: consecutive cycles a row may stay
    /// UNVERIFIABLE before it gets a `persistently_unverifiable` finding
    /// (1..=100, default 3).
    pub unverifiable_cycles: u32,
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            job: "payments-vs-stripe".to_owned(),
            grace: Duration::from_secs(600),
            run_deadline: None,
            unverifiable_cycles: 3,
        }
    }
}

#[derive(Deserialize)]
struct RunVars {
    job: Option<String>,
    grace_seconds: Option<String>,
    run_deadline_seconds: Option<String>,
    unverifiable_cycles: Option<String>,
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

/// Parses the run group; defaults from [`RunSettings::default`].
///
/// # Errors
/// [`ConfigError`] naming the first malformed variable.
pub(super) fn parse<I>(vars: I) -> Result<RunSettings, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: RunVars = value::read(Some("RECONCILER_"), vars)?;
    let d = RunSettings::default();
    let job = job_name(raw.job.unwrap_or(d.job))?;
    let grace = value::number(
        "RECONCILER_GRACE_SECONDS",
        raw.grace_seconds,
        d.grace.as_secs(),
        0,
        7 * 24 * 3600,
    )
    .map(Duration::from_secs)?;
    let run_deadline = match value::number(
        "RECONCILER_RUN_DEADLINE_SECONDS",
        raw.run_deadline_seconds,
        0,
        0,
        7 * 24 * 3600,
    )? {
        0 => None,
        secs => Some(Duration::from_secs(secs)),
    };
    let unverifiable_cycles = value::number(
        "RECONCILER_UNVERIFIABLE_CYCLES",
        raw.unverifiable_cycles,
        d.unverifiable_cycles,
        1,
        100,
    )?;
    Ok(RunSettings {
        job,
        grace,
        run_deadline,
        unverifiable_cycles,
    })
}
