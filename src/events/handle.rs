//! One slice of an events run: look up the rows of the PaymentIntents its
//! events name, re-read what the plan says, then record the findings and
//! commands, hold the PaymentIntents it could not decide for another read
//! (`reconciliation_events_retry`) and move the position to the slice's end,
//! in one transaction. A slice abandoned before that transaction (shutdown,
//! an error) writes nothing; the next run reads it again. The retries of
//! earlier runs are worked the same way, first, without moving the position.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::feed::SliceEvents;
use super::groups::EventsContext;
use super::orphans::{self, OrphanRead};
use super::plan::{self, young, Plan, PlanRules, RowAction};
use super::sessions;
use super::slices::{Slice, SLICE_EVENTS};
use super::summary::{EventsSummary, HOLD_BEYOND_GRACE};
use super::EventsError;
use crate::lease::Lease;
use crate::outcome::RunError;
use crate::read::{observe_all, stripe_reachable, Observation};
use crate::reconcile::{FindingKind, Verdict};
use crate::record::record_observations;
use crate::record::Recorded;
use crate::store::events_position::{self, Advance};
use crate::store::events_retry::{self, Held, HoldReason};
use crate::store::payments::{self, MoneyColumns, PaymentByIntent, PaymentRow};
use crate::store::retry;
use crate::store::{findings, Context};
use crate::stripe::{AccountId, PaymentIntentEvent, PaymentIntentId};

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
    /// PaymentIntents held by earlier runs: the position stays; Stripe's
    /// answers are abandoned (nothing written) at `until`.
    Retry { until: Option<Instant> },
}

/// How a batch of events ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Worked {
    /// Committed.
    Done,
    /// The held PaymentIntents' time was up before Stripe answered: nothing
    /// written, they stay held.
    OutOfTime,
}

/// The most PaymentIntents held by earlier runs read again per run, before
/// the feed (about five slices' worth).
pub const RETRIES_PER_RUN: usize = 500;

/// The held PaymentIntents' share of a run: a third of its page budget and
/// of its deadline; the rest goes to new events (issue 30).
pub const HELD_SHARE_DIVISOR: u32 = 3;

/// Held PaymentIntents read again per step (one commit each), oldest first:
/// a slice's worth.
pub const HELD_PER_STEP: usize = SLICE_EVENTS;

/// The held PaymentIntents one run reads again: a third of
/// `RECONCILER_EVENTS_MAX_PAGES` pages' worth (a page names up to
/// [`SLICE_EVENTS`] PaymentIntents), at least one, at most
/// [`RETRIES_PER_RUN`].
pub fn held_limit(max_pages: u32) -> usize {
    let pages = (max_pages / HELD_SHARE_DIVISOR) as usize;
    pages.saturating_mul(SLICE_EVENTS).clamp(1, RETRIES_PER_RUN)
}

/// When the held PaymentIntents' time is up: a third of
/// `RECONCILER_RUN_DEADLINE_SECONDS` after the run's start (`None`: no
/// deadline, only [`held_limit`] bounds them).
fn held_until(ctx: &EventsContext<'_>) -> Option<Instant> {
    let share = ctx.settings.scan.run.run_deadline? / HELD_SHARE_DIVISOR;
    ctx.clock.started().checked_add(share)
}

/// The events job's lease: [`crate::lifecycle::run_once`] takes it before the
/// body, so a body without one was never given it to hold (a lost run).
fn lease_of<'c>(ctx: &'c EventsContext<'_>, job: &str) -> Result<&'c Lease, EventsError> {
    ctx.lease.as_ref().ok_or_else(|| {
        EventsError::from(RunError::ConcurrentRun {
            job: job.to_owned(),
        })
    })
}

