//! `reconciliation_events_position`: one row per events job
//! (`<RECONCILER_JOB>-events`): how far the events feed has been read, and
//! the lease that keeps a second `events` run out. The position moves only in
//! the transaction that commits the run's findings, and only while the lease
//! is still ours (compare-and-set on `lease_owner`).

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::lease::{self, LeaseTable};
use super::{Context, StoreError};

/// One events job's position.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct EventsPosition {
    /// `<RECONCILER_JOB>-events`.
    pub job: String,
    /// Every event created before this instant was read and its findings
    /// committed; `None` before the first successful run.
    pub covered_until: Option<DateTime<Utc>>,
    /// The newest event processed so far (`evt_...`).
    pub newest_event_id: Option<String>,
    /// Its `created`.
    pub newest_event_created: Option<DateTime<Utc>>,
    /// When a run last committed.
    pub last_success_at: Option<DateTime<Utc>>,
    /// When the feed was listed by the run that moved `covered_until` last
    /// (its clock); `None` before migration 0022's first run.
    pub listed_at: Option<DateTime<Utc>>,
    /// The largest lateness observed (seconds) of an event's `created`
    /// behind the listing that should have shown it, decayed with time
    /// (docs/events.md, "Events listed late").
    pub lateness_seconds: f64,
    /// When the feed last re-read the hour behind its position (the
    /// listing of that run); `None`: never.
    pub swept_at: Option<DateTime<Utc>>,
}

/// Reads the job's position; `None` when the job never ran.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read(
    conn: &mut PgConnection,
    job: &str,
) -> Result<Option<EventsPosition>, StoreError> {
    super::query_as(
        "SELECT job, covered_until, newest_event_id, newest_event_created, last_success_at,
                listed_at, lateness_seconds, swept_at
           FROM reconciliation_events_position WHERE job = $1",
    )
    .bind(job)
    .fetch_optional(conn)
    .await
    .context("reading the events position")
}

/// [`lease::acquire`] on this table: takes the job's lease, creating the
/// row if needed; `false` when another run holds a live lease.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn acquire_lease(
    conn: &mut PgConnection,
    job: &str,
    owner: &str,
    ttl_seconds: f64,
) -> Result<bool, StoreError> {
    lease::acquire(conn, LeaseTable::EventsPosition, job, owner, ttl_seconds).await
}

/// The position a committed run moves to.
#[derive(Debug, Clone, PartialEq)]
pub struct Advance<'a> {
    /// The new `covered_until`; `None` keeps it (a run that only read
    /// PaymentIntents held by earlier runs again).
    pub covered_until: Option<DateTime<Utc>>,
    /// The newest event processed by this run, if any (`id`, `created`).
    pub newest_event: Option<(&'a str, DateTime<Utc>)>,
    /// A slice's listing: stored with a `covered_until` that moves the
    /// position forward; `None` for a pass over held PaymentIntents.
    pub listing: Option<Listing>,
}

/// When a run listed its feed, and the lateness it carries (docs/events.md,
/// "Events listed late").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Listing {
    /// When the run listed the feed (the end of its window).
    pub listed_at: DateTime<Utc>,
    /// The stored lateness decayed to `listed_at`, raised by what this run
    /// observed (seconds). Replaces the stored one when the position moves
    /// forward; otherwise only raises it.
    pub lateness_seconds: f64,
}

