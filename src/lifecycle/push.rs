//! The push of a run's figures to the Pushgateway, decided the same way for
//! every scheduled job.

use url::Url;

use crate::metrics;
use crate::outcome::RunOutcome;

/// How a run's figures are pushed, decided the same way for the scan and the
/// events job: a run that lost the lease to another run replaces its group
/// with only the concurrent-run mark (labelled `outcome="concurrent_run"`);
/// otherwise PUT replaces the whole group when the database's state was read
/// (`has_state`), and POST merges only the run's own figures when it was not
/// (the database is down), so the last known lag, findings and last success
/// stay in place and keep their alerts firing.
pub(super) fn push_plan(
    outcome: RunOutcome,
    has_state: bool,
) -> (&'static [(&'static str, &'static str)], metrics::PushMethod) {
    const CONCURRENT: [(&str, &str); 1] = [("outcome", RunOutcome::ConcurrentRun.as_str())];
    match (outcome, has_state) {
        (RunOutcome::ConcurrentRun, _) => (&CONCURRENT, metrics::PushMethod::Replace),
        (_, true) => (&[], metrics::PushMethod::Replace),
        (_, false) => (&[], metrics::PushMethod::Merge),
    }
}

/// Now as Unix seconds (the push's timestamps); 0 for a clock before 1970.
pub(super) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Encodes `figures` and pushes them to the Pushgateway at `base` under
/// `job=<job>` (plus `extra` labels), within [`metrics::PUSH_TIMEOUT`]. Never fails:
/// a push that cannot be made is logged at error level and changes nothing
/// else (the run's result and exit code stand).
pub(super) async fn push_or_log(
    base: Url,
    figures: &metrics::RunMetrics,
    job: &str,
    extra: &[(&str, &str)],
    method: metrics::PushMethod,
) {
    let pushed = match (figures.encode(), metrics::Pusher::new(base)) {
        (Ok(body), Ok(pusher)) => {
            tokio::time::timeout(metrics::PUSH_TIMEOUT, pusher.push(job, extra, method, body))
                .await
                .unwrap_or(Err(metrics::PushError::Timeout))
        }
        (Err(e), _) => Err(e.into()),
        (_, Err(e)) => Err(e),
    };
    match pushed {
        Ok(()) => tracing::info!(group = %job, "metrics pushed"),
        Err(e) => {
            let report = anyhow::Error::new(e);
            tracing::error!(
                error = format!("{report:#}"),
                "cannot push metrics; the run's result is unchanged"
            );
        }
    }
}
