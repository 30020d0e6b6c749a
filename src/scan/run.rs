//! The `run` loop: up to `RECONCILER_BATCHES_PER_RUN` batches, continuing past
//! a wrap (DESIGN.md), stopping early on a second consecutive wrap (an empty
//! table), at the first wrap of a dry run, or on a shutdown signal.

use std::time::Instant;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::batch::{run_batch_until, Lease, Mode};
use super::report::{BatchReport, RunSummary};
use super::ScanError;
use crate::config::JobSettings;
use crate::store::{cursor, runs, Context};
use crate::stripe::StripeGateway;

/// How to run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Read and classify, write nothing (not even the cursor or run history).
    pub dry_run: bool,
}

/// Runs the job. Always returns the summary of what was committed, with the
/// error that stopped the run, if any.
#[tracing::instrument(name = "run", skip_all, fields(job = %settings.job, dry_run = options.dry_run))]
pub async fn run(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    options: RunOptions,
    shutdown: CancellationToken,
) -> (RunSummary, Result<(), ScanError>) {
    let started = Instant::now();
    let mut summary = RunSummary {
        job: settings.job.clone(),
        dry_run: options.dry_run,
        ..RunSummary::default()
    };
    let lease = if options.dry_run {
        None
    } else {
        match take_lease(pool, settings).await {
            Ok(lease) => Some(lease),
            Err(e) => {
                summary.outcome = e.outcome().to_owned();
                summary.duration_seconds = started.elapsed().as_secs_f64();
                return (summary, Err(e));
            }
        }
    };
    let run_id = match lease {
        Some(_) => start_record(pool, settings).await,
        None => None,
    };
    let result = batches(
        pool,
        gateway,
        settings,
        options,
        lease.as_ref(),
        &shutdown,
        &mut summary,
    )
    .await;
    if let Some(lease) = &lease {
        give_back(pool, settings, lease).await;
    }
    summary.duration_seconds = started.elapsed().as_secs_f64();
    summary.outcome = match &result {
        Ok(()) => "completed".to_owned(),
        Err(e) => e.outcome().to_owned(),
    };
    if let Some(id) = run_id {
        finish_record(pool, id, &summary).await;
    }
    (summary, result)
}

async fn batches(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    options: RunOptions,
    lease: Option<&Lease>,
    shutdown: &CancellationToken,
    summary: &mut RunSummary,
) -> Result<(), ScanError> {
    let mut mode = if options.dry_run {
        let mut conn = crate::store::begin(pool).await.context("connecting")?;
        let start = cursor::read(&mut conn, &settings.job)
            .await?
            .map_or(0, |c| c.last_id);
        Mode::DryRun { after_id: start }
    } else {
        Mode::Write
    };
    let run_started = Instant::now();
    let mut previous_wrapped = false;
    for number in 1..=settings.batches_per_run {
        if shutdown.is_cancelled() {
            return Err(ScanError::Interrupted);
        }
        if settings
            .run_deadline
            .is_some_and(|d| run_started.elapsed() >= d)
        {
            tracing::info!(
                batches_done = number - 1,
                "run deadline reached; no new batch started"
            );
            break;
        }
        let started = Instant::now();
        let report = run_batch_until(pool, gateway, settings, mode, lease, shutdown).await?;
        log_batch(number, &report, started.elapsed().as_secs_f64());
        summary.add_batch(&report);
        if let Mode::DryRun { after_id } = &mut mode {
            *after_id = report.cursor_to;
        }
        if report.wrapped && (previous_wrapped || options.dry_run) {
            // Two wraps in a row: the table is empty. A dry run stops at the
            // end of the table: with nothing written, a second pass would only
            // count the same rows twice.
            break;
        }
        previous_wrapped = report.wrapped;
    }
    Ok(())
}

fn log_batch(number: u32, r: &BatchReport, seconds: f64) {
    let v = &r.verdicts;
    use crate::reconcile::Verdict as V;
    tracing::info!(
        batch = number,
        cursor_from = r.cursor_from,
        cursor_to = r.cursor_to,
        rows = r.scanned,
        in_sync = v.get(V::InSync),
        in_flight = v.get(V::InFlight),
        repairable = v.get(V::Repairable),
        needs_review = v.get(V::NeedsReview),
        unverifiable = v.get(V::Unverifiable),
        findings_created = r.findings_created,
        commands_enqueued = r.commands_enqueued,
        findings_cleared = r.findings_cleared,
        wrapped = r.wrapped,
        seconds,
        "batch done"
    );
}

/// Takes the cursor lease before any Stripe read, so a second run learns it
/// is second without spending the rate budget.
async fn take_lease(pool: &PgPool, settings: &JobSettings) -> Result<Lease, ScanError> {
    let lease = Lease::new(settings);
    let mut conn = pool.acquire().await.context("connecting")?;
    if cursor::acquire_lease(&mut conn, &settings.job, &lease.owner, lease.ttl_seconds).await? {
        tracing::info!(owner = %lease.owner, ttl_seconds = lease.ttl_seconds, "cursor lease taken");
        Ok(lease)
    } else {
        Err(ScanError::ConcurrentRun {
            job: settings.job.clone(),
        })
    }
}

async fn give_back(pool: &PgPool, settings: &JobSettings, lease: &Lease) {
    let released = match pool.acquire().await {
        Ok(mut conn) => cursor::release_lease(&mut conn, &settings.job, &lease.owner)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = released {
        tracing::warn!(error = %e, ttl_seconds = lease.ttl_seconds, "could not release the cursor lease; it expires by itself");
    }
}

async fn start_record(pool: &PgPool, settings: &JobSettings) -> Option<i64> {
    let mut conn = pool.acquire().await.ok()?;
    match runs::start(&mut conn, &settings.job, settings.batch_size).await {
        Ok(id) => Some(id),
        Err(e) => {
            tracing::warn!(error = %e, "could not record the run start");
            None
        }
    }
}

async fn finish_record(pool: &PgPool, run_id: i64, s: &RunSummary) {
    let record = runs::RunRecord {
        batches: i32::try_from(s.batches).unwrap_or(i32::MAX),
        rows_scanned: i64::try_from(s.rows_scanned).unwrap_or(i64::MAX),
        verdicts: s.verdicts.to_json(),
        findings_created: i64::try_from(s.findings_created).unwrap_or(i64::MAX),
        commands_enqueued: i64::try_from(s.commands_enqueued).unwrap_or(i64::MAX),
        wrapped: s.wrapped,
        outcome: &s.outcome,
    };
    let result = match pool.acquire().await {
        Ok(mut conn) => runs::finish(&mut conn, run_id, &record)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = result {
        tracing::warn!(error = %e, "could not record the run end");
    }
}