/// Moves the position inside the run's write transaction, renewing the lease
/// for `ttl_seconds`. The position never moves backwards: `covered_until`
/// keeps the greater of the stored value and `to`'s (a slice that ends
/// earlier, from a pod whose clock runs behind the one that wrote it, leaves
/// it unchanged; docs/operations.md, "Events: the position never moves
/// backwards"). Returns `false` when the lease is no longer `owner`'s
/// (it expired and another run took it): the caller must roll back.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn advance(
    conn: &mut PgConnection,
    job: &str,
    owner: &str,
    ttl_seconds: f64,
    to: &Advance<'_>,
) -> Result<bool, StoreError> {
    let (event_id, event_created) = to.newest_event.unzip();
    let (listed_at, lateness) = to
        .listing
        .map(|l| (l.listed_at, l.lateness_seconds))
        .unzip();
    // The right-hand sides read the row as it was: `moves` compares with
    // the stored position before this statement moves it.
    let done = super::query(
        "UPDATE reconciliation_events_position
            SET covered_until = greatest(covered_until, $3),
                newest_event_id = coalesce($4, newest_event_id),
                newest_event_created = coalesce($5, newest_event_created),
                listed_at = CASE WHEN $3 > coalesce(covered_until, '-infinity')
                                 THEN coalesce($7, listed_at) ELSE listed_at END,
                -- A position written before listings were stored: the
                -- events before it were never remembered, so the hour
                -- behind it is not swept (it would handle them again).
                swept_at = CASE WHEN listed_at IS NULL AND covered_until IS NOT NULL
                                THEN coalesce($7, swept_at) ELSE swept_at END,
                lateness_seconds = CASE WHEN $8::float8 IS NULL THEN lateness_seconds
                                        WHEN $3 > coalesce(covered_until, '-infinity') THEN $8
                                        ELSE greatest(lateness_seconds, $8) END,
                last_success_at = now(), updated_at = now(),
                lease_expires_at = now() + make_interval(secs => $6)
          WHERE job = $1 AND lease_owner = $2",
    )
    .bind(job)
    .bind(owner)
    .bind(to.covered_until)
    .bind(event_id)
    .bind(event_created)
    .bind(ttl_seconds)
    .bind(listed_at)
    .bind(lateness)
    .execute(conn)
    .await
    .context("moving the events position")?;
    Ok(done.rows_affected() == 1)
}

/// Records that the feed whose position row is `job` re-read the hour
/// behind its position as listed at `listed_at` (docs/events.md, "Events
/// listed late"); the next sweep is due an hour later.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn swept(
    conn: &mut PgConnection,
    job: &str,
    listed_at: DateTime<Utc>,
) -> Result<(), StoreError> {
    super::query(
        "UPDATE reconciliation_events_position SET swept_at = greatest(swept_at, $2) WHERE job = $1",
    )
    .bind(job)
    .bind(listed_at)
    .execute(conn)
    .await
    .context("recording the events sweep")?;
    Ok(())
}

/// The position row of a connected account's feed: `<events job>:<acct_…>`
/// (Connect, docs/connect.md). It carries no lease of its own: it is moved only
/// under the events job's lease ([`advance_account`]).
pub fn account_job(job: &str, account: &str) -> String {
    format!("{job}:{account}")
}

/// The positions of `accounts`' feeds for the events job `job`, keyed by
/// account id (accounts never read have none).
///
/// # Errors
/// [`StoreError`] when the statement fails.
pub async fn read_accounts(
    conn: &mut PgConnection,
    job: &str,
    accounts: &[&str],
) -> Result<Vec<(String, EventsPosition)>, StoreError> {
    let jobs: Vec<String> = accounts.iter().map(|a| account_job(job, a)).collect();
    let rows: Vec<EventsPosition> = super::query_as(
        "SELECT job, covered_until, newest_event_id, newest_event_created, last_success_at,
                listed_at, lateness_seconds, swept_at
           FROM reconciliation_events_position WHERE job = ANY($1)",
    )
    .bind(&jobs)
    .fetch_all(conn)
    .await
    .context("reading the connected accounts' events positions")?;
    let prefix = format!("{job}:");
    Ok(rows
        .into_iter()
        .filter_map(|p| Some((p.job.strip_prefix(&prefix)?.to_owned(), p)))
        .collect())
}

