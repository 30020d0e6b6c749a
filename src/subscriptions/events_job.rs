//! The subscriptions' events feed as a [`Job`] (docs/subscriptions.md,
//! "Events"): run by `events` after the PaymentIntents' feed when
//! `RECONCILER_SUBSCRIPTIONS_TABLE` is set, with its own position row and
//! lease (`<job>-events`, e.g. `subscriptions-vs-stripe-events`), its
//! summary printed and its figures pushed to that group.

use serde::Serialize;

use super::events::{read_feed, FeedCounts};
use super::groups::{job_name, SubscriptionGroups, Target};
use crate::config::{EventsSettings, LogFormat, RunSettings, Settings};
use crate::facts::TableFacts;
use crate::lease::Lease;
use crate::lifecycle::{Checks, Clock, Job, JobContext, JobSpec, Reported};
use crate::metrics::{RunMetrics, ScanFigures, ScanMetrics};
use crate::outcome::{RunError, RunOutcome};
use crate::store::lease::LeaseTable;
use crate::stripe::{RequestCounts, StripeGateway};

/// The feed's job name: the subscriptions job's, `-events`.
pub fn events_job_name(run: &RunSettings) -> String {
    format!("{}-events", job_name(run))
}

/// What one run of the subscriptions' feed did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SubscriptionEventsSummary {
    /// `subscriptions-vs-stripe-events`.
    pub job: String,
    /// Always `subscriptions`.
    pub object: &'static str,
    /// The feed's counts.
    #[serde(flatten)]
    pub feed: FeedCounts,
    /// How the run ended.
    pub outcome: RunOutcome,
    /// Wall time, seconds.
    pub duration_seconds: f64,
    /// Stripe requests per endpoint.
    pub stripe_requests: RequestCounts,
}

impl crate::lifecycle::Ended for SubscriptionEventsSummary {
    fn ended(&mut self, outcome: RunOutcome, duration_seconds: f64) {
        self.outcome = outcome;
        self.duration_seconds = duration_seconds;
    }
}

/// `events`' second feed: subscriptions.
#[derive(Debug, Default)]
pub struct SubscriptionEventsJob {
    requests_before: RequestCounts,
}

/// The job's groups, with the events settings.
#[derive(Debug, Clone, Copy)]
pub struct FeedGroups<'a> {
    /// The subscriptions scan's groups.
    pub scan: SubscriptionGroups<'a>,
    /// `RECONCILER_EVENTS_LOOKBACK_SECONDS`, `RECONCILER_EVENTS_MAX_PAGES`.
    pub events: &'a EventsSettings,
}

impl Job for SubscriptionEventsJob {
    const SPEC: JobSpec = JobSpec {
        checks: Checks::Subscriptions,
    };
    type Groups<'s> = FeedGroups<'s>;
    type Gateway = StripeGateway;
    type Summary = SubscriptionEventsSummary;
    type Error = RunError;
    type State = ();

    fn groups<'s>(settings: &'s Settings, facts: &'s TableFacts) -> FeedGroups<'s> {
        FeedGroups {
            scan: SubscriptionGroups::of(settings, facts),
            events: &settings.events,
        }
    }

    fn summary(&self, ctx: &JobContext<'_, '_, Self>) -> SubscriptionEventsSummary {
        SubscriptionEventsSummary {
            job: events_job_name(ctx.settings.scan.run),
            object: "subscriptions",
            ..SubscriptionEventsSummary::default()
        }
    }

    fn database_down(&self, run: &RunSettings, clock: &Clock) -> SubscriptionEventsSummary {
        SubscriptionEventsSummary {
            job: events_job_name(run),
            object: "subscriptions",
            outcome: RunOutcome::DatabaseError,
            duration_seconds: clock.elapsed_seconds(),
            ..SubscriptionEventsSummary::default()
        }
    }

    fn lease(&self, ctx: &JobContext<'_, '_, Self>) -> Option<Lease> {
        let s = ctx.settings.scan;
        let job = events_job_name(s.run);
        Some(Lease::new(
            s.scan,
            s.stripe,
            LeaseTable::EventsPosition,
            &job,
        ))
    }

