//! The subscriptions' events feed (docs/subscriptions.md, "Events"): with
//! `RECONCILER_SUBSCRIPTIONS_TABLE` set, `events` also reads
//! `customer.subscription.*` and the invoice events that name a
//! subscription, from a position of its own (`<job>-events`), a request set
//! apart from the PaymentIntents' (Stripe allows 20 `types[]` per request).
//! Each subscription named is read again (the payload's status is never
//! trusted) and every row naming it judged as the scan judges it; a
//! granting subscription no row names, older than the grace window, is
//! `subscription_missing_locally` (a customer paying for nothing).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::stream::{self, StreamExt};
use serde_json::json;

use super::groups::{SubscriptionsContext, Target};
use super::judge::{judge, stripe_values, Answer, Judged};
use super::record::write;
use crate::outcome::RunError;
use crate::reconcile::{FindingKind, Verdict};
use crate::store::events_position::{self, Advance};
use crate::store::subscriptions::read::{rows_naming, StoredSubscription};
use crate::store::subscriptions::record::{self, NewFinding};
use crate::store::Context;
use crate::stripe::{GatewayError, StripeSubscription, SubscriptionId};

/// How long an event naming a row in its grace window keeps the position
/// before it (seconds past the grace window): older, the row is left to the
/// scan (docs/subscriptions.md, "The job").
const HELD_PAST_GRACE: Duration = Duration::from_secs(3600);

/// Each run starts this far before the stored position: an event Stripe
/// lists a little late is still read (a re-read records nothing twice).
const OVERLAP: Duration = Duration::from_secs(300);

/// What one run of the feed did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FeedCounts {
    /// Events read.
    pub events_read: u64,
    /// Subscriptions they named, each read again.
    pub subscriptions: u64,
    /// Rows judged.
    pub rows_judged: u64,
    /// Rows changed within the grace window, left to a later read.
    pub rows_in_grace: u64,
    /// Subscriptions Stripe could not be asked about (the position stays).
    pub unverifiable: u64,
    /// Findings newly recorded.
    pub findings_created: u64,
    /// Repair commands enqueued.
    pub commands_enqueued: u64,
    /// Whether the feed stopped at `RECONCILER_EVENTS_MAX_PAGES`.
    pub truncated: bool,
}

/// Reads the feed from `feed_job`'s position and judges what it names.
///
/// # Errors
/// [`RunError`]: nothing of the run is committed.
pub async fn read_feed(
    ctx: &SubscriptionsContext<'_>,
    target: Target<'_>,
    (feed_job, events): (&str, &crate::config::EventsSettings),
) -> Result<FeedCounts, RunError> {
    let started = Utc::now();
    let mut counts = FeedCounts::default();
    let from = start(ctx, feed_job, events.lookback).await?;
    let (named, newest) = list_events(ctx, from, events.max_pages, &mut counts).await?;
    counts.subscriptions = named.len() as u64;
    let answers = ask(ctx, named.keys()).await?;
    counts.unverifiable = answers.values().filter(|a| a.is_none()).count() as u64;
    let covered = (!counts.truncated && counts.unverifiable == 0).then_some(started);
    let advance = Advance {
        covered_until: covered,
        newest_event: newest.as_ref().map(|(id, at)| (id.as_str(), *at)),
        listing: None,
    };
    let named = (&answers, &named);
    commit(ctx, target, (feed_job, &advance), named, &mut counts).await?;
    Ok(counts)
}

/// Where this run starts: the stored position less [`OVERLAP`], or
/// `lookback` ago on the first run (epoch seconds).
async fn start(
    ctx: &SubscriptionsContext<'_>,
    feed_job: &str,
    lookback: Duration,
) -> Result<i64, RunError> {
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("opening a transaction")?;
    let position = events_position::read(&mut tx, feed_job).await?;
    tx.commit().await.context("closing a transaction")?;
    let from = match position.and_then(|p| p.covered_until) {
        Some(at) => at - chrono::Duration::from_std(OVERLAP).unwrap_or_default(),
        None => Utc::now() - chrono::Duration::from_std(lookback).unwrap_or_default(),
    };
    Ok(from.timestamp())
}