/// Moves a connected account's position (created on its first slice) and
/// renews the events job's lease, in the caller's transaction, only while
/// `owner` holds that lease. As [`advance`], `covered_until` never moves
/// backwards. Returns `false` when it does not: nothing was
/// written.
///
/// # Errors
/// [`StoreError`] when a statement fails.
pub async fn advance_account(
    conn: &mut PgConnection,
    job: &str,
    owner: &str,
    ttl_seconds: f64,
    account: &str,
    to: &Advance<'_>,
) -> Result<bool, StoreError> {
    let held = Advance {
        covered_until: None,
        newest_event: None,
        listing: None,
    };
    if !advance(&mut *conn, job, owner, ttl_seconds, &held).await? {
        return Ok(false);
    }
    let (event_id, event_created) = to.newest_event.unzip();
    let (listed_at, lateness) = to
        .listing
        .map(|l| (l.listed_at, l.lateness_seconds))
        .unzip();
    super::query(
        "INSERT INTO reconciliation_events_position AS p
                (job, covered_until, newest_event_id, newest_event_created, last_success_at,
                 listed_at, lateness_seconds)
         VALUES ($1, $2, $3, $4, CASE WHEN $2::timestamptz IS NULL THEN NULL ELSE now() END,
                 $5, coalesce($6::float8, 0))
         ON CONFLICT (job) DO UPDATE
            SET covered_until = greatest(p.covered_until, excluded.covered_until),
                newest_event_id = coalesce(excluded.newest_event_id, p.newest_event_id),
                newest_event_created = coalesce(excluded.newest_event_created, p.newest_event_created),
                -- As `advance`: the listing and the lateness follow a
                -- position that moves forward.
                listed_at = CASE WHEN excluded.covered_until > coalesce(p.covered_until, '-infinity')
                                 THEN coalesce(excluded.listed_at, p.listed_at) ELSE p.listed_at END,
                swept_at = CASE WHEN p.listed_at IS NULL AND p.covered_until IS NOT NULL
                                THEN coalesce(excluded.listed_at, p.swept_at) ELSE p.swept_at END,
                lateness_seconds = CASE WHEN $6::float8 IS NULL THEN p.lateness_seconds
                                        WHEN excluded.covered_until > coalesce(p.covered_until, '-infinity')
                                        THEN excluded.lateness_seconds
                                        ELSE greatest(p.lateness_seconds, excluded.lateness_seconds) END,
                -- Only a slice of the account's feed counts as reading it
                -- (the least recently read go first); a pass over its held
                -- PaymentIntents does not.
                last_success_at = CASE WHEN excluded.covered_until IS NULL
                                       THEN p.last_success_at ELSE now() END,
                updated_at = now()",
    )
    .bind(account_job(job, account))
    .bind(to.covered_until)
    .bind(event_id)
    .bind(event_created)
    .bind(listed_at)
    .bind(lateness)
    .execute(conn)
    .await
    .context("moving a connected account's events position")?;
    Ok(true)
}

/// What `status` shows of the events job `job` (`<RECONCILER_JOB>-events`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct EventsFigures {
    /// The platform feed's position.
    pub covered_until: Option<DateTime<Utc>>,
    /// When an events run last committed.
    pub last_success_at: Option<DateTime<Utc>>,
    /// The oldest position among the platform's feed and the connected
    /// accounts' feeds moved within the active window (the lag's base).
    pub oldest_covered: Option<DateTime<Utc>>,
    /// Connected accounts' feeds with a position moved within the active
    /// window.
    pub connected_accounts: i64,
    /// PaymentIntents waiting in `reconciliation_events_retry`.
    pub payment_intents_held: i64,
    /// The oldest event among them.
    pub oldest_held_event: Option<DateTime<Utc>>,
    /// The database's clock.
    pub database_now: DateTime<Utc>,
}

/// The events job's figures for `status` and the events push; `None` when
/// it never ran.
/// `active` is `RECONCILER_EVENTS_ACCOUNT_ACTIVE_SECONDS`.
///
/// # Errors
/// [`StoreError`] when the statement fails.
pub async fn figures(
    conn: &mut PgConnection,
    job: &str,
    active: std::time::Duration,
) -> Result<Option<EventsFigures>, StoreError> {
    super::query_as(
        "WITH accounts AS (
              SELECT covered_until FROM reconciliation_events_position
               WHERE starts_with(job, $1 || ':acct_')
                 AND updated_at > now() - make_interval(secs => $2))
         SELECT p.covered_until, p.last_success_at,
                least(p.covered_until, (SELECT min(covered_until) FROM accounts)) AS oldest_covered,
                (SELECT count(*) FROM accounts) AS connected_accounts,
                r.held AS payment_intents_held, r.oldest AS oldest_held_event,
                now() AS database_now
           FROM reconciliation_events_position p,
                LATERAL (SELECT count(*) AS held, min(event_created) AS oldest
                           FROM reconciliation_events_retry WHERE job = $1) r
          WHERE p.job = $1",
    )
    .bind(job)
    .bind(active.as_secs_f64())
    .fetch_optional(conn)
    .await
    .context("reading the events job's figures")
}
