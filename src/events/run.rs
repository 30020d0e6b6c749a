//! The events job's run, with the lease on its position row taken
//! (`job`): the window from the stored position worked through in slices, oldest first
//! ([`super::slices`]), each committed with the position it reached
//! (`batch`), until the window is covered,
//! `RECONCILER_EVENTS_MAX_PAGES` pages were read, the run deadline passed or
//! a shutdown came. Whatever stops the run, the slices before it stay
//! committed and the next run continues from there.

use std::collections::VecDeque;
use std::time::Instant;

use chrono::Utc;

use super::accounts::connected_feeds;
use super::batch::{self, Progress};
use super::feed::{self, PageBounds, SliceRead, Window};
use super::feed_run::FeedRun;
use super::groups::EventsContext;
use super::retries;
use super::seen;
use super::seen::feed_job;
use super::slices::Slice;
use super::source::{Feed, Source};
use super::summary::EventsSummary;
use super::EventsError;
use crate::config::STRIPE_EVENTS_RETENTION;
use crate::store::events_position::{self, Listing};
use crate::store::Context;
use crate::stripe::AccountId;

/// The run's work: the feeds from their positions, what earlier runs could
/// not decide, then the slices.
pub(super) async fn body(
    ctx: &EventsContext<'_>,
    summary: &mut EventsSummary,
) -> Result<(), EventsError> {
    let mut feeds = open_feeds(ctx, summary).await?;
    // What earlier runs could not decide, first (their reads come after
    // every event listed below, so the slices skip those PaymentIntents).
    let mut progress = Progress::default();
    retries::retries(ctx, &mut progress, summary).await?;
    // Slice by slice, oldest first within a feed, one slice per feed in
    // turn (so one busy account cannot starve the rest), each committed
    // with its feed's position.
    let mut failed_feed: Option<EventsError> = None;
    while let Some(mut feed) = feeds.pop_front() {
        let Some(slice) = feed.next_slice() else {
            continue;
        };
        if run_deadline(ctx).is_some_and(|d| Instant::now() >= d) {
            // In the sweep the window is covered: no backlog is left.
            summary.deadline_reached |= !feed.sweeping();
            tracing::info!(slices = summary.slices, covered_until = ?summary.covered_until, "run deadline reached; no new slice started (the next run continues from the position)");
            break;
        }
        match next_slice(ctx, &mut feed, slice, &mut progress, summary).await {
            Ok(Step::Next) => feeds.push_back(feed),
            Ok(Step::Stop) => break,
            Ok(Step::SkipFeed) => {}
            Err(SliceFailure::Feed(e)) => {
                failed_feed.get_or_insert(e);
            }
            Err(SliceFailure::Run(e)) => return Err(e),
        }
    }
    failed_feed.map_or(Ok(()), Err)
}

/// The feeds of the run, each from its stored position: the platform's,
/// then the connected accounts' (`RECONCILER_ACCOUNT_COLUMN`), least
/// recently read first. Sets the window start and any gap of the summary.
async fn open_feeds(
    ctx: &EventsContext<'_>,
    summary: &mut EventsSummary,
) -> Result<VecDeque<FeedRun>, EventsError> {
    let job = &summary.job.clone();
    // Every statement in a transaction: behind a pooler in transaction mode
    // a statement outside one may meet another server connection between
    // its parse and its execution.
    let position = {
        let mut tx = crate::store::begin(ctx.pool)
            .await
            .context("starting a transaction")?;
        let position = events_position::read(&mut tx, job).await?;
        tx.commit().await.context("committing")?;
        position
    };
    let listed_at = Utc::now();
    let start = feed::start(
        position.as_ref(),
        listed_at,
        ctx.settings.events.lookback,
        STRIPE_EVENTS_RETENTION,
    );
    summary.overlap_seconds = start.lateness.overlap().as_secs_f64();
    summary.lateness_seconds = start.lateness.seconds;
    let Window {
        start: from,
        gap_seconds,
    } = start.window;
    summary.window_start = Some(from);
    summary.gap_seconds = gap_seconds;
    if let Some(gap) = gap_seconds {
        tracing::warn!(gap_seconds = gap, restart = %from, "the events position is older than Stripe keeps events (30 days): events in the gap were never read; restarting at the oldest available event (the scan covers those rows)");
    }
    let mut feeds: VecDeque<FeedRun> = VecDeque::new();
    feeds.push_back(FeedRun::new(None, start, listed_at));
    let accounts = connected_feeds(ctx, listed_at, summary).await?;
    for (account, start) in accounts {
        feeds.push_back(FeedRun::new(Some(account), start, listed_at));
    }
    Ok(feeds)
}

/// When `RECONCILER_RUN_DEADLINE_SECONDS` passes (from the run's start).
fn run_deadline(ctx: &EventsContext<'_>) -> Option<Instant> {
    ctx.settings
        .scan
        .run
        .run_deadline
        .and_then(|d| ctx.clock.started().checked_add(d))
}

/// What the run does after a slice.
enum Step {
    /// Put the feed back in turn.
    Next,
    /// The feed is skipped for the rest of the run.
    SkipFeed,
    /// The run reads no more slices.
    Stop,
}

