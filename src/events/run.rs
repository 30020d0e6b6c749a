//! One `events` run: take the lease, read the window's pages, look up the
//! rows of the PaymentIntents named, re-read what the plan says, then record
//! everything and move the position in one transaction.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::feed::{self, Window};
use super::orphans::{self, OrphanRead};
use super::plan::{self, hold_back, PlanRules, RowAction};
use super::{events_job, EventsError};
use crate::config::{JobSettings, STRIPE_EVENTS_RETENTION};
use crate::lease::Lease;
use crate::outcome::RunError;
use crate::outcome::RunOutcome;
use crate::read::{observe_all, stripe_reachable, Observation, VerdictCounts};
use crate::reconcile::{FindingKind, Verdict};
use crate::record::record_observations;
use crate::store::events_position::{self, Advance};
use crate::store::lease::LeaseTable;
use crate::store::payments::{self, MoneyColumns};
use crate::store::{findings, Context};
use crate::stripe::{PaymentIntentEvent, StripeGateway};

/// Events that could not be decided hold the position back at most this long
/// beyond the grace window; older ones are left to the scan.
pub const HOLD_BEYOND_GRACE: Duration = Duration::from_secs(3600);

/// What one events run did (printed, logged and pushed).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EventsSummary {
    /// `<RECONCILER_JOB>-events`.
    pub job: String,
    /// How the run ended (see [`EventsError::outcome`]).
    pub outcome: RunOutcome,
    /// `created[gte]` of the window read.
    pub window_start: Option<DateTime<Utc>>,
    /// List pages read.
    pub pages: u32,
    /// PaymentIntent events read.
    pub events_read: u64,
    /// Entries of the feed that were not readable PaymentIntent events.
    pub events_skipped: u64,
    /// Distinct PaymentIntents the events named (each handled once).
    pub payment_intents: u64,
    /// PaymentIntents re-read from Stripe (rows and orphans).
    pub payment_intents_retrieved: u64,
    /// Rows confirmed with Stripe after their event: no read needed.
    pub rows_confirmed: u64,
    /// Rows updated within the grace window: skipped.
    pub rows_in_grace: u64,
    /// Succeeded PaymentIntents without a row and without the metadata key.
    pub orphans_foreign: u64,
    /// Rows per verdict, as the scan counts them.
    pub verdicts: VerdictCounts,
    /// Findings newly recorded (`missing_locally` included).
    pub findings_created: u64,
    /// Of which `missing_locally`.
    pub missing_locally_created: u64,
    /// Repair commands enqueued.
    pub commands_enqueued: u64,
    /// Findings resolved as no longer seen.
    pub findings_cleared: u64,
    /// Rows the database refused to write (each with a `write_refused` finding).
    pub writes_refused: u64,
    /// Seconds of events Stripe no longer keeps (position older than 30 days).
    pub gap_seconds: Option<f64>,
    /// The page limit stopped the listing before the window's start.
    pub truncated: bool,
    /// The committed position: every event created before it was handled.
    pub covered_until: Option<DateTime<Utc>>,
    /// Wall time, seconds.
    pub duration_seconds: f64,
}

/// Runs the events job once. Always returns the summary of what was
/// committed, with the error that stopped the run, if any.
#[tracing::instrument(name = "events", skip_all, fields(job = %settings.job))]
pub async fn run_events(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    shutdown: CancellationToken,
) -> (EventsSummary, Result<(), EventsError>) {
    let started = Instant::now();
    let job = events_job(&settings.job);
    let mut summary = EventsSummary {
        job: job.clone(),
        ..EventsSummary::default()
    };
    let result = match take_lease(pool, settings, &job).await {
        Ok(lease) => {
            let r = body(pool, gateway, settings, &lease, &shutdown, &mut summary).await;
            lease.give_back(pool).await;
            r
        }
        Err(e) => Err(e),
    };
    summary.duration_seconds = started.elapsed().as_secs_f64();
    summary.outcome = match &result {
        Ok(()) => RunOutcome::Completed,
        Err(e) => e.outcome(),
    };
    (summary, result)
}

