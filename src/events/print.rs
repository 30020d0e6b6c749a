//! The events job's summary on stdout: one JSON line for machines, a small
//! table for people (docs/events.md).

use super::summary::EventsSummary;
use crate::config::LogFormat;
use crate::terminal::escape;

/// JSON (one line, exact) for machines, a small table for people (text
/// escaped, [`crate::terminal`]).
pub(super) fn print_summary(s: &EventsSummary, format: LogFormat) {
    match format {
        LogFormat::Json => match serde_json::to_string(s) {
            Ok(line) => println!("{line}"),
            Err(e) => tracing::error!(error = %e, "cannot serialise the events summary"),
        },
        LogFormat::Pretty => print_table(s),
    }
}

/// The summary as a small table for people.
fn print_table(s: &EventsSummary) {
    // `job` is RECONCILER_JOB: text a person did not type here.
    println!("events summary ({})", escape(&s.job));
    println!("  outcome              {}", s.outcome.as_str());
    println!(
        "  window start         {}",
        s.window_start.map_or("-".into(), |t| t.to_rfc3339())
    );
    println!("  pages                {}", s.pages);
    println!("  slices committed     {}", s.slices);
    println!("  events read          {}", s.events_read);
    if s.events_without_payment_intent > 0 {
        println!(
            "  no PaymentIntent     {} (charges made without one: nothing to re-read)",
            s.events_without_payment_intent
        );
    }
    if s.accounts > 0 || s.accounts_unreachable > 0 {
        println!(
            "  connected accounts   {} (unreachable, skipped: {})",
            s.accounts, s.accounts_unreachable
        );
    }
    println!("  payment intents      {}", s.payment_intents);
    println!("  re-read from Stripe  {}", s.payment_intents_retrieved);
    println!("  confirmed, no read   {}", s.rows_confirmed);
    println!("  in grace, skipped    {}", s.rows_in_grace);
    println!(
        "  findings created     {} (missing_locally {})",
        s.findings_created, s.missing_locally_created
    );
    println!("  commands enqueued    {}", s.commands_enqueued);
    println!("  findings cleared     {}", s.findings_cleared);
    println!(
        "  held for a retry     {} (read again first: {}; left to the scan: {})",
        s.payment_intents_held, s.retries_read, s.retries_expired
    );
    println!("  left to held share   {}", s.events_left_to_held);
    println!(
        "  overlap re-read      {:.0} s (handled before: {}; listed late: {})",
        s.overlap_seconds, s.events_seen_before, s.events_listed_late
    );
    print_warnings(s);
    println!(
        "  covered until        {}",
        s.covered_until.map_or("-".into(), |t| t.to_rfc3339())
    );
    println!("  duration             {:.2} s", s.duration_seconds);
}

/// The table's lines for what stopped or limited the run (a gap, the page
/// limit, the deadline, the held share, a feed that does not advance).
fn print_warnings(s: &EventsSummary) {
    if let Some(g) = s.gap_seconds {
        println!("  GAP                  {g:.0} s of events no longer kept by Stripe");
    }
    if s.truncated {
        println!(
            "  BACKLOG              page limit reached; the next runs continue from the position"
        );
    }
    if s.deadline_reached {
        println!(
            "  DEADLINE             run deadline reached; the next runs continue from the position"
        );
    }
    if s.held_share_reached {
        println!("  HELD SHARE           the held PaymentIntents' third of the run is used up; the rest stay held for the next runs");
    }
    if s.feeds_not_advancing > 0 {
        println!(
            "  NOT ADVANCING        {} feed(s) whose events list repeats itself; their positions did not move",
            s.feeds_not_advancing
        );
    }
}
