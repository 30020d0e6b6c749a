//! The events job's [`Report`]: its summary logged and printed, the events
//! position's figures, and the push to `job=<RECONCILER_JOB>-events` (never
//! the scan's group).

use sqlx::PgPool;

use super::Report;
use crate::config::{LogFormat, RunSettings, Settings};
use crate::events::{events_job, EventsGroups, EventsJob, EventsSummary};
use crate::job::{Clock, RunContext};
use crate::metrics::{EventsMetrics, EventsState, RunMetrics};
use crate::outcome::RunOutcome;
use crate::store::{events_position, Context};
use crate::stripe::StripeGateway;
use crate::terminal::escape;

impl Report for EventsJob {
    type State = EventsState;
    // Rows are looked up by PaymentIntent, not read by the partition's index.
    const NEEDS_PARTITION_INDEX: bool = false;

    fn groups(settings: &Settings) -> EventsGroups<'_> {
        EventsGroups::of(settings)
    }

    fn database_down(&self, run: &RunSettings, _clock: &Clock) -> EventsSummary {
        EventsSummary {
            job: events_job(&run.job),
            outcome: RunOutcome::DatabaseError,
            ..EventsSummary::default()
        }
    }

    fn group(summary: &EventsSummary) -> (&str, RunOutcome) {
        (&summary.job, summary.outcome)
    }

    fn log(summary: &EventsSummary) {
        tracing::info!(
            outcome = %summary.outcome,
            pages = summary.pages,
            slices = summary.slices,
            backlog_left = summary.truncated || summary.deadline_reached,
            events = summary.events_read,
            payment_intents = summary.payment_intents,
            retrieved = summary.payment_intents_retrieved,
            confirmed = summary.rows_confirmed,
            in_grace = summary.rows_in_grace,
            findings_created = summary.findings_created,
            missing_locally = summary.missing_locally_created,
            commands_enqueued = summary.commands_enqueued,
            retries_read = summary.retries_read,
            held = summary.payment_intents_held,
            retries_expired = summary.retries_expired,
            held_share_reached = summary.held_share_reached,
            feeds_not_advancing = summary.feeds_not_advancing,
            duration_seconds = summary.duration_seconds,
            "events run summary"
        );
    }

    fn print(summary: &EventsSummary, format: LogFormat) {
        print_summary(summary, format);
    }

    async fn state(&self, ctx: &RunContext<'_, Self::Groups<'_>>) -> Option<EventsState> {
        let job = events_job(&ctx.settings.scan.run.job);
        read_state(ctx.pool, &job, ctx.settings.events.account_active).await
    }

    fn metrics(
        summary: &EventsSummary,
        gateway: &StripeGateway,
        state: Option<&EventsState>,
        now: f64,
    ) -> Option<Result<RunMetrics, prometheus::Error>> {
        let mut metrics = match EventsMetrics::new() {
            Ok(m) => m,
            Err(e) => return Some(Err(e)),
        };
        if summary.outcome == RunOutcome::ConcurrentRun {
            metrics.observe_concurrent_run(now);
        } else {
            metrics.observe_events(summary, &gateway.request_counts(), state, now);
        }
        Some(Ok(metrics.into_figures()))
    }
}

/// The job's stored state: the oldest position among the platform's feed and
/// the connected accounts' feeds moved within `active`, the last success and
/// the PaymentIntents held.
async fn read_state(pool: &PgPool, job: &str, active: std::time::Duration) -> Option<EventsState> {
    // The figures `status` shows, in one statement.
    let read = async {
        // In a transaction, as every statement of the job (pooler-safe).
        let mut tx = crate::store::begin(pool)
            .await
            .context("starting a transaction")?;
        let figures = events_position::figures(&mut tx, job, active).await?;
        tx.commit().await.context("committing")?;
        Ok::<_, crate::store::StoreError>(figures)
    };
    match tokio::time::timeout(std::time::Duration::from_secs(10), read).await {
        Ok(Ok(f)) => Some(f.map_or_else(EventsState::default, |f| EventsState {
            covered_until: f.oldest_covered,
            last_success: f.last_success_at,
            held: f.payment_intents_held,
        })),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "cannot read the events position for the metrics");
            None
        }
        Err(_) => None,
    }
}

/// JSON (one line, exact) for machines, a small table for people (text
/// escaped, [`crate::terminal`]).
fn print_summary(s: &EventsSummary, format: LogFormat) {
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
