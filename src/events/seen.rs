//! The events of a slice a feed already handled (`reconciliation_events_seen`),
//! left out before the slice is handled: a re-read of the overlap behind the
//! position handles nothing twice. An event behind the stored position that
//! is not there was listed late: its lateness is observed
//! ([`super::lateness`], docs/events.md, "Events listed late").

use super::feed::SliceEvents;
use super::groups::{job_name, EventsContext};
use super::lateness::{Lateness, MAX_OVERLAP};
use super::summary::EventsSummary;
use super::EventsError;
use crate::store::events_position::account_job;
use crate::store::{events_seen, Context};
use crate::stripe::AccountId;

/// How long an event stays remembered behind its feed's position: the
/// longest overlap, and a minute more.
pub const REMEMBERED: std::time::Duration =
    MAX_OVERLAP.saturating_add(std::time::Duration::from_secs(60));

/// The feed's name in `reconciliation_events_seen`: its position row's.
pub(super) fn feed_job(ctx: &EventsContext<'_>, account: Option<&AccountId>) -> String {
    let job = job_name(ctx);
    match account {
        None => job,
        Some(a) => account_job(&job, a.as_str()),
    }
}

/// `read` without the events `account`'s feed (`None`: the platform's)
/// already handled; each event left that lies behind the stored position
/// raises `lateness` and is logged as listed late.
///
/// # Errors
/// [`EventsError`] from the database.
pub(super) async fn fresh(
    ctx: &EventsContext<'_>,
    account: Option<&AccountId>,
    mut read: SliceEvents,
    lateness: &mut Lateness,
    summary: &mut EventsSummary,
) -> Result<SliceEvents, EventsError> {
    let ids: Vec<&str> = read
        .events
        .iter()
        .map(|e| e.id.as_str())
        .chain(read.sessions.iter().map(|e| e.id.as_str()))
        .collect();
    let job = feed_job(ctx, account);
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("starting a transaction")?;
    let seen = events_seen::among(&mut tx, &job, &ids).await?;
    tx.commit().await.context("committing")?;
    let before = read.len();
    read.events.retain(|e| !seen.contains(&e.id));
    read.sessions.retain(|e| !seen.contains(&e.id));
    summary.events_seen_before += (before - read.len()) as u64;
    let created = read.events.iter().map(|e| (e.id.as_str(), e.created));
    let created = created.chain(read.sessions.iter().map(|e| (e.id.as_str(), e.created)));
    for (id, at) in created {
        if let Some(late) = lateness.observe(at) {
            summary.events_listed_late += 1;
            tracing::info!(event = %id, late_seconds = late, feed = %job, "an event listed late, behind the position: handled now; the overlap behind the position widens to follow it");
        }
    }
    Ok(read)
}
