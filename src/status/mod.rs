//! The job's state, as `status` prints it and the metrics push it: cursor and
//! cycle, lag, open findings, outbox backlog, capacity.
//!
//! - `screen`: [`render`], the screen of `status` for people.
//! - `lag_holder`: the screen's lines on the payment that holds the lag.

mod lag_holder;
mod screen;

pub use screen::render;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;

use crate::capacity::{self, Capacity, RunPlan};
use crate::config::{OutboxSettings, Partition, PaymentTimes, STRIPE_EVENTS_RETENTION};
use crate::key::KeyType;
use crate::reconcile::RepairCommand;
use crate::store::runs::RunHistory;
use crate::store::stats::{LagHolder, TableFigures};
use crate::store::{events_position, runs, stats, StoreError};

/// Everything `status` shows; `status --json` prints it as one object whose
/// shape is documented in the README ("status --json") and pinned by a test:
/// keys are only ever added. Counts are integers; durations are seconds and
/// instants Unix seconds (floats); unknown values are `null`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    /// `RECONCILER_JOB`
    pub job: String,
    /// `RECONCILER_PARTITION_COLUMN` and `RECONCILER_PARTITION_VALUE`: the
    /// rows every figure below counts; `None` (`null`): the whole table.
    pub partition: Option<PartitionShown>,
    /// Reconciliation lag in seconds (oldest time since a row was confirmed).
    pub lag_seconds: f64,
    /// Rows in `payments` (planner estimate on large tables; an integer in JSON).
    #[serde(serialize_with = "as_integer")]
    pub rows: f64,
    /// Cursor position (`payments.id`).
    pub cursor_position: i64,
    /// The cursor's key as text, any key type (docs/keys.md); `None` (JSON
    /// `null`) at the cycle's start.
    pub cursor_key: Option<String>,
    /// Share of the id range behind the cursor, 0 to 100.
    pub cycle_progress_percent: f64,
    /// Seconds since the current cycle started; `None` before the first run.
    pub cycle_age_seconds: Option<f64>,
    /// When the last cycle completed (Unix seconds).
    pub cycle_last_completed_unix: Option<f64>,
    /// Open findings per kind (`{"missed_success": 2, ...}` in JSON).
    pub open_findings: BTreeMap<String, i64>,
    /// Unprocessed repair commands in `RECONCILER_OUTBOX_TABLE`; `None`
    /// (`null`) for a `debezium` or `plain` outbox, which the application's relay drains
    /// (see [`stats::outbox_figures`]).
    pub outbox_pending: Option<i64>,
    /// Age in seconds of the oldest unprocessed repair command (0 when none);
    /// `None` (`null`) for a `debezium` or `plain` outbox.
    pub outbox_oldest_pending_seconds: Option<f64>,
    /// `RECONCILER_OUTBOX_SHAPE` (`reconciler`, `plain` or `debezium`): says whose
    /// backlog the two figures above would be.
    pub outbox_shape: &'static str,
    /// `None` until the job has two runs a minute apart in the last 24 hours.
    pub capacity: Option<Capacity>,
    /// When a run last completed (Unix seconds).
    pub last_success_unix: Option<f64>,
    /// The payment that holds the lag, so an operator knows where to look;
    /// `None` for an empty table.
    pub lag_held_by: Option<LagHolder>,
    /// What the next run plans (docs/operations.md, "Sizing (`auto`)"): batches, rows per run needed, the
    /// pace (rows per second, measured or estimated), the expected cycle
    /// against the target; `None` when read without the settings.
    pub plan: Option<RunPlan>,
    /// The events job (`<RECONCILER_JOB>-events`): its lag, the connected
    /// accounts' feeds and the PaymentIntents waiting for another read;
    /// `None` (`null`) when it never ran.
    pub events: Option<EventsShown>,
    /// The database's clock when the status was read: every age above and
    /// every "ago" `status` prints is measured with it, like the lag, so a
    /// skewed pod clock cannot distort them. Not part of the JSON.
    #[serde(skip)]
    pub database_now: DateTime<Utc>,
}