async fn body(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    lease: &Lease,
    shutdown: &CancellationToken,
    summary: &mut EventsSummary,
) -> Result<(), EventsError> {
    let job = &summary.job.clone();
    // 1. The window, from the stored position.
    let position = {
        let mut conn = pool.acquire().await.context("connecting")?;
        events_position::read(&mut conn, job).await?
    };
    let listed_at = Utc::now();
    let Window { start, gap_seconds } = feed::window(
        position.and_then(|p| p.covered_until),
        listed_at,
        settings.events.lookback,
        STRIPE_EVENTS_RETENTION,
    );
    summary.window_start = Some(start);
    summary.gap_seconds = gap_seconds;
    if let Some(gap) = gap_seconds {
        tracing::warn!(gap_seconds = gap, restart = %start, "the events position is older than Stripe keeps events (30 days): events in the gap were never read; restarting at the oldest available event (the scan covers those rows)");
    }

    // 2. The pages, newest first.
    let listing = feed::list(gateway, start, settings.events.max_pages, shutdown).await?;
    summary.pages = listing.pages;
    summary.events_read = listing.events.len() as u64;
    summary.events_skipped = listing.skipped as u64;
    summary.truncated = listing.truncated;
    if listing.truncated {
        let oldest = listing.events.last().map(|e| e.created);
        tracing::warn!(pages = listing.pages, window_start = %start, oldest_read = ?oldest, "RECONCILER_EVENTS_MAX_PAGES reached: older events of the window were not read (a gap left to the scan)");
    }
    let named = plan::collapse(&listing.events);
    summary.payment_intents = named.len() as u64;

    // 3. The rows, by index lookup, and the orphans already open.
    let ids: Vec<&str> = named.iter().map(|e| e.payment_intent.as_str()).collect();
    let columns = MoneyColumns {
        amount: settings.amount_column.as_ref(),
        currency: settings.currency_column.as_ref(),
    };
    let (rows, open_orphans) = {
        let mut tx = crate::store::begin(pool)
            .await
            .context("opening the lookup")?;
        let rows = payments::by_payment_intents(&mut tx, &ids, settings.grace, columns).await?;
        let kind = FindingKind::MissingLocally.as_str();
        let open: HashSet<String> = findings::open_for_intents(&mut tx, &ids, &kind)
            .await?
            .into_iter()
            .collect();
        tx.commit().await.context("closing the lookup")?;
        (rows, open)
    };
    let now = Utc::now();
    let rules = PlanRules {
        now,
        grace: settings.grace,
        hold_limit: settings.grace + HOLD_BEYOND_GRACE,
        orphan_metadata_key: settings.events.orphan_metadata_key.clone(),
    };
    let plan = plan::plan(&named, &rows, &open_orphans, &rules);
    summary.rows_confirmed = plan.count(RowAction::Confirmed) as u64;
    summary.rows_in_grace = plan.count(RowAction::InGrace) as u64;
    summary.orphans_foreign = plan.foreign as u64;
    for _ in 0..summary.rows_in_grace {
        summary.verdicts.add(Verdict::InFlight);
    }

    // 4. Stripe, with no transaction open, under a lease long enough for it.
    let reads = plan.count(RowAction::Retrieve) + plan.orphan_reads.len();
    renew_for_reads(pool, settings, lease, reads).await?;
    let to_read: Vec<_> = plan
        .rows
        .iter()
        .filter(|(_, a)| *a == RowAction::Retrieve)
        .map(|(i, _)| rows[*i].row.clone())
        .collect();
    let (mut observations, orphan_reads) = tokio::select! {
        biased;
        () = shutdown.cancelled() => return Err(RunError::Interrupted.into()),
        read = read_all(pool, gateway, settings, to_read, &plan.orphan_reads, now) => read?,
    };
    summary.payment_intents_retrieved = reads as u64;
    let asked = observations.iter().filter(|o| o.asked_stripe).count() + orphan_reads.len();
    let failed = observations
        .iter()
        .filter(|o| o.asked_stripe && o.decision.verdict == Verdict::Unverifiable)
        .count()
        + orphan_reads.iter().filter(|o| o.unverifiable()).count();
    stripe_reachable(gateway, asked, failed).await?;
    if shutdown.is_cancelled() {
        return Err(RunError::Interrupted.into());
    }

    // 5. Record and move the position, in one transaction.
    let newest = named.first().map(|e| (e.id.as_str(), e.created));
    let mut tx = crate::store::begin(pool)
        .await
        .context("opening the write transaction")?;
    let report = record_observations(
        &mut tx,
        &settings.job,
        settings.unverifiable_cycles,
        &mut observations,
    )
    .await?;
    // After recording: a row demoted there (it changed while Stripe was
    // asked) holds the position like one Stripe did not answer for.
    let mut hold = plan.hold;
    hold_unanswered(&mut hold, &rules, &named, &orphan_reads, &observations);
    let covered_until = hold.map_or(listed_at, |h| h.min(listed_at));
    let orphans = orphans::record(&mut tx, &plan.with_rows, &orphan_reads).await?;
    let to = Advance {
        covered_until,
        newest_event: newest,
    };
    if !events_position::advance(&mut tx, job, &lease.owner, lease.ttl_seconds, &to).await? {
        tx.rollback().await.context("rolling back the lost run")?;
        return Err(RunError::ConcurrentRun { job: job.clone() }.into());
    }
    tx.commit().await.context("committing the events run")?;
    for o in &observations {
        summary.verdicts.add(o.decision.verdict);
    }
    summary.findings_created = report.findings_created + orphans.created;
    summary.missing_locally_created = orphans.created;
    summary.commands_enqueued = report.commands_enqueued;
    summary.findings_cleared = report.findings_cleared + orphans.cleared;
    summary.writes_refused = report.writes_refused;
    summary.covered_until = Some(covered_until);
    Ok(())
}

