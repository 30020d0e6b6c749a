//! `stripe-reconciler run [--dry-run]`

use std::num::NonZeroU32;

use super::CommandError;
use crate::config::{LogFormat, Settings};
use crate::reconcile::Verdict;
use crate::scan::{self, RunOptions, RunSummary};
use crate::stripe::{GatewayConfig, RetryPolicy, StripeGateway};
use crate::{db, shutdown};

/// Scans, prints the summary on stdout, logs it, and returns the run's error.
pub(super) async fn run(settings: &Settings, dry_run: bool) -> Result<(), CommandError> {
    let api_key = settings.require_stripe_key()?.clone();
    let pool = db::connect(settings.connect_options()?).await?;
    let gateway = StripeGateway::new(GatewayConfig {
        base: settings.stripe_api_base.clone(),
        api_key,
        rate_limit_rps: NonZeroU32::new(settings.job.rate_limit_rps).unwrap_or(NonZeroU32::MIN),
        timeout: settings.job.http_timeout,
        retry: RetryPolicy::default(),
    })?;
    let token = shutdown::on_signal();
    let (summary, result) = scan::run(
        &pool,
        &gateway,
        &settings.job,
        RunOptions { dry_run },
        token,
    )
    .await;
    log_summary(&summary);
    print_summary(&summary, settings.log_format);
    pool.close().await;
    result.map_err(CommandError::from)
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
        wrapped = s.wrapped,
        cursor = s.cursor_position,
        duration_seconds = s.duration_seconds,
        "run summary"
    );
}

/// JSON (one line) for machines, a small table for people.
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
            println!("  outcome            {}", s.outcome);
            println!("  batches            {}", s.batches);
            println!("  rows scanned       {}", s.rows_scanned);
            for (verdict, rows) in s.verdicts.iter() {
                println!("  {:<18} {rows}", verdict.as_str());
            }
            println!("  findings created   {}", s.findings_created);
            println!("  commands enqueued  {}", s.commands_enqueued);
            println!("  findings cleared   {}", s.findings_cleared);
            println!("  wrapped            {}", s.wrapped);
            println!("  cursor             {}", s.cursor_position);
            println!("  duration           {:.2} s", s.duration_seconds);
        }
    }
}