/// The subscriptions the events since `from` name, and the newest event.
async fn list_events(
    ctx: &SubscriptionsContext<'_>,
    from: i64,
    max_pages: u32,
    counts: &mut FeedCounts,
) -> Result<(Named, Option<(String, DateTime<Utc>)>), RunError> {
    let mut named = Named::new();
    let mut newest = None;
    let mut after: Option<String> = None;
    for page_no in 0..max_pages.max(1) {
        let page = ctx
            .gateway
            .subscription_events(from, after.as_deref())
            .await
            .map_err(feed_error)?;
        for e in page.events {
            counts.events_read += 1;
            if newest.is_none() && page_no == 0 {
                newest = DateTime::from_timestamp(e.created, 0).map(|at| (e.id.clone(), at));
            }
            let earliest = named.entry(e.subscription).or_insert(e.created);
            *earliest = (*earliest).min(e.created);
        }
        match page.next_after {
            Some(next) => after = Some(next),
            None => return Ok((named, newest)),
        }
    }
    counts.truncated = true;
    Ok((named, newest))
}

fn feed_error(e: GatewayError) -> RunError {
    match e {
        e @ (GatewayError::Rejected { .. }
        | GatewayError::Misconfigured { .. }
        | GatewayError::Redirected { .. }) => RunError::StripeRejected(e),
        _ => RunError::StripeDown {
            failed: 1,
            asked: 1,
        },
    }
}

/// The subscriptions the events name, each with its earliest event's
/// `created` (epoch seconds).
type Named = HashMap<SubscriptionId, i64>;

/// Each subscription read again: `Some(Ok)` found, `Some(Err(()))` missing,
/// `None` unverifiable.
type Answers = HashMap<SubscriptionId, Option<Result<StripeSubscription, ()>>>;

async fn ask(
    ctx: &SubscriptionsContext<'_>,
    named: impl Iterator<Item = &SubscriptionId>,
) -> Result<Answers, RunError> {
    let in_flight = ctx.settings.stripe.max_in_flight.max(1) as usize;
    let read: Vec<(SubscriptionId, Result<StripeSubscription, GatewayError>)> =
        stream::iter(named.cloned())
            .map(|id| async move {
                let got = ctx.gateway.subscription_on(None, &id).await;
                (id, got)
            })
            .buffer_unordered(in_flight)
            .collect()
            .await;
    let mut out = Answers::new();
    for (id, got) in read {
        let answer = match got {
            Ok(s) => Some(Ok(s)),
            Err(GatewayError::NotFound { .. }) => Some(Err(())),
            Err(
                e @ (GatewayError::Rejected { .. }
                | GatewayError::Misconfigured { .. }
                | GatewayError::Redirected { .. }),
            ) => return Err(RunError::StripeRejected(e)),
            Err(e) => {
                tracing::warn!(subscription = %id, error = %e, "subscription unverifiable; the events position stays before it");
                None
            }
        };
        out.insert(id, answer);
    }
    Ok(out)
}

/// Phase 3: the rows naming the subscriptions judged and recorded, the
/// orphans recorded or cleared, the position moved; one transaction.
async fn commit(
    ctx: &SubscriptionsContext<'_>,
    target: Target<'_>,
    (feed_job, advance): (&str, &Advance<'_>),
    (answers, named): (&Answers, &Named),
    counts: &mut FeedCounts,
) -> Result<(), RunError> {
    let ids: Vec<String> = answers.keys().map(|id| id.as_str().to_owned()).collect();
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("opening a transaction")?;
    let rows = rows_naming(&mut tx, target.table, &ids, ctx.settings.run.grace).await?;
    let (judged, in_grace) = judge_rows(&rows, answers, target, counts);
    let advance = held_back(advance, &in_grace, named, ctx.settings.run.grace);
    counts.rows_judged = judged
        .iter()
        .filter(|j| j.verdict != Verdict::Unverifiable)
        .count() as u64;
    let refs: Vec<&Judged> = judged.iter().collect();
    let written = write(&mut tx, ctx.settings.outbox, target.job, &rows, &refs).await?;
    counts.findings_created += written.created;
    counts.commands_enqueued += written.enqueued;
    let named_by_rows: BTreeSet<&str> = rows
        .iter()
        .filter_map(|r| r.stripe_id.as_deref())
        .map(str::trim)
        .collect();
    counts.findings_created += orphans(
        &mut tx,
        target,
        answers,
        &named_by_rows,
        ctx.settings.run.grace,
    )
    .await?;
    let owner = ctx.lease.as_ref().map_or("", |l| l.owner.as_str());
    let ttl = ctx.lease.as_ref().map_or(300.0, |l| l.ttl_seconds);
    if !events_position::advance(&mut tx, feed_job, owner, ttl, &advance).await? {
        return Err(RunError::ConcurrentRun {
            job: feed_job.to_owned(),
        });
    }
    tx.commit()
        .await
        .context("committing the subscription events")?;
    Ok(())
}

/// `advance` with its `covered_until` kept at the earliest event naming a
/// row in its grace window (that row is judged by a later run), unless the
/// event is older than the grace window and [`HELD_PAST_GRACE`]: then the
/// row is left to the scan.
fn held_back<'a>(
    advance: &Advance<'a>,
    in_grace: &[SubscriptionId],
    named: &Named,
    grace: Duration,
) -> Advance<'a> {
    let mut out = advance.clone();
    let Some(covered) = advance.covered_until else {
        return out;
    };
    let oldest = covered - chrono::Duration::from_std(grace + HELD_PAST_GRACE).unwrap_or_default();
    let held = in_grace
        .iter()
        .filter_map(|id| named.get(id))
        .filter_map(|&at| DateTime::from_timestamp(at, 0))
        .filter(|&at| at >= oldest)
        .min();
    out.covered_until = Some(held.map_or(covered, |at| at.min(covered)));
    out
}