/// Why a slice failed: one connected account's feed (the others go on, the
/// run fails at the end), or the whole run.
enum SliceFailure {
    Feed(EventsError),
    Run(EventsError),
}

impl From<EventsError> for SliceFailure {
    fn from(e: EventsError) -> Self {
        SliceFailure::Run(e)
    }
}

/// Reads `slice` of `feed` and handles it (or cuts it smaller when
/// crowded).
async fn next_slice(
    ctx: &EventsContext<'_>,
    feed: &mut FeedRun,
    slice: Slice,
    progress: &mut Progress,
    summary: &mut EventsSummary,
) -> Result<Step, SliceFailure> {
    // The cap and the deadline bound the pages of a run from its very
    // first page (a list that does not advance was once read without
    // bound in the first slice).
    let bounds = PageBounds {
        max_pages: ctx.settings.events.max_pages,
        deadline: run_deadline(ctx),
        shutdown: &ctx.shutdown,
    };
    let account = feed.account.as_ref();
    let read = feed::read_slice(ctx.gateway, account, slice, &mut summary.pages, bounds).await;
    match read {
        Ok(SliceRead::Whole(read)) => {
            let events = read.len();
            let read = seen::fresh(ctx, account, read, &mut feed.lateness, summary).await?;
            let listing = Listing {
                listed_at: feed.listed_at,
                lateness_seconds: feed.lateness.seconds,
            };
            let source = Source::Slice(slice, listing);
            batch::slice(ctx, Feed { account, source }, read, progress, summary).await?;
            if account.is_none() {
                summary.lateness_seconds = feed.lateness.seconds;
            }
            if feed.done(slice, events) {
                swept(ctx, feed, summary).await?;
            }
            Ok(Step::Next)
        }
        Ok(SliceRead::Crowded {
            seen,
            oldest_seen,
            at_oldest,
        }) => {
            feed.crowded(slice, seen, oldest_seen, at_oldest);
            Ok(Step::Next)
        }
        Ok(SliceRead::Capped) => {
            summary.truncated |= !feed.sweeping();
            if summary.slices == 0 {
                tracing::warn!(pages = summary.pages, "RECONCILER_EVENTS_MAX_PAGES reached before any slice was whole: no position moved this run; if this repeats, raise RECONCILER_EVENTS_MAX_PAGES (a crowded feed is cut down to slices of a page or two in a few pages)");
            }
            tracing::info!(pages = summary.pages, covered_until = ?summary.covered_until, "RECONCILER_EVENTS_MAX_PAGES reached: the rest of the backlog is read by the next runs (events_lag_seconds says how far behind)");
            Ok(Step::Stop)
        }
        Ok(SliceRead::Deadline) => {
            summary.deadline_reached |= !feed.sweeping();
            tracing::info!(pages = summary.pages, covered_until = ?summary.covered_until, "run deadline reached while reading a slice: that slice is left to the next run (the position stays where the last whole slice left it)");
            Ok(Step::Stop)
        }
        Err(e) => feed_failed(ctx, account, e, summary).await,
    }
}

/// A slice of `account`'s feed (`None`: the platform's) could not be read:
/// whether the run goes on without that feed or stops.
async fn feed_failed(
    ctx: &EventsContext<'_>,
    account: Option<&AccountId>,
    error: EventsError,
    summary: &mut EventsSummary,
) -> Result<Step, SliceFailure> {
    match error {
        e @ EventsError::FeedNotAdvancing { .. } => {
            summary.feeds_not_advancing += 1;
            tracing::error!(error = %e, pages = summary.pages, "an events list that does not advance: that feed is read no further this run; the other feeds go on");
            Err(SliceFailure::Feed(e))
        }
        EventsError::AccountUnreachable(e) => {
            summary.accounts_unreachable += 1;
            tracing::warn!(error = %e, "a connected account's events cannot be read (the platform has no access to it): skipped this run, the other feeds go on");
            Ok(Step::SkipFeed)
        }
        // One connected account's feed failing while Stripe answers
        // (a probe) is that account's trouble: skipped this run, the
        // other feeds go on, and the run still fails at the end.
        EventsError::FeedUnavailable(e) if account.is_some() => {
            if let Err(down) = ctx.gateway.probe().await {
                tracing::error!(error = %down, "Stripe does not answer a probe either");
                return Err(SliceFailure::Run(EventsError::FeedUnavailable(e)));
            }
            tracing::warn!(error = %e, "a connected account's events feed cannot be read while Stripe answers: skipped this run, the other feeds go on");
            Err(SliceFailure::Feed(EventsError::FeedUnavailable(e)))
        }
        e => Err(SliceFailure::Run(e)),
    }
}

/// `feed` re-read the hour behind its position: recorded (the next sweep
/// is due an hour later) and logged.
async fn swept(
    ctx: &EventsContext<'_>,
    feed: &FeedRun,
    summary: &mut EventsSummary,
) -> Result<(), EventsError> {
    let job = feed_job(ctx, feed.account.as_ref());
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("starting a transaction")?;
    events_position::swept(&mut tx, &job, feed.listed_at).await?;
    tx.commit().await.context("committing")?;
    summary.sweeps += 1;
    tracing::info!(feed = %job, "the hour behind the position was read again (events listed later than the overlap are handled; the next sweep is due in an hour)");
    Ok(())
}