/// Reads again the PaymentIntents earlier runs could not decide, within
/// their share of the run ([`held_limit`], `held_until`): least recently
/// read first (oldest event among equals), [`HELD_PER_STEP`] at a time, each
/// step committed like a slice without moving the position, after dropping
/// those whose event is older than the hold limit (the scan covers their
/// rows; each is logged). A step the share's end interrupts writes nothing:
/// its PaymentIntents stay held, first in line next run. Nothing held is
/// ever dropped for want of time.
///
/// # Errors
/// As [`slice`](fn@slice).
#[tracing::instrument(name = "events.retries", skip_all)]
pub async fn retries(
    ctx: &EventsContext<'_>,
    progress: &mut Progress,
    summary: &mut EventsSummary,
) -> Result<(), EventsError> {
    let job = summary.job.clone();
    let limit = held_limit(ctx.settings.events.max_pages);
    let until = held_until(ctx);
    let (due, more) = {
        // In a transaction, as every statement of the job: behind a pooler
        // in transaction mode a statement outside one may meet another
        // server connection between its parse and its execution.
        let mut tx = crate::store::begin(ctx.pool)
            .await
            .context("starting a transaction")?;
        let hold_limit = ctx.settings.scan.run.grace + HOLD_BEYOND_GRACE;
        let expired = events_retry::expire(&mut tx, &job, hold_limit).await?;
        for (pi, reason, attempts) in &expired {
            tracing::warn!(payment_intent = %pi, reason = %reason, attempts, "an event still undecided after grace + 1 h: no more events reads for this PaymentIntent; the scan covers its row");
        }
        summary.retries_expired += expired.len() as u64;
        let mut due = events_retry::due(&mut tx, &job, limit.saturating_add(1)).await?;
        tx.commit().await.context("committing")?;
        let more = due.len() > limit;
        due.truncate(limit);
        (due, more)
    };
    summary.held_share_reached = more;
    // One pass per feed (an orphan's read carries its account's header),
    // in steps.
    let mut by_account: Vec<(Option<AccountId>, Vec<PaymentIntentEvent>)> = Vec::new();
    for (account, event) in due {
        let open = by_account
            .iter_mut()
            .rev()
            .find(|(a, events)| *a == account && events.len() < HELD_PER_STEP);
        match open {
            Some((_, events)) => events.push(event),
            None => by_account.push((account, vec![event])),
        }
    }
    for (account, events) in by_account {
        if until.is_some_and(|u| Instant::now() >= u) {
            summary.held_share_reached = true;
            break;
        }
        // Newest first, as a slice holds them.
        let read = SliceEvents {
            events: events.into_iter().rev().collect(),
            ..SliceEvents::default()
        };
        let feed = Feed {
            account: account.as_ref(),
            source: Source::Retry { until },
        };
        if work(ctx, feed, read, progress, summary).await? == Worked::OutOfTime {
            summary.held_share_reached = true;
            break;
        }
    }
    if summary.held_share_reached {
        tracing::info!(read = summary.retries_read, limit, "the held PaymentIntents' share of the run (a third of its pages and of its deadline) is used up: the rest stay held, least recently read first next run; the feed gets the rest of the run");
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

/// Handles one slice read whole from `account`'s feed (`None`: the
/// platform's) and commits it with the position at the slice's end; its
/// PaymentIntents that could not be decided are held for the next runs.
///
/// # Errors
/// [`RunError::Interrupted`] on shutdown before the commit (nothing of the
/// slice is written), the scan's guards ([`RunError`]) otherwise.
#[tracing::instrument(name = "events.slice", skip_all, fields(gte = slice.gte, lt = slice.lt, events = read.len()))]
pub async fn slice(
    ctx: &EventsContext<'_>,
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
    work(ctx, feed, read, progress, summary).await.map(|_| ())
}

/// The PaymentIntents a batch of events names, their rows and what to do
/// with each: phase 1 of [`work`].
struct Looked<'e> {
    /// The events still to handle, one per PaymentIntent.
    named: Vec<&'e PaymentIntentEvent>,
    /// Their PaymentIntent ids.
    ids: Vec<&'e str>,
    /// Their rows in `payments` (this job's partition).
    rows: Vec<PaymentByIntent>,
    /// What to do with each row and PaymentIntent.
    plan: Plan,
    /// The rules the plan was made with.
    rules: PlanRules,
}

/// What Stripe said: phase 2 of [`work`].
struct Answers {
    observations: Vec<Observation>,
    orphan_reads: Vec<OrphanRead>,
    /// Stripe reads planned (rows and orphans).
    reads: usize,
}

/// What committing a batch wrote: phase 3 of [`work`].
struct Written {
    report: Recorded,
    orphans: orphans::Recorded,
    held: Vec<(String, HoldReason)>,
    to_hold: usize,
    covered_until: Option<DateTime<Utc>>,
}

/// One batch of events: look the rows up, ask Stripe with no transaction
/// open, commit everything with the feed's position, count it.
async fn work(
    ctx: &EventsContext<'_>,
    feed: Feed<'_>,
    read: SliceEvents,
    progress: &mut Progress,
    summary: &mut EventsSummary,
) -> Result<Worked, EventsError> {
    let lease = lease_of(ctx, &summary.job)?;
    let sessions = sessions::look_up(ctx, &read.sessions, &progress.handled).await?;
    let mut events: Vec<PaymentIntentEvent> = read
        .events
        .iter()
        .filter(|e| !sessions.payment_intents.contains(e.payment_intent.as_str()))
        .cloned()
        .collect();
    events.extend(sessions.as_payment_intents);
    let collapsed = plan::collapse(&events);
    let looked = look_up(ctx, &collapsed, progress).await?;
    let Some(mut answers) = ask_stripe(ctx, lease, feed, &looked, sessions.rows).await? else {
        return Ok(Worked::OutOfTime);
    };
    let job = summary.job.clone();
    let written = write(ctx, lease, feed, &read, &looked, &mut answers, &job).await?;
    progress
        .handled
        .extend(looked.plan.read_or_held(&looked.rows, &written.held));
    progress.handled.extend(sessions.handled);
    progress.handled.extend(sessions.payment_intents);
    tally(summary, feed, &read, &looked, &answers, &written);
    Ok(Worked::Done)
}

/// Phase 1: the rows, by index lookup, and the orphans already open; then
/// the plan.
async fn look_up<'e>(
    ctx: &EventsContext<'_>,
    collapsed: &'e [PaymentIntentEvent],
    progress: &Progress,
) -> Result<Looked<'e>, EventsError> {
    let settings = ctx.settings;
    let mut named: Vec<&PaymentIntentEvent> = collapsed
        .iter()
        .filter(|e| !progress.handled.contains(e.payment_intent.as_str()))
        .collect();
    let mut ids: Vec<&str> = named.iter().map(|e| e.payment_intent.as_str()).collect();
    let columns = MoneyColumns::of(settings.scan.schema, settings.scan.facts);
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("opening the lookup")?;
    let rows =
        payments::by_payment_intents(&mut tx, &ids, settings.scan.run.grace, columns).await?;
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
    let open_orphans: HashSet<String> = findings::open_for_intents(&mut tx, &ids, &kind)
        .await?
        .into_iter()
        .collect();
    tx.commit().await.context("closing the lookup")?;
    let rules = PlanRules {
        now: Utc::now(),
        grace: settings.scan.run.grace,
        hold_limit: settings.scan.run.grace + HOLD_BEYOND_GRACE,
        orphan_metadata_key: settings.events.orphan_metadata_key.clone(),
    };
    let plan = plan::plan(&named, &rows, &open_orphans, &rules);
    Ok(Looked {
        named,
        ids,
        rows,
        plan,
        rules,
    })
}

