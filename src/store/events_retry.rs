//! `reconciliation_events_retry` (migration 0012): the PaymentIntents the
//! events feed could not decide yet, each with the newest event that named
//! it, read again by the next runs while that event is younger than the hold
//! limit. The feed's position never waits for them.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::PgConnection;

use super::{Context, StoreError};
use crate::reconcile::ExternalStatus;
use crate::stripe::{AccountId, EventObject, PaymentIntentEvent, PaymentIntentId};

/// Why a PaymentIntent waits for another read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HoldReason {
    /// Its row was updated within `RECONCILER_GRACE_SECONDS`: the
    /// application is on it.
    InGrace,
    /// Succeeded at Stripe, no row yet, and still within the grace window:
    /// the application may not have committed its row.
    NoRowYet,
    /// Stripe did not answer for it (or could not prove its money).
    StripeUnanswered,
    /// Its row changed while Stripe was asked: the answer was not recorded.
    ChangedWhileAsked,
}

impl HoldReason {
    /// The word stored in `reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InGrace => "in_grace",
            Self::NoRowYet => "no_row_yet",
            Self::StripeUnanswered => "stripe_unanswered",
            Self::ChangedWhileAsked => "changed_while_asked",
        }
    }
}

/// A PaymentIntent to read again: the event to decide it by, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held<'a> {
    /// The newest event that named the PaymentIntent.
    pub event: &'a PaymentIntentEvent,
    /// Why it could not be decided.
    pub reason: HoldReason,
}

/// Stores `held` for `job`, named by `account`'s feed (`None`: the
/// platform's), in the caller's transaction. A PaymentIntent
/// already waiting keeps the newer of the two events, counts one more
/// attempt and takes the new reason.
///
/// # Errors
/// [`StoreError`] when the statement fails.
pub async fn hold(
    conn: &mut PgConnection,
    job: &str,
    account: Option<&AccountId>,
    held: &[Held<'_>],
) -> Result<(), StoreError> {
    if held.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = held
        .iter()
        .map(|h| h.event.payment_intent.as_str())
        .collect();
    let event_ids: Vec<&str> = held.iter().map(|h| h.event.id.as_str()).collect();
    let types: Vec<&str> = held.iter().map(|h| h.event.event_type.as_str()).collect();
    let created: Vec<DateTime<Utc>> = held.iter().map(|h| h.event.created).collect();
    let statuses: Vec<Option<&str>> = held
        .iter()
        .map(|h| h.event.status.as_ref().map(ExternalStatus::as_str))
        .collect();
    let metadata: Vec<Json<&BTreeMap<String, String>>> =
        held.iter().map(|h| Json(&h.event.metadata)).collect();
    let reasons: Vec<&str> = held.iter().map(|h| h.reason.as_str()).collect();
    super::query(
        "INSERT INTO reconciliation_events_retry AS r
                (job, stripe_payment_intent_id, event_id, event_type, event_created,
                 event_status, event_metadata, reason, stripe_account_id)
         SELECT $1, v.*, $9 FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[],
                                        $6::text[], $7::jsonb[], $8::text[]) AS v
         ON CONFLICT (job, stripe_payment_intent_id) DO UPDATE
            SET (event_id, event_type, event_created, event_status, event_metadata) =
                  (SELECT e.event_id, e.event_type, e.event_created, e.event_status, e.event_metadata
                     FROM (VALUES (excluded.event_id, excluded.event_type, excluded.event_created,
                                   excluded.event_status, excluded.event_metadata),
                                  (r.event_id, r.event_type, r.event_created,
                                   r.event_status, r.event_metadata))
                          AS e(event_id, event_type, event_created, event_status, event_metadata)
                    ORDER BY e.event_created DESC LIMIT 1),
                reason = excluded.reason,
                stripe_account_id = excluded.stripe_account_id,
                attempts = r.attempts + 1,
                last_held_at = now()",
    )
    .bind(job)
    .bind(&ids)
    .bind(&event_ids)
    .bind(&types)
    .bind(&created)
    .bind(&statuses)
    .bind(&metadata)
    .bind(&reasons)
    .bind(account.map(AccountId::as_str))
    .execute(conn)
    .await
    .context("holding PaymentIntents for another events read")?;
    Ok(())
}

/// Which of `ids` already wait in `job`'s retries: the feed leaves their
/// events to the held share (docs/events.md, "What waits for another read").
///
/// # Errors
/// [`StoreError`] when the statement fails.
pub async fn among(
    conn: &mut PgConnection,
    job: &str,
    ids: &[&str],
) -> Result<HashSet<String>, StoreError> {
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    let held: Vec<String> = super::query_scalar(
        "SELECT stripe_payment_intent_id FROM reconciliation_events_retry
          WHERE job = $1 AND stripe_payment_intent_id = ANY($2)",
    )
    .bind(job)
    .bind(ids)
    .fetch_all(conn)
    .await
    .context("reading which PaymentIntents are held")?;
    Ok(held.into_iter().collect())
}

