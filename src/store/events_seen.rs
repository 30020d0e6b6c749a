//! `reconciliation_events_seen` (migration 0022): the events a feed already
//! handled within the reach of any overlap (docs/events.md, "Events listed
//! late"). A run re-reads the overlap behind its position; an event found
//! here is not handled twice, and one behind the position that is not here
//! was listed late.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{Context, StoreError};

/// Which of `ids` the feed `job` (its position row's name) already handled.
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
    let seen: Vec<String> = super::query_scalar(
        "SELECT event_id FROM reconciliation_events_seen WHERE job = $1 AND event_id = ANY($2)",
    )
    .bind(job)
    .bind(ids)
    .fetch_all(conn)
    .await
    .context("reading the events already handled")?;
    Ok(seen.into_iter().collect())
}

/// Remembers `events` (`(id, created)`) as handled by the feed `job`, in the
/// caller's transaction (the one that commits their slice), and forgets the
/// feed's events created more than `reach` before `covered_until` (no
/// overlap re-reads them).
///
/// # Errors
/// [`StoreError`] when a statement fails.
pub async fn remember(
    conn: &mut PgConnection,
    job: &str,
    events: &[(&str, DateTime<Utc>)],
    covered_until: DateTime<Utc>,
    reach: Duration,
) -> Result<(), StoreError> {
    if !events.is_empty() {
        let (ids, created): (Vec<&str>, Vec<DateTime<Utc>>) = events.iter().copied().unzip();
        super::query(
            "INSERT INTO reconciliation_events_seen (job, event_id, event_created)
             SELECT $1, v.id, v.created FROM unnest($2::text[], $3::timestamptz[]) AS v(id, created)
             ON CONFLICT (job, event_id) DO NOTHING",
        )
        .bind(job)
        .bind(&ids)
        .bind(&created)
        .execute(&mut *conn)
        .await
        .context("remembering the events handled")?;
    }
    super::query(
        "DELETE FROM reconciliation_events_seen
          WHERE job = $1 AND event_created < $2 - make_interval(secs => $3)",
    )
    .bind(job)
    .bind(covered_until)
    .bind(reach.as_secs_f64())
    .execute(conn)
    .await
    .context("forgetting events no overlap re-reads")?;
    Ok(())
}
