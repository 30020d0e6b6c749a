//! How many batches a run starts (docs/operations.md, "Sizing"): a fixed
//! `RECONCILER_BATCHES_PER_RUN`, or for `auto` the [`capacity::plan`] from
//! the table, the cursor and the run history read at the start of the run.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::groups::ScanGroups;
use crate::capacity::{self, Pace, PlanInput, RunPlan};
use crate::config::{ReadMode, RunSettings, ScanSettings, Sizing, StripeSettings};
use crate::facts::TableFacts;
use crate::store::runs::{self, RunHistory};
use crate::store::stats::{self, TableFigures};
use crate::store::{Context, StoreError};

/// Rows one list request verifies at the defaults (BENCHMARKS.md, L1: pages
/// of 100 PaymentIntents, a few per batch outside the window).
pub const LIST_ROWS_PER_REQUEST: f64 = 95.0;

/// What the plan is computed from: the table and cursor, and the run history.
#[derive(Debug, Clone, Copy)]
pub struct PlanFigures<'a> {
    /// `payments`, the cursor and the database's clock.
    pub table: &'a TableFigures,
    /// The last 24 hours of runs.
    pub history: &'a RunHistory,
}

/// What the plan follows: the run deadline (`run`), the batch size, read
/// mode, cycle target and schedule (`scan`), the rate limit (`stripe`).
#[derive(Debug, Clone, Copy)]
pub struct PlanSettings<'a> {
    /// `RECONCILER_RUN_DEADLINE_SECONDS`.
    pub run: &'a RunSettings,
    /// `RECONCILER_BATCH_SIZE`, `RECONCILER_BATCHES_PER_RUN`, the read mode,
    /// `RECONCILER_TARGET_CYCLE_SECONDS`, `RECONCILER_SCHEDULE_INTERVAL_SECONDS`.
    pub scan: &'a ScanSettings,
    /// `RECONCILER_RATE_LIMIT_RPS`.
    pub stripe: &'a StripeSettings,
}

impl<'a> From<&ScanGroups<'a>> for PlanSettings<'a> {
    fn from(g: &ScanGroups<'a>) -> Self {
        PlanSettings {
            run: g.run,
            scan: g.scan,
            stripe: g.stripe,
        }
    }
}

/// The plan for `settings` from `figures` (PURE): the batches a run starts
/// and the cycle they lead to.
pub fn plan_for(settings: PlanSettings<'_>, figures: PlanFigures<'_>) -> RunPlan {
    let input = plan_input(settings, figures);
    match settings.scan.batches_per_run {
        Sizing::Auto => capacity::plan(input),
        Sizing::Fixed(n) => capacity::fixed(input, n),
    }
}

/// The planning function's inputs (PURE).
pub fn plan_input(settings: PlanSettings<'_>, figures: PlanFigures<'_>) -> PlanInput {
    let (t, h) = (figures.table, figures.history);
    let rows_per_request = match settings.scan.read_mode {
        ReadMode::List => LIST_ROWS_PER_REQUEST,
        ReadMode::Retrieve => 1.0,
    };
    let rate_rows_per_second = f64::from(settings.stripe.rate_limit_rps) * rows_per_request;
    let pace = if h.paced_rows > 0 && h.paced_seconds > 0.0 {
        Pace {
            rows_per_second: h.paced_rows as f64 / h.paced_seconds,
            measured: true,
        }
    } else {
        // A first run: the rate limit is the pace; the run deadline still
        // stops it if Stripe answers slower than that.
        Pace {
            rows_per_second: rate_rows_per_second,
            measured: false,
        }
    };
    let growth = h.growth().max(0);
    let interval = settings.scan.schedule_interval.as_secs_f64();
    PlanInput {
        rows_ahead: rows_ahead(t),
        new_rows_per_second: if h.span_seconds >= 60.0 {
            growth as f64 / h.span_seconds
        } else {
            0.0
        },
        cycle_elapsed_seconds: elapsed(t.cycle_started_at, t.database_now),
        target_cycle_seconds: settings.scan.target_cycle.as_secs_f64(),
        schedule_interval_seconds: interval,
        run_seconds: settings
            .run
            .run_deadline
            .map_or(interval, |d| d.as_secs_f64()),
        pace,
        rate_rows_per_second,
        batch_size: settings.scan.batch_size,
    }
}

/// Rows ahead of the cursor: from the id range for integer keys (exact for
/// dense ids, and it follows a cursor set by hand), else the rows left after
/// the cycle's rows done (`cycle_rows_done`: a uuid or text key's value says
/// nothing about how far the cycle has come).
fn rows_ahead(t: &TableFigures) -> f64 {
    match (t.min_id, t.max_id) {
        (Some(lo), Some(hi)) if hi >= lo => {
            // In f64: ids may span the whole bigint range (docs/keys.md); at the
            // cycle's start (no cursor key) nothing is behind, ids ≤ 0 too.
            let (lo, hi) = (lo as f64, hi as f64);
            let cursor = match t.cursor_key {
                Some(_) => t.cursor_position as f64,
                None => lo - 1.0,
            };
            let behind = cursor.clamp(lo - 1.0, hi) - lo + 1.0;
            t.rows_estimate.max(0.0) * (1.0 - behind / (hi - lo + 1.0))
        }
        _ => (t.rows_estimate - t.cycle_rows_done as f64).max(0.0),
    }
}

fn elapsed(since: Option<DateTime<Utc>>, now: DateTime<Utc>) -> f64 {
    since.map_or(0.0, |s| {
        ((now - s).num_milliseconds() as f64 / 1000.0).max(0.0)
    })
}

