//! The scan's summary for people and logs: one tracing event, and on stdout
//! one JSON line or a small table (docs/scan.md, "Summary, errors and logs").

use super::report::RunSummary;
use crate::config::LogFormat;
use crate::reconcile::Verdict;

/// Logs the summary (one tracing event).
pub(super) fn log_summary(s: &RunSummary) {
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
pub(super) fn print_summary(s: &RunSummary, format: LogFormat) {
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