/// Gives PaymentIntents already held the newer of their stored event and
/// `events` (the feed's, left to the held share), in the caller's
/// transaction: no attempt is counted and their turn stays (`last_held_at`).
///
/// # Errors
/// [`StoreError`] when the statement fails.
pub async fn renew(
    conn: &mut PgConnection,
    job: &str,
    events: &[&PaymentIntentEvent],
) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = events.iter().map(|e| e.payment_intent.as_str()).collect();
    let event_ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    let created: Vec<DateTime<Utc>> = events.iter().map(|e| e.created).collect();
    let statuses: Vec<Option<&str>> = events
        .iter()
        .map(|e| e.status.as_ref().map(ExternalStatus::as_str))
        .collect();
    let metadata: Vec<Json<&BTreeMap<String, String>>> =
        events.iter().map(|e| Json(&e.metadata)).collect();
    super::query(
        "UPDATE reconciliation_events_retry AS r
            SET event_id = v.event_id, event_type = v.event_type, event_created = v.created,
                event_status = v.status, event_metadata = v.metadata
           FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[],
                       $7::jsonb[]) AS v(pi, event_id, event_type, created, status, metadata)
          WHERE r.job = $1 AND r.stripe_payment_intent_id = v.pi AND v.created > r.event_created",
    )
    .bind(job)
    .bind(&ids)
    .bind(&event_ids)
    .bind(&types)
    .bind(&created)
    .bind(&statuses)
    .bind(&metadata)
    .execute(conn)
    .await
    .context("giving held PaymentIntents their newer event")?;
    Ok(())
}

/// Removes the PaymentIntents a read settled from `job`'s retries.
///
/// # Errors
/// [`StoreError`] when the statement fails.
pub async fn settle(conn: &mut PgConnection, job: &str, ids: &[&str]) -> Result<(), StoreError> {
    if ids.is_empty() {
        return Ok(());
    }
    super::query(
        "DELETE FROM reconciliation_events_retry
          WHERE job = $1 AND stripe_payment_intent_id = ANY($2)",
    )
    .bind(job)
    .bind(ids)
    .execute(conn)
    .await
    .context("settling events retries")?;
    Ok(())
}

/// Drops `job`'s retries whose event is older than `hold_limit`: the scan
/// covers their rows from now on. Returns the PaymentIntents dropped, with
/// their reason and attempts, for the log.
///
/// # Errors
/// [`StoreError`] when the statement fails.
pub async fn expire(
    conn: &mut PgConnection,
    job: &str,
    hold_limit: Duration,
) -> Result<Vec<(String, String, i32)>, StoreError> {
    super::query_as(
        "DELETE FROM reconciliation_events_retry
          WHERE job = $1 AND event_created < now() - make_interval(secs => $2)
      RETURNING stripe_payment_intent_id, reason, attempts",
    )
    .bind(job)
    .bind(hold_limit.as_secs_f64())
    .fetch_all(conn)
    .await
    .context("expiring events retries")
}

#[derive(sqlx::FromRow)]
struct RetryRow {
    stripe_payment_intent_id: String,
    event_id: String,
    event_type: String,
    event_created: DateTime<Utc>,
    event_status: Option<String>,
    event_metadata: Json<BTreeMap<String, String>>,
    stripe_account_id: Option<String>,
}

/// Up to `limit` of `job`'s retries, least recently held first (those a run
/// had no time for come first next run), oldest event among equals, as the
/// events to decide them by with the connected account whose feed named
/// them (one event per PaymentIntent). A stored row whose ids or type are no
/// longer readable is skipped (the scan covers its row).
///
/// # Errors
/// [`StoreError`] when the statement fails.
pub async fn due(
    conn: &mut PgConnection,
    job: &str,
    limit: usize,
) -> Result<Vec<(Option<AccountId>, PaymentIntentEvent)>, StoreError> {
    let rows: Vec<RetryRow> = super::query_as(
        "SELECT stripe_payment_intent_id, event_id, event_type, event_created,
                event_status, event_metadata, stripe_account_id
           FROM reconciliation_events_retry
          WHERE job = $1
          ORDER BY last_held_at, event_created, stripe_payment_intent_id
          LIMIT $2",
    )
    .bind(job)
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .fetch_all(conn)
    .await
    .context("reading events retries")?;
    let events: Vec<(Option<AccountId>, PaymentIntentEvent)> = rows
        .into_iter()
        .filter_map(|r| {
            let account = AccountId::of_stored(r.stripe_account_id.as_deref()).ok()?;
            Some((
                account,
                PaymentIntentEvent {
                    object: EventObject::of_type(&r.event_type)?,
                    payment_intent: PaymentIntentId::parse(&r.stripe_payment_intent_id).ok()?,
                    id: r.event_id,
                    event_type: r.event_type,
                    created: r.event_created,
                    status: r.event_status.as_deref().map(ExternalStatus::parse),
                    metadata: r.event_metadata.0,
                },
            ))
        })
        .collect();
    Ok(events)
}
