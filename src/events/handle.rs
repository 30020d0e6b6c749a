//! One slice of an events run: look up the rows of the PaymentIntents its
//! events name, re-read what the plan says, then record the findings and
//! commands, hold the PaymentIntents it could not decide for another read
//! (`reconciliation_events_retry`) and move the position to the slice's end,
//! in one transaction. A slice abandoned before that transaction (shutdown,
//! an error) writes nothing; the next run reads it again. The retries of
//! earlier runs are worked the same way, first, without moving the position.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::feed::SliceEvents;
use super::orphans::{self, OrphanRead};
use super::plan::{self, young, PlanRules, RowAction};
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
use crate::store::events_retry::{self, Held, HoldReason};
use crate::store::payments::{self, MoneyColumns, PaymentRow};
use crate::store::{findings, Context};
use crate::stripe::{AccountId, PaymentIntentEvent, PaymentIntentId, StripeGateway};

/// What a run carries from one slice to the next.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// PaymentIntents read from Stripe (or held for another read) by a
    /// committed slice of this run: a later event about one of them needs no
    /// second read (the read came after every event of the window). One
    /// decided without a read (a row confirmed after the earlier event, no
    /// row and not succeeded) is planned again with the later event.
    handled: HashSet<String>,
}

/// What a batch of events is, and what committing it does to the position.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// A slice of the feed: the position moves to its end.
    Slice(Slice),
    /// PaymentIntents held by earlier runs: the position stays.
    Retry,
}

/// The most PaymentIntents held by earlier runs read again per run, before
/// the feed (about one slice's worth).
pub const RETRIES_PER_RUN: usize = 500;

/// Reads again the PaymentIntents earlier runs could not decide (oldest
/// event first, at most [`RETRIES_PER_RUN`]), after dropping those whose
/// event is older than the hold limit (the scan covers their rows; each is
/// logged). Committed like a slice, without moving the position.
///
/// # Errors
/// As [`slice`].
#[tracing::instrument(name = "events.retries", skip_all)]
pub async fn retries(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    lease: &Lease,
    shutdown: &CancellationToken,
    progress: &mut Progress,
    summary: &mut EventsSummary,
) -> Result<(), EventsError> {
    let job = summary.job.clone();
    let due = {
        // In a transaction, as every statement of the job: behind a pooler
        // in transaction mode a statement outside one may meet another
        // server connection between its parse and its execution.
        let mut tx = crate::store::begin(pool)
            .await
            .context("starting a transaction")?;
        let expired =
            events_retry::expire(&mut tx, &job, settings.grace + HOLD_BEYOND_GRACE).await?;
        for (pi, reason, attempts) in &expired {
            tracing::warn!(payment_intent = %pi, reason = %reason, attempts, "an event still undecided after grace + 1 h: no more events reads for this PaymentIntent; the scan covers its row");
        }
        summary.retries_expired += expired.len() as u64;
        let due = events_retry::due(&mut tx, &job, RETRIES_PER_RUN).await?;
        tx.commit().await.context("committing")?;
        due
    };
    // One pass per feed: an orphan's read carries its account's header.
    let mut by_account: Vec<(Option<AccountId>, Vec<PaymentIntentEvent>)> = Vec::new();
    for (account, event) in due {
        match by_account.iter_mut().find(|(a, _)| *a == account) {
            Some((_, events)) => events.push(event),
            None => by_account.push((account, vec![event])),
        }
    }
    for (account, events) in by_account {
        let read = SliceEvents {
            events,
            skipped: 0,
            without_payment_intent: 0,
        };
        let feed = Feed {
            account: account.as_ref(),
            source: Source::Retry,
        };
        work(
            pool, gateway, settings, lease, shutdown, feed, read, progress, summary,
        )
        .await?;
    }
    Ok(())
}

/// A batch of events: whose feed it came from, and what committing it does
/// to that feed's position.
#[derive(Debug, Clone, Copy)]
struct Feed<'a> {
    /// The connected account whose feed it is (`None`: the platform's).
    account: Option<&'a AccountId>,
    source: Source,
}