    async fn body(
        &mut self,
        ctx: &JobContext<'_, '_, Self>,
        summary: &mut SubscriptionEventsSummary,
    ) -> Result<(), RunError> {
        self.requests_before = ctx.gateway.request_counts();
        let groups = ctx.settings.scan;
        let (Some(table), Some(settings)) = (groups.table, groups.settings) else {
            return Ok(());
        };
        let scan_job = job_name(groups.run);
        let target = Target {
            job: &scan_job,
            table,
            settings,
            dry_run: false,
        };
        // The feed works in the scan's context (its groups, this run's lease).
        let scan_ctx = crate::lifecycle::RunContext {
            pool: ctx.pool,
            gateway: ctx.gateway,
            settings: groups,
            lease: ctx.lease.clone(),
            shutdown: ctx.shutdown.clone(),
            clock: ctx.clock,
        };
        summary.feed = read_feed(&scan_ctx, target, (&summary.job, ctx.settings.events)).await?;
        Ok(())
    }

    async fn finish(
        &mut self,
        ctx: &JobContext<'_, '_, Self>,
        summary: &mut SubscriptionEventsSummary,
        result: &Result<(), RunError>,
    ) {
        summary.duration_seconds = ctx.clock.elapsed_seconds();
        summary.stripe_requests = ctx.gateway.request_counts().since(&self.requests_before);
        summary.outcome = match result {
            Ok(()) => RunOutcome::Completed,
            Err(e) => e.outcome(),
        };
    }

    fn reported(summary: &SubscriptionEventsSummary) -> Reported<'_> {
        Reported {
            group: &summary.job,
            outcome: summary.outcome,
            notifies: true,
        }
    }

    fn log(s: &SubscriptionEventsSummary) {
        tracing::info!(
            job = %s.job,
            outcome = %s.outcome,
            events = s.feed.events_read,
            subscriptions = s.feed.subscriptions,
            rows_judged = s.feed.rows_judged,
            findings_created = s.feed.findings_created,
            commands_enqueued = s.feed.commands_enqueued,
            unverifiable = s.feed.unverifiable,
            truncated = s.feed.truncated,
            duration_seconds = s.duration_seconds,
            "subscription events summary"
        );
    }

    fn print(s: &SubscriptionEventsSummary, format: LogFormat) {
        match format {
            LogFormat::Json => match serde_json::to_string(s) {
                Ok(line) => println!("{line}"),
                Err(e) => tracing::error!(error = %e, "cannot serialise the summary"),
            },
            LogFormat::Pretty => {
                println!("subscription events summary");
                println!("  outcome            {}", s.outcome.as_str());
                println!("  events read        {}", s.feed.events_read);
                println!("  subscriptions      {}", s.feed.subscriptions);
                println!("  rows judged        {}", s.feed.rows_judged);
                println!("  findings created   {}", s.feed.findings_created);
                println!("  commands enqueued  {}", s.feed.commands_enqueued);
            }
        }
    }

    async fn state(&self, _ctx: &JobContext<'_, '_, Self>) -> Option<()> {
        None
    }

    fn metrics(
        s: &SubscriptionEventsSummary,
        _gateway: &StripeGateway,
        _state: Option<&()>,
        now: f64,
    ) -> Option<Result<RunMetrics, prometheus::Error>> {
        let mut metrics = match ScanMetrics::new() {
            Ok(m) => m,
            Err(e) => return Some(Err(e)),
        };
        if s.outcome == RunOutcome::ConcurrentRun {
            metrics.observe_concurrent_run(now);
        } else {
            let figures = ScanFigures {
                duration_seconds: s.duration_seconds,
                outcome: s.outcome,
                rows_scanned: s.feed.rows_judged,
                findings_created: s.feed.findings_created,
                commands_enqueued: s.feed.commands_enqueued,
                stripe_requests: s.stripe_requests,
                ..ScanFigures::default()
            };
            metrics.observe_run(&figures, now);
        }
        Some(Ok(metrics.into_figures()))
    }
}