/// The partition a status is about (`{"column": ..., "value": ...}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionShown {
    /// `RECONCILER_PARTITION_COLUMN`.
    pub column: String,
    /// `RECONCILER_PARTITION_VALUE`, exactly (escaped on the screen only).
    pub value: String,
}

impl PartitionShown {
    /// How `status` shows `partition`.
    fn of(partition: &Partition) -> Self {
        PartitionShown {
            column: partition.column.as_str().to_owned(),
            value: partition.value.clone(),
        }
    }
}

/// What `status` shows of the events job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventsShown {
    /// Seconds from the most lagging feed's position (the platform's or an
    /// active connected account's) to now, as `events_lag_seconds`.
    pub lag_seconds: Option<f64>,
    /// The platform feed's position (Unix seconds).
    pub covered_until_unix: Option<f64>,
    /// When an events run last committed (Unix seconds).
    pub last_success_unix: Option<f64>,
    /// Connected accounts' feeds moved within
    /// `RECONCILER_EVENTS_ACCOUNT_ACTIVE_SECONDS`.
    pub connected_accounts: i64,
    /// PaymentIntents waiting for another read (row in grace, no row yet,
    /// Stripe did not answer), as `events_payment_intents_held`.
    pub payment_intents_held: i64,
    /// The oldest event among them (Unix seconds).
    pub oldest_held_event_unix: Option<f64>,
}

fn unix(t: Option<DateTime<Utc>>) -> Option<f64> {
    t.map(|t| t.timestamp_millis() as f64 / 1000.0)
}

fn as_integer<S: serde::Serializer>(value: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_i64(value.round() as i64)
}

/// The next run's plan from the table's figures and the run history.
pub type PlanOf<'a> = dyn Fn(&TableFigures, &RunHistory) -> RunPlan + 'a;

/// What a status is read for, filled by the job that reads it (the scan's
/// job and its events job, or the `status` command): names, groups and the
/// plan, never a job's own type.
#[derive(Clone, Copy)]
pub struct StatusQuery<'a> {
    /// `RECONCILER_JOB`: the cursor, the run history.
    pub job: &'a str,
    /// The events job's name (`<RECONCILER_JOB>-events`): its position;
    /// `None`: the events job's figures are not read.
    pub events_job: Option<&'a str>,
    /// `RECONCILER_OUTBOX_TABLE` and `RECONCILER_OUTBOX_SHAPE`.
    pub outbox: &'a OutboxSettings,
    /// The partition every figure about `payments` counts within.
    pub partition: Option<&'a Partition>,
    /// How `payments`' timestamps are read.
    pub times: &'a PaymentTimes,
    /// `payments.id`'s type as detected at start; `None`: read from the
    /// catalogue.
    pub key: Option<&'a KeyType>,
    /// `RECONCILER_EVENTS_ACCOUNT_ACTIVE_SECONDS`: which connected
    /// accounts' feeds count.
    pub account_active: Duration,
    /// The next run's plan from the table and the history (`None`: no plan).
    pub plan: Option<&'a PlanOf<'a>>,
}

/// Reads the status of `job` and of its events job `events_job` (within
/// `partition`, when one is set: every figure about `payments` counts only
/// its rows); the outbox figures come from `outbox`
/// (`RECONCILER_OUTBOX_TABLE`, `RECONCILER_OUTBOX_SHAPE`). No plan; the key
/// type read from the catalogue.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read(
    conn: &mut PgConnection,
    job: &str,
    events_job: Option<&str>,
    outbox: &OutboxSettings,
    partition: Option<&Partition>,
) -> Result<Status, StoreError> {
    let times = PaymentTimes::default();
    let query = StatusQuery {
        job,
        events_job,
        outbox,
        partition,
        times: &times,
        key: None,
        account_active: STRIPE_EVENTS_RETENTION,
        plan: None,
    };
    read_query(conn, &query).await
}