/// Handles one slice read whole and commits it with the position at the
/// slice's end; its PaymentIntents that could not be decided are held for
/// the next runs.
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
    account: Option<&AccountId>,
    slice: Slice,
    read: SliceEvents,
    progress: &mut Progress,
    summary: &mut EventsSummary,
) -> Result<(), EventsError> {
    let feed = Feed {
        account,
        source: Source::Slice(slice),
    };
    work(
        pool, gateway, settings, lease, shutdown, feed, read, progress, summary,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn work(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    lease: &Lease,
    shutdown: &CancellationToken,
    feed: Feed<'_>,
    read: SliceEvents,
    progress: &mut Progress,
    summary: &mut EventsSummary,
) -> Result<(), EventsError> {
    let job = summary.job.clone();
    let source = feed.source;
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
        read = read_all(pool, gateway, settings, to_read, feed.account, &plan.orphan_reads, now) => read?,
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

    // 3. Record, hold what could not be decided, and move the position to
    //    the slice's end, in one transaction.
    let newest = match source {
        Source::Slice(_) => read.events.first().map(|e| (e.id.as_str(), e.created)),
        Source::Retry => None,
    };
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
    // asked) is held like one Stripe did not answer for.
    let mut held = plan.held.clone();
    hold_unanswered(&mut held, &rules, &named, &orphan_reads, &observations);
    let by_intent: HashMap<&str, &PaymentIntentEvent> = named
        .iter()
        .map(|e| (e.payment_intent.as_str(), *e))
        .collect();
    let to_hold: Vec<Held<'_>> = held
        .iter()
        .filter_map(|(pi, reason)| {
            by_intent.get(pi.as_str()).map(|event| Held {
                event,
                reason: *reason,
            })
        })
        .collect();
    let settled: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|pi| !held.iter().any(|(h, _)| h == pi))
        .collect();
    events_retry::hold(&mut tx, &job, feed.account, &to_hold).await?;
    events_retry::settle(&mut tx, &job, &settled).await?;
    let orphans = orphans::record(&mut tx, &plan.with_rows, &orphan_reads).await?;
    let covered_until = match source {
        Source::Slice(slice) => Some(slice.end()),
        Source::Retry => None,
    };
    let to = Advance {
        covered_until,
        newest_event: newest,
    };
    let held_lease = match feed.account {
        None => {
            events_position::advance(&mut tx, &job, &lease.owner, lease.ttl_seconds, &to).await?
        }
        Some(account) => {
            events_position::advance_account(
                &mut tx,
                &job,
                &lease.owner,
                lease.ttl_seconds,
                account.as_str(),
                &to,
            )
            .await?
        }
    };
    if !held_lease {
        tx.rollback().await.context("rolling back the lost run")?;
        return Err(RunError::ConcurrentRun { job }.into());
    }
    tx.commit().await.context("committing the slice")?;

    // 4. What the run did, counted once the slice is committed.
    progress.handled.extend(plan.read_or_held(&rows, &held));
    match source {
        Source::Slice(_) => {
            summary.slices += 1;
            summary.events_read += read.events.len() as u64;
        }
        Source::Retry => summary.retries_read += named.len() as u64,
    }
    summary.payment_intents_held += to_hold.len() as u64;
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
    // The platform's feed: the connected accounts' positions are their own.
    if covered_until.is_some() && feed.account.is_none() {
        summary.covered_until = covered_until;
    }
    Ok(())
}

/// Rows (each on its own account, from its account column) and orphans (on
/// the feed's `account`) read concurrently under the gateway's shared limiter.
async fn read_all(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &JobSettings,
    rows: Vec<PaymentRow>,
    account: Option<&AccountId>,
    orphans: &[PaymentIntentId],
    now: DateTime<Utc>,
) -> Result<(Vec<Observation>, Vec<OrphanRead>), RunError> {
    let key = settings.events.orphan_metadata_key.as_deref();
    let (observed, orphans) = tokio::join!(
        observe_all(pool, gateway, rows, settings, now),
        orphans::read(gateway, account, orphans, key, settings.max_in_flight)
    );
    Ok((observed?, orphans?))
}

/// PaymentIntents not settled by this read are held for the next runs
/// (while their event is younger than the hold limit, [`young`]: grace plus
/// about an hour, so a PaymentIntent that always fails cannot be read again
/// for ever; after that the scan covers its row): PaymentIntents without a
/// row that Stripe did not answer for, and rows Stripe did not answer for (or
/// whose money it could not prove) or that changed while it was asked.
fn hold_unanswered(
    held: &mut Vec<(String, HoldReason)>,
    rules: &PlanRules,
    named: &[&PaymentIntentEvent],
    orphans: &[OrphanRead],
    rows: &[Observation],
) {
    let created: HashMap<&str, DateTime<Utc>> = named
        .iter()
        .map(|e| (e.payment_intent.as_str(), e.created))
        .collect();
    let unanswered_orphans = orphans
        .iter()
        .filter(|o| o.unverifiable())
        .map(|o| (o.payment_intent.as_str(), HoldReason::StripeUnanswered));
    let unsettled_rows = rows
        .iter()
        .filter(|o| o.asked_stripe && o.observed.is_none() && o.decision.kind.is_none())
        .filter_map(|o| {
            let reason = if o.decision.verdict == Verdict::InFlight {
                HoldReason::ChangedWhileAsked
            } else {
                HoldReason::StripeUnanswered
            };
            o.payment_intent.as_deref().map(|pi| (pi, reason))
        });
    for (pi, reason) in unanswered_orphans.chain(unsettled_rows) {
        let is_young = created.get(pi).is_some_and(|c| young(rules, *c));
        if is_young && !held.iter().any(|(h, _)| h == pi) {
            held.push((pi.to_owned(), reason));
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
    let mut tx = crate::store::begin(pool)
        .await
        .context("starting a transaction")?;
    lease.renew_for(&mut tx, ttl).await?;
    tx.commit().await.context("committing")?;
    Ok(())
}