/// Phase 2: Stripe, with no transaction open, under a lease long enough for
/// it; the outage rule; a shutdown abandons the batch, and so does the end
/// of the held PaymentIntents' time (`None`: nothing to write).
/// `session_rows` are the rows judged by their Checkout Session that the
/// batch's session events name (issue 32), read beside the plan's.
async fn ask_stripe(
    ctx: &EventsContext<'_>,
    lease: &Lease,
    feed: Feed<'_>,
    looked: &Looked<'_>,
    session_rows: Vec<PaymentRow>,
) -> Result<Option<Answers>, EventsError> {
    let plan = &looked.plan;
    let reads = plan.count(RowAction::Retrieve) + plan.orphan_reads.len() + session_rows.len();
    renew_for_reads(ctx, lease, reads).await?;
    let to_read: Vec<_> = plan
        .rows
        .iter()
        .filter(|(_, a)| *a == RowAction::Retrieve)
        .map(|(i, _)| looked.rows[*i].row.clone())
        .chain(session_rows)
        .collect();
    let now = looked.rules.now;
    let until = match feed.source {
        Source::Retry { until: Some(u) } => tokio::time::Instant::from_std(u),
        // Never: a slice's reads end with its answers.
        _ => tokio::time::Instant::now() + Duration::from_secs(86_400 * 365),
    };
    let (observations, orphan_reads) = tokio::select! {
        biased;
        () = ctx.shutdown.cancelled() => return Err(RunError::Interrupted.into()),
        () = tokio::time::sleep_until(until) => return Ok(None),
        read = read_all(ctx, to_read, feed.account, &plan.orphan_reads, now) => read?,
    };
    let asked = observations.iter().filter(|o| o.asked_stripe).count() + orphan_reads.len();
    let failed = observations
        .iter()
        .filter(|o| o.asked_stripe && o.decision.verdict == Verdict::Unverifiable)
        .count()
        + orphan_reads.iter().filter(|o| o.unverifiable()).count();
    stripe_reachable(ctx.gateway, asked, failed).await?;
    if ctx.shutdown.is_cancelled() {
        return Err(RunError::Interrupted.into());
    }
    Ok(Some(Answers {
        observations,
        orphan_reads,
        reads,
    }))
}