/// The rows naming an answered subscription, judged on its answer; rows
/// changed within the grace window are left to a later read (their
/// subscriptions returned).
fn judge_rows(
    rows: &[StoredSubscription],
    answers: &Answers,
    target: Target<'_>,
    counts: &mut FeedCounts,
) -> (Vec<Judged>, Vec<SubscriptionId>) {
    let now = Utc::now();
    let mut judged: Vec<Judged> = Vec::new();
    let mut in_grace = Vec::new();
    for row in rows {
        let Some((id, answer)) = row
            .stripe_id
            .as_deref()
            .and_then(|v| SubscriptionId::parse(v.trim()).ok())
            .and_then(|id| answers.get(&id).map(|a| (id, a)))
        else {
            continue;
        };
        if row.recently_changed {
            counts.rows_in_grace += 1;
            in_grace.push(id);
            continue;
        }
        let answer = match answer {
            Some(Ok(s)) => Answer::Found(s.facts.clone()),
            Some(Err(())) => Answer::Missing,
            None => Answer::Unverifiable("unverifiable".into()),
        };
        judged.push(judge(row, &answer, (target.table, target.settings), now));
    }
    (judged, in_grace)
}

/// Granting subscriptions no row names, created before the grace window:
/// `subscription_missing_locally` (Stripe's own key); the others' open
/// ones cleared. Returns the findings created.
async fn orphans(
    conn: &mut sqlx::PgConnection,
    target: Target<'_>,
    answers: &Answers,
    named_by_rows: &BTreeSet<&str>,
    grace: Duration,
) -> Result<u64, RunError> {
    let kind = FindingKind::SubscriptionMissingLocally
        .as_str()
        .into_owned();
    let policy = target.settings.policy();
    let settled_before = Utc::now() - chrono::Duration::from_std(grace).unwrap_or_default();
    let mut found = Vec::new();
    let mut cleared = Vec::new();
    for (id, answer) in answers {
        let Some(Ok(s)) = answer else { continue };
        let grants = s.facts.status.grants(policy.past_due) == Some(true);
        let settled = s.created.map_or(true, |c| c < settled_before);
        if named_by_rows.contains(id.as_str()) || !grants {
            cleared.push(id.as_str().to_owned());
        } else if settled {
            found.push(NewFinding {
                key: None,
                stripe_id: Some(id.as_str().to_owned()),
                kind: kind.clone(),
                local_status: "(no row)".to_owned(),
                external_status: Some(s.facts.status.as_str().to_owned()),
                details: json!({
                    "differs": {"field": "subscription", "local": null, "stripe": s.facts.status.as_str()},
                    "money_at_risk": true,
                    "customer": s.customer,
                    "stripe": stripe_values(&s.facts),
                }),
                account: None,
            });
        }
    }
    record::clear_orphans(&mut *conn, &kind, &cleared).await?;
    let recorded = record::record(conn, &found).await?;
    Ok(recorded.iter().filter(|r| r.created).count() as u64)
}
