//! The job's state, as `status` prints it and the metrics push it: cursor and
//! cycle, lag, open findings, outbox backlog, capacity.
//!
//! - `screen`: [`render`], the screen of `status` for people.
//! - `lag_holder`: the screen's lines on the payment that holds the lag.

mod lag_holder;
mod screen;

pub use screen::render;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;

use crate::capacity::{self, Capacity, RunPlan};
use crate::config::{
    EventsSettings, OutboxSettings, Partition, PaymentTimes, RunSettings, SchemaSettings,
    STRIPE_EVENTS_RETENTION,
};
use crate::events::events_job;
use crate::reconcile::RepairCommand;
use crate::scan::plan::{plan_for, PlanFigures};
use crate::scan::ScanGroups;
use crate::store::stats::LagHolder;
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
    /// The cursor's key as text, any key type (issue 31); `None` (JSON
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
    /// (`null`) for a `debezium` outbox, which the application's relay drains
    /// (see [`stats::outbox_figures`]).
    pub outbox_pending: Option<i64>,
    /// Age in seconds of the oldest unprocessed repair command (0 when none);
    /// `None` (`null`) for a `debezium` outbox.
    pub outbox_oldest_pending_seconds: Option<f64>,
    /// `RECONCILER_OUTBOX_SHAPE` (`reconciler` or `debezium`): says whose
    /// backlog the two figures above would be.
    pub outbox_shape: &'static str,
    /// `None` until the job has two runs a minute apart in the last 24 hours.
    pub capacity: Option<Capacity>,
    /// When a run last completed (Unix seconds).
    pub last_success_unix: Option<f64>,
    /// The payment that holds the lag, so an operator knows where to look;
    /// `None` for an empty table.
    pub lag_held_by: Option<LagHolder>,
    /// What the next run plans (issue 23): batches, rows per run needed, the
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

/// Reads the status of `job` (within `partition`, when one is set: every
/// figure about `payments` counts only its rows); the outbox figures come
/// from `outbox` (`RECONCILER_OUTBOX_TABLE`, `RECONCILER_OUTBOX_SHAPE`).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read(
    conn: &mut PgConnection,
    job: &str,
    outbox: &OutboxSettings,
    partition: Option<&Partition>,
) -> Result<Status, StoreError> {
    let times = PaymentTimes::default();
    read_figures(conn, job, outbox, partition, &times, None).await
}

/// [`read`] for a job's settings: its name (`run`), its partition and its
/// timestamps as detected at start (`schema`, `RECONCILER_TIMESTAMP_ZONE`)
/// and its outbox, without the plan of [`read_planned`].
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read_job(
    conn: &mut PgConnection,
    run: &RunSettings,
    schema: &SchemaSettings,
    outbox: &OutboxSettings,
) -> Result<Status, StoreError> {
    let partition = schema.partition.as_ref();
    read_figures(conn, &run.job, outbox, partition, &schema.times, None).await
}

/// Reads the status of the scan's job (`scan`) with the next run's plan, and
/// of its events job (`RECONCILER_EVENTS_ACCOUNT_ACTIVE_SECONDS` of `events`).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read_planned(
    conn: &mut PgConnection,
    scan: &ScanGroups<'_>,
    events: &EventsSettings,
) -> Result<Status, StoreError> {
    let partition = scan.schema.partition.as_ref();
    let times = &scan.schema.times;
    let planned = Some((scan, events));
    read_figures(conn, &scan.run.job, scan.outbox, partition, times, planned).await
}

/// The figures of `job`; with `planned` (the scan's groups and the events
/// group), the next run's plan and the detected key.
async fn read_figures(
    conn: &mut PgConnection,
    job: &str,
    outbox: &OutboxSettings,
    partition: Option<&Partition>,
    times: &PaymentTimes,
    planned: Option<(&ScanGroups<'_>, &EventsSettings)>,
) -> Result<Status, StoreError> {
    let types = RepairCommand::EVENT_TYPES;
    let key = match planned {
        Some((s, _)) => s.schema.key.clone(),
        None => crate::store::keys::current(conn).await?,
    };
    let t = stats::table_figures(conn, job, partition, &key, times).await?;
    let backlog = stats::outbox_figures(conn, outbox, &types).await?;
    let open_findings = stats::open_findings_by_kind(conn, partition).await?;
    let lag_held_by = stats::lag_holder(conn, outbox, &types, partition, times, &key).await?;
    let h = runs::history(conn, job, partition).await?;
    let active = planned.map_or(STRIPE_EVENTS_RETENTION, |(_, e)| e.account_active);
    let events = events_position::figures(conn, &events_job(job), active)
        .await?
        .map(events_shown);
    let growth = h.growth();
    let now = t.database_now;
    let (cycle_progress_percent, cycle_age_seconds, cycle_last_completed_unix) = cycle_of(&t);
    let figures = PlanFigures {
        table: &t,
        history: &h,
    };
    let plan = planned.map(|(s, _)| plan_for(s.into(), figures));
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
    let percent = if t.cursor_key.is_some() {
        progress(t.min_id, t.max_id, t.cursor_position)
    } else {
        0.0
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
            // In f64: ids may span the whole bigint range (issue 31).
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