/// [`write_once`], run again from its start when another job on the same
/// rows (a partition's scan, another events job) won a race with it (a
/// deadlock or a serialization failure, [`retry::again`], issue 30): from
/// the answers phase 2 got, so Stripe is not asked again. `answers` ends as
/// the committed attempt left it.
async fn write(
    ctx: &EventsContext<'_>,
    lease: &Lease,
    feed: Feed<'_>,
    read: &SliceEvents,
    looked: &Looked<'_>,
    answers: &mut Answers,
    job: &str,
) -> Result<Written, EventsError> {
    let mut attempt = 1;
    loop {
        let observations = answers.observations.clone();
        match write_once(ctx, lease, feed, read, looked, answers, job).await {
            Err(e) if retry::again(&e, attempt, "committing the events slice").await => {
                answers.observations = observations;
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// Phase 3: record, hold what could not be decided, and move the position
/// to the slice's end, in one transaction; [`RunError::ConcurrentRun`]
/// (nothing written) when the lease was lost.
async fn write_once(
    ctx: &EventsContext<'_>,
    lease: &Lease,
    feed: Feed<'_>,
    read: &SliceEvents,
    looked: &Looked<'_>,
    answers: &mut Answers,
    job: &str,
) -> Result<Written, EventsError> {
    let settings = ctx.settings;
    let (observations, orphan_reads) = (&mut answers.observations, &answers.orphan_reads);
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("opening the write transaction")?;
    let report = record_observations(
        &mut tx,
        crate::record::Target {
            outbox: settings.scan.outbox,
            key: &settings.scan.facts.key,
        },
        &settings.scan.run.job,
        settings.scan.run.unverifiable_cycles,
        observations,
        &settings.scan.facts.times,
    )
    .await?;
    let (held, to_hold, settled) = holds(looked, orphan_reads, observations);
    events_retry::hold(&mut tx, job, feed.account, &to_hold).await?;
    events_retry::settle(&mut tx, job, &settled).await?;
    let orphans = orphans::record(&mut tx, &looked.plan.with_rows, orphan_reads).await?;
    let (covered_until, newest_event) = match feed.source {
        Source::Slice(slice) => (Some(slice.end()), read.newest()),
        Source::Retry { .. } => (None, None),
    };
    let to = Advance {
        covered_until,
        newest_event,
    };
    if !advance(&mut tx, lease, feed.account, job, &to).await? {
        tx.rollback().await.context("rolling back the lost run")?;
        return Err(RunError::ConcurrentRun {
            job: job.to_owned(),
        }
        .into());
    }
    tx.commit().await.context("committing the slice")?;
    let to_hold = to_hold.len();
    Ok(Written {
        report,
        orphans,
        held,
        to_hold,
        covered_until,
    })
}

/// After recording: what is held for the next runs (the plan's, and a row
/// demoted while Stripe was asked, held like one Stripe did not answer
/// for), those of the batch's events, and the PaymentIntents settled.
fn holds<'e>(
    looked: &Looked<'e>,
    orphan_reads: &[OrphanRead],
    observations: &[Observation],
) -> (Vec<(String, HoldReason)>, Vec<Held<'e>>, Vec<&'e str>) {
    let mut held = looked.plan.held.clone();
    hold_unanswered(
        &mut held,
        &looked.rules,
        &looked.named,
        orphan_reads,
        observations,
    );
    let by_intent: HashMap<&str, &'e PaymentIntentEvent> = looked
        .named
        .iter()
        .map(|e| (e.payment_intent.as_str(), *e))
        .collect();
    let to_hold: Vec<Held<'e>> = held
        .iter()
        .filter_map(|(pi, reason)| {
            by_intent.get(pi.as_str()).map(|event| Held {
                event,
                reason: *reason,
            })
        })
        .collect();
    let settled: Vec<&'e str> = looked
        .ids
        .iter()
        .copied()
        .filter(|pi| !held.iter().any(|(h, _)| h == pi))
        .collect();
    (held, to_hold, settled)
}

/// Moves the feed's position (the platform's or `account`'s) with the
/// lease held; `false` when another run holds it.
async fn advance(
    tx: &mut sqlx::PgConnection,
    lease: &Lease,
    account: Option<&AccountId>,
    job: &str,
    to: &Advance<'_>,
) -> Result<bool, EventsError> {
    let (owner, ttl) = (&lease.owner, lease.ttl_seconds);
    Ok(match account {
        None => events_position::advance(tx, job, owner, ttl, to).await?,
        Some(account) => {
            events_position::advance_account(tx, job, owner, ttl, account.as_str(), to).await?
        }
    })
}

/// Phase 4: what the batch did, counted once it is committed.
fn tally(
    summary: &mut EventsSummary,
    feed: Feed<'_>,
    read: &SliceEvents,
    looked: &Looked<'_>,
    answers: &Answers,
    written: &Written,
) {
    let plan = &looked.plan;
    let (reads, observations) = (answers.reads, &answers.observations);
    match feed.source {
        Source::Slice(_) => {
            summary.slices += 1;
            summary.events_read += read.len() as u64;
        }
        Source::Retry { .. } => summary.retries_read += looked.named.len() as u64,
    }
    summary.payment_intents_held += written.to_hold as u64;
    summary.events_skipped += read.skipped as u64;
    summary.events_without_payment_intent += read.without_payment_intent as u64;
    summary.payment_intents += looked.named.len() as u64;
    summary.payment_intents_retrieved += reads as u64;
    summary.rows_confirmed += plan.count(RowAction::Confirmed) as u64;
    let in_grace = plan.count(RowAction::InGrace);
    summary.rows_in_grace += in_grace as u64;
    summary.orphans_foreign += plan.foreign as u64;
    for _ in 0..in_grace {
        summary.verdicts.add(Verdict::InFlight);
    }
    for o in observations {
        summary.verdicts.add(o.decision.verdict);
    }
    let (report, orphans) = (&written.report, &written.orphans);
    summary.findings_created += report.findings_created + orphans.created;
    summary.missing_locally_created += orphans.created;
    summary.commands_enqueued += report.commands_enqueued;
    summary.writes_refused += report.writes_refused;
    summary.findings_cleared += report.findings_cleared + orphans.cleared;
    // The platform's feed: the connected accounts' positions are their own.
    if written.covered_until.is_some() && feed.account.is_none() {
        summary.covered_until = written.covered_until;
    }
}

/// Rows (each on its own account, from its account column) and orphans (on
/// the feed's `account`) read concurrently under the gateway's shared limiter.
async fn read_all(
    ctx: &EventsContext<'_>,
    rows: Vec<PaymentRow>,
    account: Option<&AccountId>,
    orphans: &[PaymentIntentId],
    now: DateTime<Utc>,
) -> Result<(Vec<Observation>, Vec<OrphanRead>), RunError> {
    let (pool, gateway, settings) = (ctx.pool, ctx.gateway, &ctx.settings);
    let key = settings.events.orphan_metadata_key.as_deref();
    let reads = settings.read();
    let (observed, orphans) = tokio::join!(
        observe_all(pool, gateway, rows, &reads, now),
        orphans::read(
            gateway,
            account,
            orphans,
            key,
            settings.scan.stripe.max_in_flight
        )
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
    ctx: &EventsContext<'_>,
    lease: &Lease,
    reads: usize,
) -> Result<(), EventsError> {
    let rps = ctx.settings.scan.stripe.rate_limit_rps.max(1);
    let ttl = lease.ttl_seconds + 2.0 * reads as f64 / f64::from(rps);
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("starting a transaction")?;
    lease.renew_for(&mut tx, ttl).await?;
    tx.commit().await.context("committing")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_payment_intents_get_a_third_of_the_page_budget_at_most_500() {
        // RECONCILER_EVENTS_MAX_PAGES 100 (default): 3,333 by pages, 500 at most.
        assert_eq!(held_limit(100), 500);
        // 9 pages: 3 pages' worth.
        assert_eq!(held_limit(9), 300);
        // 1 or 2 pages: still one, never none.
        assert_eq!((held_limit(1), held_limit(2)), (1, 1));
    }
}
