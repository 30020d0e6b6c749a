//! The scan's [`Report`]: its summary logged and printed, the job's state
//! ([`crate::status`]) and the figures pushed to `job=<RECONCILER_JOB>`.

use std::time::Duration;

use sqlx::PgPool;

use super::Report;
use crate::config::{LogFormat, RunSettings, Settings};
use crate::job::{Clock, RunContext};
use crate::metrics::{RunMetrics, ScanMetrics};
use crate::outcome::RunOutcome;
use crate::reconcile::Verdict;
use crate::scan::{RunSummary, ScanGroups, ScanJob};
use crate::status::{self, Status};
use crate::store::Context;
use crate::stripe::StripeGateway;

/// Stripe's default per-endpoint rate limit (`shared/stripe/FACTS.md`).
const STRIPE_ENDPOINT_LIMIT_RPS: u32 = 25;

impl Report for ScanJob {
    type State = Status;
    const NEEDS_PARTITION_INDEX: bool = true;

    fn groups(settings: &Settings) -> ScanGroups<'_> {
        ScanGroups::of(settings)
    }

    fn check(&self, groups: &ScanGroups<'_>) {
        if groups.stripe.rate_limit_rps > STRIPE_ENDPOINT_LIMIT_RPS {
            tracing::warn!(
                rate_limit_rps = groups.stripe.rate_limit_rps,
                "RECONCILER_RATE_LIMIT_RPS is above Stripe's {STRIPE_ENDPOINT_LIMIT_RPS}/s limit on this endpoint, which the application shares; use this only against a local stand-in"
            );
        }
    }

    fn database_down(&self, run: &RunSettings, clock: &Clock) -> RunSummary {
        RunSummary {
            job: run.job.clone(),
            dry_run: self.options.dry_run,
            outcome: RunOutcome::DatabaseError,
            duration_seconds: clock.elapsed_seconds(),
            ..RunSummary::default()
        }
    }

    fn group(summary: &RunSummary) -> (&str, RunOutcome) {
        (&summary.job, summary.outcome)
    }

    fn notifies(summary: &RunSummary) -> bool {
        !summary.dry_run
    }

    fn log(summary: &RunSummary) {
        log_summary(summary);
    }

    fn print(summary: &RunSummary, format: LogFormat) {
        print_summary(summary, format);
    }

    async fn state(&self, ctx: &RunContext<'_, Self::Groups<'_>>) -> Option<Status> {
        // After a signal, the pod has its termination grace period (30 s by
        // default) for the state query and the push: keep both short.
        let timeout = if ctx.shutdown.is_cancelled() {
            Duration::from_secs(5)
        } else {
            Duration::from_secs(30)
        };
        read_status(ctx.pool, &ctx.settings, timeout).await
    }

    fn metrics(
        summary: &RunSummary,
        _gateway: &StripeGateway,
        state: Option<&Status>,
        now: f64,
    ) -> Option<Result<RunMetrics, prometheus::Error>> {
        if summary.dry_run {
            tracing::info!("dry run: metrics not pushed");
            return None;
        }
        let mut metrics = match ScanMetrics::new() {
            Ok(m) => m,
            Err(e) => return Some(Err(e)),
        };
        if summary.outcome == RunOutcome::ConcurrentRun {
            metrics.observe_concurrent_run(now);
        } else {
            metrics.observe_run(summary, now);
            if let Some(s) = state {
                metrics.observe_status(s);
            }
        }
        Some(Ok(metrics.into_figures()))
    }
}

async fn read_status(pool: &PgPool, job: &ScanGroups<'_>, timeout: Duration) -> Option<Status> {
    let read = async {
        let mut conn = crate::store::begin(pool).await.context("connecting")?;
        status::read_job(&mut conn, job.run, job.schema, job.outbox).await
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(s)) => {
            if let Some(c) = s.capacity.filter(|c| c.ratio <= 1.0) {
                tracing::warn!(
                    capacity_ratio = c.ratio,
                    scanned_rows_per_hour = c.scanned_rows_per_hour,
                    new_rows_per_hour = c.new_rows_per_hour,
                    "capacity ratio B*R/G is at or below 1: the cursor will never complete a cycle; raise RECONCILER_BATCH_SIZE or run more often"
                );
            }
            Some(s)
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "cannot read the job's state for the metrics");
            None
        }
        Err(_) => {
            tracing::error!("reading the job's state for the metrics timed out");
            None
        }
    }
}

fn log_summary(s: &RunSummary) {
    let v = &s.verdicts;
    tracing::info!(
        outcome = %s.outcome,
        dry_run = s.dry_run,
        batches = s.batches,
        rows = s.rows_scanned,
        in_sync = v.get(Verdict::InSync),
        in_flight = v.get(Verdict::InFlight),
        repairable = v.get(Verdict::Repairable),
        needs_review = v.get(Verdict::NeedsReview),
        unverifiable = v.get(Verdict::Unverifiable),
        findings_created = s.findings_created,
        commands_enqueued = s.commands_enqueued,
        findings_cleared = s.findings_cleared,
        findings_payment_deleted = s.findings_payment_deleted,
        writes_refused = s.writes_refused,
        wrapped = s.wrapped,
        cursor = s.cursor_position,
        duration_seconds = s.duration_seconds,
        stripe_retrieve_requests = s.stripe_requests.retrieve,
        stripe_list_requests = s.stripe_requests.list,
        stripe_accounts_unreachable = s.stripe_accounts_unreachable,
        stripe_requests_per_row = (s.rows_scanned > 0)
            .then(|| s.stripe_requests.total() as f64 / s.rows_scanned as f64),
        "run summary"
    );
}

/// JSON (one line, exact) for machines, a small table for people (numbers,
/// flags and the outcome's fixed label: no stored text).
fn print_summary(s: &RunSummary, format: LogFormat) {
    match format {
        LogFormat::Json => match serde_json::to_string(s) {
            Ok(line) => println!("{line}"),
            Err(e) => tracing::error!(error = %e, "cannot serialise the run summary"),
        },
        LogFormat::Pretty => {
            let title = if s.dry_run {
                "run summary (dry run: nothing written)"
            } else {
                "run summary"
            };
            println!("{title}");
            println!("  outcome            {}", s.outcome.as_str());
            println!("  batches            {}", s.batches);
            println!("  rows scanned       {}", s.rows_scanned);
            for (verdict, rows) in s.verdicts.iter() {
                println!("  {:<18} {rows}", verdict.as_str());
            }
            if s.dry_run {
                // Counted with a real run's dedup rule: drift that already has
                // an open finding would create nothing.
                println!("  would create findings   {}", s.findings_created);
                println!("  would enqueue commands  {}", s.commands_enqueued);
            } else {
                println!("  findings created   {}", s.findings_created);
                println!("  commands enqueued  {}", s.commands_enqueued);
                println!("  findings cleared   {}", s.findings_cleared);
                if s.findings_payment_deleted > 0 {
                    // Payments the application deleted: their findings closed.
                    println!("  payment deleted    {}", s.findings_payment_deleted);
                }
                println!("  writes refused     {}", s.writes_refused);
            }
            println!("  wrapped            {}", s.wrapped);
            if s.stripe_accounts_unreachable > 0 {
                println!(
                    "  unreachable connected accounts  {}",
                    s.stripe_accounts_unreachable
                );
            }
            println!(
                "  cursor             {}",
                s.cursor_position.map_or_else(
                    || "unknown (database unreachable)".to_owned(),
                    |c| c.to_string()
                )
            );
            println!("  duration           {:.2} s", s.duration_seconds);
        }
    }
}