/// Rows and orphans read concurrently under the gateway's shared limiter.
async fn read_all(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    rows: Vec<crate::store::payments::PaymentRow>,
    orphans: &[crate::stripe::PaymentIntentId],
    now: DateTime<Utc>,
) -> Result<(Vec<Observation>, Vec<OrphanRead>), RunError> {
    let key = settings.events.orphan_metadata_key.as_deref();
    let (observed, orphans) = tokio::join!(
        observe_all(pool, gateway, rows, settings, now),
        orphans::read(gateway, orphans, key, settings.max_in_flight)
    );
    Ok((observed?, orphans?))
}

/// Events whose PaymentIntent was not settled by this run are read again by
/// the next one (within the hold limit, `hold_back`: grace plus about an
/// hour, so a PaymentIntent that always fails cannot stall the feed; after
/// that the scan covers its row): PaymentIntents without a row that Stripe
/// did not answer for, and rows Stripe did not answer for (or whose money it
/// could not prove) or that changed while it was asked.
fn hold_unanswered(
    hold: &mut Option<DateTime<Utc>>,
    rules: &PlanRules,
    named: &[&PaymentIntentEvent],
    orphans: &[OrphanRead],
    rows: &[Observation],
) {
    let created: HashMap<&str, DateTime<Utc>> = named
        .iter()
        .map(|e| (e.payment_intent.as_str(), e.created))
        .collect();
    let unsettled_orphans = orphans
        .iter()
        .filter(|o| o.unverifiable())
        .map(|o| o.payment_intent.as_str());
    let unsettled_rows = rows
        .iter()
        .filter(|o| o.asked_stripe && o.observed.is_none() && o.decision.kind.is_none())
        .filter_map(|o| o.payment_intent.as_deref());
    for pi in unsettled_orphans.chain(unsettled_rows) {
        if let Some(c) = created.get(pi) {
            hold_back(hold, rules, *c);
        }
    }
}

/// The lease for the listing: the slowest batch the settings allow, plus a
/// second per page at the rate limit.
async fn take_lease(
    pool: &PgPool,
    settings: &JobSettings,
    job: &str,
) -> Result<Lease, EventsError> {
    let mut lease = Lease::new(settings, LeaseTable::EventsPosition, job);
    lease.ttl_seconds +=
        f64::from(settings.events.max_pages) / f64::from(settings.rate_limit_rps.max(1));
    Ok(lease.take(pool).await?)
}

/// Extends the lease to cover `reads` Stripe reads at the rate limit (twice
/// over), before they start; [`RunError::ConcurrentRun`] when it was lost.
async fn renew_for_reads(
    pool: &PgPool,
    settings: &JobSettings,
    lease: &Lease,
    reads: usize,
) -> Result<(), EventsError> {
    let ttl = lease.ttl_seconds + 2.0 * reads as f64 / f64::from(settings.rate_limit_rps.max(1));
    let mut conn = pool.acquire().await.context("connecting")?;
    Ok(lease.renew_for(&mut conn, ttl).await?)
}
