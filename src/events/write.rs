//! Phase 3 of a batch of events: in one transaction, record what Stripe
//! said ([`crate::record`]), hold what could not be decided
//! (`reconciliation_events_retry`, [`super::held`]), record the orphans and
//! move the feed's position, with the lease held; retried from the answers
//! when another job on the same rows won a race.

use chrono::{DateTime, Utc};

use super::ask_stripe::Answers;
use super::feed::SliceEvents;
use super::groups::{job_name, lease_of, EventsContext};
use super::held::holds;
use super::lookup::Looked;
use super::orphans;
use super::seen::{feed_job, REMEMBERED};
use super::source::{Feed, Source};
use super::EventsError;
use crate::lease::Lease;
use crate::outcome::RunError;
use crate::record::{record_observations, Recorded};
use crate::store::events_position::{self, Advance};
use crate::store::events_retry::{self, HoldReason};
use crate::store::{events_seen, retry, Context};
use crate::stripe::AccountId;

/// What committing a batch wrote: phase 3 of a batch.
pub(super) struct Written {
    pub(super) report: Recorded,
    pub(super) orphans: orphans::Recorded,
    pub(super) held: Vec<(String, HoldReason)>,
    pub(super) to_hold: usize,
    pub(super) covered_until: Option<DateTime<Utc>>,
}

/// [`write_once`], run again from its start when another job on the same
/// rows (a partition's scan, another events job) won a race with it (a
/// deadlock or a serialization failure, [`retry::again`]): from
/// the answers phase 2 got, so Stripe is not asked again. `answers` ends as
/// the committed attempt left it.
pub(super) async fn write(
    ctx: &EventsContext<'_>,
    feed: Feed<'_>,
    read: &SliceEvents,
    looked: &Looked<'_>,
    answers: &mut Answers,
) -> Result<Written, EventsError> {
    let mut attempt = 1;
    loop {
        let observations = answers.observations.clone();
        match write_once(ctx, feed, read, looked, answers).await {
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
    feed: Feed<'_>,
    read: &SliceEvents,
    looked: &Looked<'_>,
    answers: &mut Answers,
) -> Result<Written, EventsError> {
    let settings = ctx.settings;
    let (lease, job) = (lease_of(ctx)?, job_name(ctx));
    let job = job.as_str();
    let (observations, orphan_reads) = (&mut answers.observations, &answers.orphan_reads);
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("opening the write transaction")?;
    let report = record_observations(&mut tx, settings.scan.record_target(), observations).await?;
    let (held, to_hold, settled) = holds(looked, orphan_reads, observations);
    events_retry::hold(&mut tx, job, feed.account, &to_hold).await?;
    events_retry::settle(&mut tx, job, &settled).await?;
    events_retry::renew(&mut tx, job, &looked.left_to_held).await?;
    let orphans = orphans::record(&mut tx, &looked.plan.with_rows, orphan_reads).await?;
    let (covered_until, newest_event, listing) = match feed.source {
        Source::Slice(slice, listing) => {
            remember(&mut tx, ctx, feed.account, read, slice.end()).await?;
            (Some(slice.end()), read.newest(), Some(listing))
        }
        Source::Retry { .. } => (None, None, None),
    };
    let to = Advance {
        covered_until,
        newest_event,
        listing,
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

/// Remembers the events of a slice committed up to `covered_until` as
/// handled by `account`'s feed (`None`: the platform's), so a re-read of the
/// overlap handles none of them twice (docs/events.md, "Events listed late").
async fn remember(
    tx: &mut sqlx::PgConnection,
    ctx: &EventsContext<'_>,
    account: Option<&AccountId>,
    read: &SliceEvents,
    covered_until: DateTime<Utc>,
) -> Result<(), EventsError> {
    let events: Vec<(&str, DateTime<Utc>)> = read
        .events
        .iter()
        .map(|e| (e.id.as_str(), e.created))
        .chain(read.sessions.iter().map(|e| (e.id.as_str(), e.created)))
        .collect();
    let job = feed_job(ctx, account);
    events_seen::remember(tx, &job, &events, covered_until, REMEMBERED).await?;
    Ok(())
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