/// Reads the figures and plans this run. When they cannot be read the plan
/// assumes an empty history and table (one batch for `auto`): the run's own
/// first query reports the database error.
pub(super) async fn plan_run(pool: &PgPool, settings: &ScanGroups<'_>) -> RunPlan {
    let figures = read_figures(pool, settings.run, settings.facts)
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read the figures to plan the run");
            (TableFigures::default(), RunHistory::default())
        });
    let plan = plan_for(
        settings.into(),
        PlanFigures {
            table: &figures.0,
            history: &figures.1,
        },
    );
    log_plan(settings.scan, &plan);
    plan
}

async fn read_figures(
    pool: &PgPool,
    run: &RunSettings,
    facts: &TableFacts,
) -> Result<(TableFigures, RunHistory), StoreError> {
    // One read transaction (pooler-safe: docs/schema.md); rolled back on drop.
    let mut conn = crate::store::begin(pool).await.context("connecting")?;
    let partition = facts.partition.as_ref();
    let table =
        stats::table_figures(&mut conn, &run.job, partition, &facts.key, &facts.times).await?;
    let history = runs::history(&mut conn, &run.job, partition).await?;
    Ok((table, history))
}

fn log_plan(scan: &ScanSettings, p: &RunPlan) {
    let expected = p.expected_cycle_seconds.map(f64::round);
    match p.shortfall {
        None => tracing::info!(
            batches_per_run = %scan.batches_per_run.as_text(),
            planned_batches = p.batches,
            rows_per_run_needed = p.rows_per_run_needed.round(),
            rows_per_run_planned = p.rows_per_run_planned,
            pace_rows_per_second = p.pace.rows_per_second,
            pace_measured = p.pace.measured,
            expected_cycle_seconds = expected,
            target_cycle_seconds = p.target_cycle_seconds,
            "run planned"
        ),
        Some(why) => tracing::warn!(
            batches_per_run = %scan.batches_per_run.as_text(),
            planned_batches = p.batches,
            rows_per_run_needed = p.rows_per_run_needed.round(),
            rows_per_run_planned = p.rows_per_run_planned,
            pace_rows_per_second = p.pace.rows_per_second,
            pace_measured = p.pace.measured,
            expected_cycle_seconds = expected,
            target_cycle_seconds = p.target_cycle_seconds,
            target_ratio = p.target_ratio,
            shortfall = why.as_str(),
            "the cycle target cannot be met ({}): doing what fits; raise RECONCILER_RUN_DEADLINE_SECONDS or RECONCILER_RATE_LIMIT_RPS, run more often, or set a longer RECONCILER_TARGET_CYCLE_SECONDS",
            why.as_str()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_ahead_follow_the_cursor_through_the_id_range() {
        let t = |cursor| TableFigures {
            rows_estimate: 1_000.0,
            min_id: Some(1),
            max_id: Some(1_000),
            cursor_position: cursor,
            cursor_key: (cursor != 0).then(|| cursor.to_string()),
            ..TableFigures::default()
        };
        assert_eq!(rows_ahead(&t(0)), 1_000.0);
        assert_eq!(rows_ahead(&t(250)), 750.0);
        assert_eq!(rows_ahead(&t(5_000)), 0.0);
        assert_eq!(rows_ahead(&TableFigures::default()), 0.0);
        // A key walk (no id range): the rows left after the cycle's rows done.
        let uuid = |done| TableFigures {
            rows_estimate: 20_000.0,
            cycle_rows_done: done,
            cursor_key: (done != 0).then(|| "0f1e".to_owned()),
            ..TableFigures::default()
        };
        assert_eq!(rows_ahead(&uuid(0)), 20_000.0);
        assert_eq!(rows_ahead(&uuid(6_000)), 14_000.0);
        assert_eq!(rows_ahead(&uuid(25_000)), 0.0);
        // Ids over the whole bigint range, the cursor at the start or at 0.
        let wide = |key: Option<&str>| TableFigures {
            rows_estimate: 8.0,
            min_id: Some(i64::MIN),
            max_id: Some(i64::MAX),
            cursor_position: 0,
            cursor_key: key.map(str::to_owned),
            ..TableFigures::default()
        };
        assert_eq!(rows_ahead(&wide(None)), 8.0);
        assert_eq!(rows_ahead(&wide(Some("0"))), 4.0);
    }

    #[test]
    fn a_first_run_paces_itself_by_the_rate_limit_and_the_read_mode() {
        let (t, h) = (TableFigures::default(), RunHistory::default());
        let figures = PlanFigures {
            table: &t,
            history: &h,
        };
        let (run, stripe) = (RunSettings::default(), StripeSettings::default());
        let list_scan = ScanSettings::default();
        let list = PlanSettings {
            run: &run,
            scan: &list_scan,
            stripe: &stripe,
        };
        assert_eq!(plan_input(list, figures).pace.rows_per_second, 950.0);
        let retrieve_scan = ScanSettings {
            read_mode: ReadMode::Retrieve,
            ..ScanSettings::default()
        };
        let retrieve = PlanSettings {
            scan: &retrieve_scan,
            ..list
        };
        let p = plan_input(retrieve, figures).pace;
        assert_eq!((p.rows_per_second, p.measured), (10.0, false));
        let measured = RunHistory {
            paced_rows: 9_000,
            paced_seconds: 10.0,
            ..RunHistory::default()
        };
        let figures = PlanFigures {
            table: &t,
            history: &measured,
        };
        let p = plan_input(list, figures).pace;
        assert_eq!((p.rows_per_second, p.measured), (900.0, true));
    }
}
