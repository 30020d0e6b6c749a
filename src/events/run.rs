//! One `events` run: take the lease, then work through the window from the
//! stored position in slices, oldest first ([`super::slices`]), each
//! committed with the position it reached ([`super::handle`]), until the
//! window is covered, `RECONCILER_EVENTS_MAX_PAGES` pages were read, the run
//! deadline passed or a shutdown came. Whatever stops the run, the slices
//! before it stay committed and the next run continues from there.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::feed::{self, SliceRead, Window};
use super::handle::{self, Progress};
use super::slices::Slicer;
use super::{events_job, EventsError};
use crate::config::{JobSettings, STRIPE_EVENTS_RETENTION};
use crate::lease::Lease;
use crate::outcome::RunOutcome;
use crate::read::VerdictCounts;
use crate::store::events_position::{self, EventsPosition};
use crate::store::lease::LeaseTable;
use crate::store::payments;
use crate::store::Context;
use crate::stripe::{AccountId, StripeGateway};

/// A PaymentIntent whose event could not be decided is read again by later
/// runs while the event is at most this much older than the grace window;
/// after that the scan covers its row.
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
    /// List pages read (crowded slices read again smaller included).
    pub pages: u32,
    /// Slices committed, each with the position it reached.
    pub slices: u32,
    /// PaymentIntent events read.
    pub events_read: u64,
    /// Entries of the feed that were not readable PaymentIntent events.
    pub events_skipped: u64,
    /// Charge, refund and dispute events whose object names no
    /// PaymentIntent (a charge made without one): counted, not an error.
    pub events_without_payment_intent: u64,
    /// Distinct PaymentIntents the events named, per slice (one decided
    /// without a read is planned again by a later slice with a newer event).
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
    /// PaymentIntents held by earlier runs that this run read again first.
    pub retries_read: u64,
    /// PaymentIntents this run could not decide (row in grace, no row yet,
    /// Stripe did not answer): held in `reconciliation_events_retry` for the
    /// next runs; the position moved past their events anyway.
    pub payment_intents_held: u64,
    /// Held PaymentIntents dropped because their event is older than grace
    /// + 1 h: the scan covers their rows.
    pub retries_expired: u64,
    /// Seconds of events Stripe no longer keeps (position older than 30 days).
    pub gap_seconds: Option<f64>,
    /// `RECONCILER_EVENTS_MAX_PAGES` stopped the run before the end of the
    /// window: the rest of the backlog is read by the next runs (not a gap).
    pub truncated: bool,
    /// `RECONCILER_RUN_DEADLINE_SECONDS` passed: no new slice was started.
    pub deadline_reached: bool,
    /// The position of the platform's feed this run committed last, if it
    /// committed a slice of it: every event created before it was handled
    /// (or waits in `reconciliation_events_retry`). Connected accounts'
    /// positions are their own rows.
    pub covered_until: Option<DateTime<Utc>>,
    /// Connected accounts whose feeds this run considered
    /// (`RECONCILER_ACCOUNT_COLUMN`; 0 without it).
    pub accounts: u64,
    /// Connected accounts whose feed Stripe refused (no access): skipped.
    pub accounts_unreachable: u64,
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
            let r = body(
                pool,
                gateway,
                settings,
                &lease,
                &shutdown,
                started,
                &mut summary,
            )
            .await;
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
    started: Instant,
    summary: &mut EventsSummary,
) -> Result<(), EventsError> {
    let job = &summary.job.clone();
    // 1. The window, from the stored position.
    // Every statement in a transaction: behind a pooler in transaction mode
    // a statement outside one may meet another server connection between
    // its parse and its execution.
    let position = {
        let mut tx = crate::store::begin(pool)
            .await
            .context("starting a transaction")?;
        let position = events_position::read(&mut tx, job).await?;
        tx.commit().await.context("committing")?;
        position
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

    // 2. The connected accounts' feeds (RECONCILER_ACCOUNT_COLUMN), least
    //    recently read first, each from its own position.
    let mut feeds: VecDeque<FeedRun> = VecDeque::new();
    feeds.push_back(FeedRun {
        account: None,
        slicer: Slicer::new(start, listed_at),
    });
    for (account, account_start) in connected_feeds(pool, settings, job, listed_at, summary).await?
    {
        feeds.push_back(FeedRun {
            account: Some(account),
            slicer: Slicer::new(account_start, listed_at),
        });
    }

    // 3. What earlier runs could not decide, first (their reads come after
    //    every event listed below, so the slices skip those PaymentIntents).
    let mut progress = Progress::default();
    handle::retries(
        pool,
        gateway,
        settings,
        lease,
        shutdown,
        &mut progress,
        summary,
    )
    .await?;

    // 4. Slice by slice, oldest first within a feed, one slice per feed in
    //    turn (so one busy account cannot starve the rest), each committed
    //    with its feed's position.
    let mut failed_feed: Option<EventsError> = None;
    while let Some(mut feed) = feeds.pop_front() {
        let Some(slice) = feed.slicer.next() else {
            continue;
        };
        if settings
            .run_deadline
            .is_some_and(|d| started.elapsed() >= d)
        {
            summary.deadline_reached = true;
            tracing::info!(slices = summary.slices, covered_until = ?summary.covered_until, "run deadline reached; no new slice started (the next run continues from the position)");
            break;
        }
        // The cap bounds the pages of a run, but never stops its first
        // slice: a feed so crowded that cutting it down to one page takes
        // more pages than the cap would otherwise never move.
        let max_pages = (summary.slices > 0).then_some(settings.events.max_pages);
        let account = feed.account.as_ref();
        let read = feed::read_slice(
            gateway,
            account,
            slice,
            &mut summary.pages,
            max_pages,
            shutdown,
        )
        .await;
        match read {
            Ok(SliceRead::Whole(read)) => {
                let events = read.events.len();
                handle::slice(
                    pool,
                    gateway,
                    settings,
                    lease,
                    shutdown,
                    account,
                    slice,
                    read,
                    &mut progress,
                    summary,
                )
                .await?;
                feed.slicer.done(slice, events);
            }
            Ok(SliceRead::Crowded { seen, oldest_seen }) => {
                feed.slicer.crowded(slice, seen, oldest_seen);
            }
            Ok(SliceRead::Capped) => {
                summary.truncated = true;
                tracing::info!(pages = summary.pages, covered_until = ?summary.covered_until, "RECONCILER_EVENTS_MAX_PAGES reached: the rest of the backlog is read by the next runs (events_lag_seconds says how far behind)");
                break;
            }
            Err(EventsError::AccountUnreachable(e)) => {
                summary.accounts_unreachable += 1;
                tracing::warn!(error = %e, "a connected account's events cannot be read (the platform has no access to it): skipped this run, the other feeds go on");
                continue;
            }
            // One connected account's feed failing while Stripe answers
            // (a probe) is that account's trouble: skipped this run, the
            // other feeds go on, and the run still fails at the end.
            Err(EventsError::FeedUnavailable(e)) if account.is_some() => {
                if let Err(down) = gateway.probe().await {
                    tracing::error!(error = %down, "Stripe does not answer a probe either");
                    return Err(EventsError::FeedUnavailable(e));
                }
                tracing::warn!(error = %e, "a connected account's events feed cannot be read while Stripe answers: skipped this run, the other feeds go on");
                failed_feed.get_or_insert(EventsError::FeedUnavailable(e));
                continue;
            }
            Err(e) => return Err(e),
        }
        feeds.push_back(feed);
    }
    failed_feed.map_or(Ok(()), Err)
}

/// One feed of a run: the platform's (`account` `None`) or a connected
/// account's, with the slices left to read.
struct FeedRun {
    account: Option<AccountId>,
    slicer: Slicer,
}

/// The most connected accounts whose feeds one run considers.
pub const MAX_ACCOUNTS_PER_RUN: usize = 10_000;

/// With `RECONCILER_ACCOUNT_COLUMN`: the active connected accounts
/// (`RECONCILER_EVENTS_ACCOUNT_ACTIVE_SECONDS`) with the start of each one's
/// window, least recently read first (never read: first). A stored value
/// that is not an `acct_` id is never sent: it is logged and skipped.
async fn connected_feeds(
    pool: &PgPool,
    settings: &JobSettings,
    job: &str,
    listed_at: DateTime<Utc>,
    summary: &mut EventsSummary,
) -> Result<Vec<(AccountId, DateTime<Utc>)>, EventsError> {
    let Some(column) = settings.account_column.as_ref() else {
        return Ok(Vec::new());
    };
    let mut tx = crate::store::begin(pool)
        .await
        .context("starting a transaction")?;
    let values = payments::active_accounts(
        &mut tx,
        column,
        settings.events.account_active,
        MAX_ACCOUNTS_PER_RUN,
        settings.partition.as_ref(),
    )
    .await?;
    if values.len() >= MAX_ACCOUNTS_PER_RUN {
        tracing::warn!(limit = MAX_ACCOUNTS_PER_RUN, "more active connected accounts than one events run considers; the others are read by the scan only");
    }
    let (accounts, invalid): (Vec<_>, Vec<_>) = values
        .iter()
        .map(|v| (v, AccountId::parse(v)))
        .partition(|(_, parsed)| parsed.is_ok());
    let accounts: Vec<AccountId> = accounts.into_iter().filter_map(|(_, a)| a.ok()).collect();
    if !invalid.is_empty() {
        // One line a run, however many: a wrong column must not flood the log.
        let samples: Vec<String> = invalid
            .iter()
            .take(3)
            .map(|(v, _)| crate::terminal::escape(v).into_owned())
            .collect();
        tracing::warn!(values = invalid.len(), samples = ?samples, "the account column holds values that are not connected account ids (acct_ followed by letters and digits): their feeds are not read; is RECONCILER_ACCOUNT_COLUMN the right column?");
    }
    let ids: Vec<&str> = accounts.iter().map(AccountId::as_str).collect();
    let positions: HashMap<String, EventsPosition> =
        events_position::read_accounts(&mut tx, job, &ids)
            .await?
            .into_iter()
            .collect();
    tx.commit().await.context("committing")?;
    let mut feeds: Vec<(Option<DateTime<Utc>>, AccountId, DateTime<Utc>)> = Vec::new();
    for account in accounts {
        let position = positions.get(account.as_str());
        let Window { start, gap_seconds } = feed::window(
            position.and_then(|p| p.covered_until),
            listed_at,
            settings.events.lookback,
            STRIPE_EVENTS_RETENTION,
        );
        if let Some(gap) = gap_seconds {
            tracing::warn!(account = %account.as_str(), gap_seconds = gap, "a connected account's events position is older than Stripe keeps events (30 days): restarting at the oldest available event (the scan covers those rows)");
            summary.gap_seconds = Some(summary.gap_seconds.unwrap_or(0.0).max(gap));
        }
        feeds.push((position.and_then(|p| p.last_success_at), account, start));
    }
    feeds.sort_by_key(|(last, _, _)| *last);
    summary.accounts = feeds.len() as u64;
    Ok(feeds.into_iter().map(|(_, a, s)| (a, s)).collect())
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
