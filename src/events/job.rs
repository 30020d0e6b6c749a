//! The events job as a [`Job`] (docs/events.md): the lease on its position
//! row, the run's work (`run`), and what the lifecycle reports: its summary
//! logged and printed (`print`), the events position's figures, and the push
//! to `job=<RECONCILER_JOB>-events` (never the scan's group).

use sqlx::PgPool;

use super::groups::EventsGroups;
use super::print::print_summary;
use super::summary::EventsSummary;
use super::{events_job, run, EventsError};
use crate::config::{LogFormat, RunSettings, Settings};
use crate::facts::TableFacts;
use crate::lease::Lease;
use crate::lifecycle::{Checks, Clock, Failure, Job, JobContext, JobSpec, Reported};
use crate::metrics::{EventsFigures, EventsMetrics, EventsState, RunMetrics};
use crate::outcome::RunOutcome;
use crate::store::lease::LeaseTable;
use crate::store::{events_position, Context};
use crate::stripe::{RequestCounts, StripeGateway};

/// The events job of `stripe-reconciler events`.
#[derive(Debug, Default)]
pub struct EventsJob;

impl Failure for EventsError {
    fn exit_code(&self) -> u8 {
        EventsError::exit_code(self)
    }
}

impl Job for EventsJob {
    // Rows are looked up by PaymentIntent, not read by the partition's index.
    const SPEC: JobSpec = JobSpec {
        checks: Checks::Reads {
            partition_index: false,
        },
    };
    type Groups<'s> = EventsGroups<'s>;
    type Gateway = StripeGateway;
    type Summary = EventsSummary;
    type Error = EventsError;
    type State = EventsState;

    fn groups<'s>(settings: &'s Settings, facts: &'s TableFacts) -> EventsGroups<'s> {
        EventsGroups::of(settings, facts)
    }

    fn summary(&self, ctx: &JobContext<'_, '_, Self>) -> EventsSummary {
        EventsSummary {
            job: events_job(&ctx.settings.scan.run.job),
            ..EventsSummary::default()
        }
    }

    fn database_down(&self, run: &RunSettings, _clock: &Clock) -> EventsSummary {
        EventsSummary {
            job: events_job(&run.job),
            outcome: RunOutcome::DatabaseError,
            ..EventsSummary::default()
        }
    }

    /// The lease for the listing: the slowest batch the settings allow, plus
    /// a second per page at the rate limit.
    fn lease(&self, ctx: &JobContext<'_, '_, Self>) -> Option<Lease> {
        let settings = ctx.settings;
        let job = events_job(&settings.scan.run.job);
        let mut lease = Lease::new(
            settings.scan.scan,
            settings.scan.stripe,
            LeaseTable::EventsPosition,
            &job,
        );
        lease.ttl_seconds += f64::from(settings.events.max_pages)
            / f64::from(settings.scan.stripe.rate_limit_rps.max(1));
        Some(lease)
    }

    async fn body(
        &mut self,
        ctx: &JobContext<'_, '_, Self>,
        summary: &mut EventsSummary,
    ) -> Result<(), EventsError> {
        run::body(ctx, summary).await
    }

    async fn finish(
        &mut self,
        ctx: &JobContext<'_, '_, Self>,
        summary: &mut EventsSummary,
        result: &Result<(), EventsError>,
    ) {
        summary.duration_seconds = ctx.clock.elapsed_seconds();
        summary.outcome = match result {
            Ok(()) => RunOutcome::Completed,
            Err(e) => e.outcome(),
        };
    }

    fn reported(summary: &EventsSummary) -> Reported<'_> {
        Reported {
            group: &summary.job,
            outcome: summary.outcome,
            notifies: true,
        }
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
            left_to_held = summary.events_left_to_held,
            seen_before = summary.events_seen_before,
            listed_late = summary.events_listed_late,
            overlap_seconds = summary.overlap_seconds,
            feeds_not_advancing = summary.feeds_not_advancing,
            duration_seconds = summary.duration_seconds,
            "events run summary"
        );
    }

    fn print(summary: &EventsSummary, format: LogFormat) {
        print_summary(summary, format);
    }

    async fn state(&self, ctx: &JobContext<'_, '_, Self>) -> Option<EventsState> {
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
            metrics.observe_events(&figures(summary, gateway.request_counts()), state, now);
        }
        Some(Ok(metrics.into_figures()))
    }
}

/// The figures of a run's summary and the gateway's request counts, as the
/// metrics take them.
pub fn figures(s: &EventsSummary, stripe_requests: RequestCounts) -> EventsFigures {
    EventsFigures {
        duration_seconds: s.duration_seconds,
        outcome: s.outcome,
        events_read: s.events_read,
        pages: s.pages,
        payment_intents: s.payment_intents,
        payment_intents_retrieved: s.payment_intents_retrieved,
        rows_confirmed: s.rows_confirmed,
        findings_created: s.findings_created,
        missing_locally_created: s.missing_locally_created,
        commands_enqueued: s.commands_enqueued,
        truncated: s.truncated,
        accounts_unreachable: s.accounts_unreachable,
        events_without_payment_intent: s.events_without_payment_intent,
        feeds_not_advancing: s.feeds_not_advancing,
        held_share_reached: s.held_share_reached,
        left_to_held: s.events_left_to_held,
        listed_late: s.events_listed_late,
        overlap_seconds: s.overlap_seconds,
        gap_seconds: s.gap_seconds,
        stripe_requests,
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
