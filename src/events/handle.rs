//! One slice of an events run: look up the rows of the PaymentIntents its
//! events name, re-read what the plan says, then record the findings and
//! commands and move the position to the slice's end in one transaction. A
//! slice abandoned before that transaction (shutdown, an error) writes
//! nothing; the next run reads it again.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::feed::SliceEvents;
use super::orphans::{self, OrphanRead};
use super::plan::{self, hold_back, PlanRules, RowAction};
use super::run::{EventsSummary, HOLD_BEYOND_GRACE};
use super::slices::Slice;
use super::EventsError;
use crate::config::JobSettings;
use crate::lease::Lease;
use crate::outcome::RunError;
use crate::read::{observe_all, stripe_reachable, Observation};
use crate::reconcile::{FindingKind, Verdict};
use crate::record::record_observations;
use crate::store::events_position::{self, Advance};
use crate::store::payments::{self, MoneyColumns, PaymentRow};
use crate::store::{findings, Context};
use crate::stripe::{PaymentIntentEvent, PaymentIntentId, StripeGateway};

/// What a run carries from one slice to the next.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// PaymentIntents handled by a committed slice of this run: a later
    /// event about one of them needs no second read (the read came after
    /// every event of the window).
    handled: HashSet<String>,
    /// The oldest event of this run to read again next run: the position
    /// never moves past it, whatever later slices commit.
    hold: Option<DateTime<Utc>>,
}

/// Handles one slice read whole and commits it with the position it reached
/// (`covered_until` = the slice's end, or the oldest event held back).
///
/// # Errors
/// [`RunError::Interrupted`] on shutdown before the commit (nothing of the
/// slice is written), the scan's guards ([`RunError`]) otherwise.
#[allow(clippy::too_many_arguments)]
#[tracing::instrument(name = "events.slice", skip_all, fields(gte = slice.gte, lt = slice.lt, events = read.events.len()))]
pub async fn slice(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    lease: &Lease,
    shutdown: &CancellationToken,
    slice: Slice,
    read: SliceEvents,
    progress: &mut Progress,
    summary: &mut EventsSummary,
) -> Result<(), EventsError> {
    let job = summary.job.clone();
    let collapsed = plan::collapse(&read.events);
    let mut named: Vec<&PaymentIntentEvent> = collapsed
        .iter()
        .filter(|e| !progress.handled.contains(e.payment_intent.as_str()))
        .collect();

    // 1. The rows, by index lookup, and the orphans already open.
    let mut ids: Vec<&str> = named.iter().map(|e| e.payment_intent.as_str()).collect();
    let columns = MoneyColumns::of(settings);
    let (rows, open_orphans) = {
        let mut tx = crate::store::begin(pool)
            .await
            .context("opening the lookup")?;
        let rows = payments::by_payment_intents(&mut tx, &ids, settings.grace, columns).await?;
        // A PaymentIntent whose row is another partition's: not this job's
        // to re-read, and not an orphan (it has a row).
        let elsewhere: HashSet<String> = payments::held_elsewhere(&mut tx, &ids, columns.partition)
            .await?
            .into_iter()
            .filter(|pi| {
                !rows
                    .iter()
                    .any(|r| r.row.stripe_payment_intent_id.as_ref() == Some(pi))
            })
            .collect();
        if !elsewhere.is_empty() {
            tracing::info!(
                payment_intents = elsewhere.len(),
                "events name PaymentIntents whose rows are another partition's; left to that partition's job"
            );
            named.retain(|e| !elsewhere.contains(e.payment_intent.as_str()));
            ids.retain(|pi| !elsewhere.contains(*pi));
        }
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

    // 2. Stripe, with no transaction open, under a lease long enough for it.
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

    // 3. Record and move the position to the slice's end, in one transaction.
    let newest = read.events.first().map(|e| (e.id.as_str(), e.created));
    let mut tx = crate::store::begin(pool)
        .await
        .context("opening the write transaction")?;
    let report = record_observations(
        &mut tx,
        &settings.outbox,
        &settings.job,
        settings.unverifiable_cycles,
        &mut observations,
    )
    .await?;
    // After recording: a row demoted there (it changed while Stripe was
    // asked) holds the position like one Stripe did not answer for.
    let mut hold = match (progress.hold, plan.hold) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    hold_unanswered(&mut hold, &rules, &named, &orphan_reads, &observations);
    let covered_until = hold.map_or(slice.end(), |h| h.min(slice.end()));
    let orphans = orphans::record(&mut tx, &plan.with_rows, &orphan_reads).await?;
    let to = Advance {
        covered_until,
        newest_event: newest,
    };
    if !events_position::advance(&mut tx, &job, &lease.owner, lease.ttl_seconds, &to).await? {
        tx.rollback().await.context("rolling back the lost run")?;
        return Err(RunError::ConcurrentRun { job }.into());
    }
    tx.commit().await.context("committing the slice")?;

    // 4. What the run did, counted once the slice is committed.
    progress.hold = hold;
    progress
        .handled
        .extend(ids.iter().map(|pi| (*pi).to_owned()));
    summary.slices += 1;
    summary.events_read += read.events.len() as u64;
    summary.events_skipped += read.skipped as u64;
    summary.events_without_payment_intent += read.without_payment_intent as u64;
    summary.payment_intents += named.len() as u64;
    summary.payment_intents_retrieved += reads as u64;
    summary.rows_confirmed += plan.count(RowAction::Confirmed) as u64;
    let in_grace = plan.count(RowAction::InGrace);
    summary.rows_in_grace += in_grace as u64;
    summary.orphans_foreign += plan.foreign as u64;
    for _ in 0..in_grace {
        summary.verdicts.add(Verdict::InFlight);
    }
    for o in &observations {
        summary.verdicts.add(o.decision.verdict);
    }
    summary.findings_created += report.findings_created + orphans.created;
    summary.missing_locally_created += orphans.created;
    summary.commands_enqueued += report.commands_enqueued;
    summary.writes_refused += report.writes_refused;
    summary.findings_cleared += report.findings_cleared + orphans.cleared;
    summary.covered_until = Some(covered_until);
    Ok(())
}

/// Rows and orphans read concurrently under the gateway's shared limiter.
async fn read_all(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    rows: Vec<PaymentRow>,
    orphans: &[PaymentIntentId],
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