/// Reads the status `query` asks for.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read_query(
    conn: &mut PgConnection,
    query: &StatusQuery<'_>,
) -> Result<Status, StoreError> {
    let StatusQuery {
        job,
        outbox,
        partition,
        times,
        ..
    } = *query;
    let types = RepairCommand::EVENT_TYPES;
    let key = match query.key {
        Some(key) => key.clone(),
        None => crate::store::keys::current(conn).await?,
    };
    let t = stats::table_figures(conn, job, partition, &key, times).await?;
    let backlog = stats::outbox_figures(conn, outbox, &types).await?;
    let open_findings = stats::open_findings_by_kind(conn, partition).await?;
    let lag_held_by = stats::lag_holder(conn, outbox, &types, partition, times, &key).await?;
    let h = runs::history(conn, job, partition).await?;
    let events = match query.events_job {
        Some(events_job) => events_position::figures(conn, events_job, query.account_active)
            .await?
            .map(events_shown),
        None => None,
    };
    let growth = h.growth();
    let now = t.database_now;
    let (cycle_progress_percent, cycle_age_seconds, cycle_last_completed_unix) = cycle_of(&t);
    let plan = query.plan.map(|plan| plan(&t, &h));
    Ok(Status {
        plan,
        job: job.to_owned(),
        partition: partition.map(PartitionShown::of),
        lag_seconds: t.lag_seconds,
        rows: t.rows_estimate,
        cursor_position: t.cursor_position,
        cursor_key: t.cursor_key.clone(),
        cycle_progress_percent,
        cycle_age_seconds,
        cycle_last_completed_unix,
        open_findings,
        outbox_pending: backlog.map(|b| b.pending),
        outbox_oldest_pending_seconds: backlog.map(|b| b.oldest_pending_seconds),
        outbox_shape: outbox.shape.as_str(),
        capacity: capacity::from_history(
            t.rows_estimate,
            h.runs,
            h.rows_scanned_before_newest,
            h.span_seconds,
            growth,
        ),
        last_success_unix: h.last_success_unix,
        lag_held_by,
        events,
        database_now: now,
    })
}

/// The cycle's figures from `t`: the cursor's share of the cycle (percent;
/// 0 before a cursor), the cycle's age (seconds) and when the last cycle
/// completed (Unix time).
fn cycle_of(t: &stats::TableFigures) -> (f64, Option<f64>, Option<f64>) {
    let percent = match (t.cursor_key.is_some(), t.min_id) {
        (false, _) => 0.0,
        (true, Some(_)) => progress(t.min_id, t.max_id, t.cursor_position),
        // A key walk (uuid, text): the cycle's rows done (docs/keys.md).
        (true, None) if t.rows_estimate > 0.0 => {
            (t.cycle_rows_done as f64 / t.rows_estimate * 100.0).min(100.0)
        }
        (true, None) => 0.0,
    };
    let age = t
        .cycle_started_at
        .map(|s| (t.database_now - s).num_milliseconds() as f64 / 1000.0);
    let completed = t
        .last_cycle_completed_at
        .map(|c| c.timestamp_millis() as f64 / 1000.0);
    (percent, age, completed)
}

/// The events job's figures as `status` shows them.
fn events_shown(f: events_position::EventsFigures) -> EventsShown {
    EventsShown {
        lag_seconds: f
            .oldest_covered
            .map(|c| ((f.database_now - c).num_milliseconds() as f64 / 1000.0).max(0.0)),
        covered_until_unix: unix(f.covered_until),
        last_success_unix: unix(f.last_success_at),
        connected_accounts: f.connected_accounts,
        payment_intents_held: f.payment_intents_held,
        oldest_held_event_unix: unix(f.oldest_held_event),
    }
}

fn progress(min_id: Option<i64>, max_id: Option<i64>, cursor: i64) -> f64 {
    match (min_id, max_id) {
        (Some(lo), Some(hi)) if hi > lo && cursor >= lo => {
            // In f64: ids may span the whole bigint range (docs/keys.md).
            let (lo, hi, cursor) = (lo as f64, hi as f64, cursor as f64);
            ((cursor - lo + 1.0) / (hi - lo + 1.0) * 100.0).min(100.0)
        }
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_the_share_of_the_id_range_behind_the_cursor() {
        assert_eq!(progress(Some(1), Some(100), 50), 50.0);
        assert_eq!(progress(Some(1), Some(100), 0), 0.0);
        assert_eq!(progress(None, None, 0), 0.0);
        assert_eq!(progress(Some(1), Some(100), 100), 100.0);
    }
}
