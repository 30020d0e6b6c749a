//! The PaymentIntents earlier runs held, read again first in a run, each
//! step committed like a slice without moving the position.

use std::time::Instant;

use super::batch::{work, Progress};
use super::feed::SliceEvents;
use super::groups::{job_name, EventsContext};
use super::held::{held_limit, held_until, read_cost, step_size};
use super::source::{Feed, Source, Worked};
use super::summary::{EventsSummary, HOLD_BEYOND_GRACE};
use super::EventsError;
use crate::store::events_retry;
use crate::store::Context;
use crate::stripe::{AccountId, PaymentIntentEvent, RetryPolicy};

/// Reads again the PaymentIntents earlier runs could not decide, within
/// their share of the run ([`held_limit`], `held_until`): least recently
/// read first (oldest event among equals), in steps sized to fit the
/// share's time left at worst-case cost ([`step_size`]), each
/// step committed like a slice without moving the position, after dropping
/// those whose event is older than the hold limit (the scan covers their
/// rows; each is logged). A step the share's end interrupts writes nothing:
/// its PaymentIntents stay held, first in line next run. Nothing held is
/// ever dropped for want of time.
///
/// # Errors
/// As [`super::batch::slice`].
#[tracing::instrument(name = "events.retries", skip_all)]
pub async fn retries(
    ctx: &EventsContext<'_>,
    progress: &mut Progress,
    summary: &mut EventsSummary,
) -> Result<(), EventsError> {
    let limit = held_limit(ctx.settings.events.max_pages);
    let until = held_until(ctx);
    let (due, more) = due_now(ctx, limit, summary).await?;
    summary.held_share_reached = more;
    let stripe = &ctx.settings.scan.stripe;
    let cost = read_cost(
        stripe.rate_limit_rps,
        stripe.max_in_flight,
        RetryPolicy::default(),
    );
    for (account, mut events) in by_feed(due) {
        while !events.is_empty() {
            let left = until.map(|u| u.saturating_duration_since(Instant::now()));
            let n = step_size(left, cost).min(events.len());
            if n == 0 {
                summary.held_share_reached = true;
                break;
            }
            // Newest first, as a slice holds them.
            let read = SliceEvents {
                events: events.drain(..n).rev().collect(),
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
        if summary.held_share_reached && !events.is_empty() {
            break;
        }
    }
    if summary.held_share_reached {
        tracing::info!(read = summary.retries_read, limit, "the held PaymentIntents' share of the run (a third of its pages and of its deadline) is used up: the rest stay held, least recently read first next run; the feed gets the rest of the run");
    }
    Ok(())
}

/// A held PaymentIntent's event, with the connected account whose feed it
/// came from (`None`: the platform's).
type HeldEvent = (Option<AccountId>, PaymentIntentEvent);

/// Drops the held PaymentIntents whose event is older than the hold limit
/// (each logged, counted in `retries_expired`), then returns up to `limit`
/// of the rest, least recently read first, and whether more are held.
async fn due_now(
    ctx: &EventsContext<'_>,
    limit: usize,
    summary: &mut EventsSummary,
) -> Result<(Vec<HeldEvent>, bool), EventsError> {
    let job = job_name(ctx);
    // In a transaction, as every statement of the job: behind a pooler in
    // transaction mode a statement outside one may meet another server
    // connection between its parse and its execution.
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
    Ok((due, more))
}

/// The held events by feed (an orphan's read carries its account's
/// header), each feed's in their order, feeds in the order their first
/// event comes.
fn by_feed(due: Vec<HeldEvent>) -> Vec<(Option<AccountId>, Vec<PaymentIntentEvent>)> {
    let mut by_account: Vec<(Option<AccountId>, Vec<PaymentIntentEvent>)> = Vec::new();
    for (account, event) in due {
        match by_account.iter_mut().find(|(a, _)| *a == account) {
            Some((_, events)) => events.push(event),
            None => by_account.push((account, vec![event])),
        }
    }
    by_account
}
