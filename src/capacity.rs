//! Pure capacity arithmetic (docs/design.md, "The cursor and cycles"): with N rows, B·R rows
//! scanned per hour and G new rows per hour, a cycle takes N / (B·R − G) hours
//! and never completes when B·R <= G. [`plan`] sizes a run for
//! `RECONCILER_BATCHES_PER_RUN=auto` (docs/operations.md, "Sizing (`auto`)"): the batches that
//! end the
//! cycle within the target, capped by what fits before the run deadline.

use serde::Serialize;

/// Capacity figures, all per hour or in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Capacity {
    /// B·R: rows the job scans per hour, measured from its run history.
    pub scanned_rows_per_hour: f64,
    /// G: new payments per hour, measured from `max(payments.id)` growth.
    pub new_rows_per_hour: f64,
    /// B·R / G; `+Inf` when no rows arrive (serialised as `null` in JSON).
    pub ratio: f64,
    /// N / (B·R − G) in seconds; `None` ("never") when B·R <= G.
    pub expected_cycle_seconds: Option<f64>,
}

/// Computes the capacity from the measured rates; `rows` is N.
pub fn capacity(rows: f64, scanned_rows_per_hour: f64, new_rows_per_hour: f64) -> Capacity {
    let ratio = if new_rows_per_hour > 0.0 {
        scanned_rows_per_hour / new_rows_per_hour
    } else if scanned_rows_per_hour > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    let net = scanned_rows_per_hour - new_rows_per_hour;
    Capacity {
        scanned_rows_per_hour,
        new_rows_per_hour,
        ratio,
        expected_cycle_seconds: (net > 0.0).then(|| rows.max(0.0) / net * 3600.0),
    }
}

/// Measures B·R and G from the run history: rows scanned and id growth
/// between the first and the newest run start in the window. `None` when
/// there are fewer than two runs, they span less than a minute, or they
/// scanned nothing.
pub fn from_history(
    rows: f64,
    runs: i64,
    rows_scanned_between: i64,
    span_seconds: f64,
    id_growth: i64,
) -> Option<Capacity> {
    if runs < 2 || span_seconds < 60.0 || rows_scanned_between <= 0 {
        // Nothing scanned (an empty table, failing runs): B·R is unknown, not 0.
        return None;
    }
    let hours = span_seconds / 3600.0;
    Some(capacity(
        rows,
        rows_scanned_between as f64 / hours,
        id_growth.max(0) as f64 / hours,
    ))
}

/// Extra rows `auto` plans per run over the bare need (20%), so a
/// slow run or a burst of new payments does not push the cycle past its target.
pub const PLAN_MARGIN: f64 = 1.2;

/// What `RECONCILER_BATCHES_PER_RUN=auto` knows at the start of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanInput {
    /// Rows ahead of the cursor in this cycle (they are read before it ends).
    pub rows_ahead: f64,
    /// G: new payments per second (from the run history; 0 when unknown).
    pub new_rows_per_second: f64,
    /// Seconds since the current cycle started (0 at a fresh start).
    pub cycle_elapsed_seconds: f64,
    /// `RECONCILER_TARGET_CYCLE_SECONDS`.
    pub target_cycle_seconds: f64,
    /// `RECONCILER_SCHEDULE_INTERVAL_SECONDS`: seconds between two runs.
    pub schedule_interval_seconds: f64,
    /// Seconds a run may scan: `RECONCILER_RUN_DEADLINE_SECONDS`, else the
    /// schedule interval (a longer run makes the CronJob skip the next one).
    pub run_seconds: f64,
    /// Rows per second a run reads ([`Pace`]).
    pub pace: Pace,
    /// Rows per second the Stripe rate limit allows at the read mode's
    /// requests per row (`RECONCILER_RATE_LIMIT_RPS` × rows per request).
    pub rate_rows_per_second: f64,
    /// B, `RECONCILER_BATCH_SIZE`.
    pub batch_size: u32,
}

/// A run's pace in rows per second, and where it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pace {
    /// Rows per second.
    pub rows_per_second: f64,
    /// `true`: measured from the run history (rows scanned over run time);
    /// `false`: estimated from the rate limit (no run scanned rows yet).
    pub measured: bool,
}

/// Why a run cannot do what the target needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shortfall {
    /// Even at the full Stripe rate limit the rows do not fit in a run.
    RateBudget,
    /// At the measured pace the rows do not fit before the run deadline.
    Deadline,
    /// A fixed `RECONCILER_BATCHES_PER_RUN` is too small for the target.
    BatchesPerRun,
}

impl Shortfall {
    /// `rate_budget` or `deadline`.
    pub fn as_str(self) -> &'static str {
        match self {
            Shortfall::RateBudget => "rate_budget",
            Shortfall::Deadline => "deadline",
            Shortfall::BatchesPerRun => "batches_per_run",
        }
    }
}

/// The batches `auto` starts, and what they mean for the cycle.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RunPlan {
    /// Batches this run starts (at least one).
    pub batches: u32,
    /// Rows each run must read to end the cycle within the target (margin
    /// included); a count, so an integer in JSON (rounded up).
    #[serde(serialize_with = "rows_up")]
    pub rows_per_run_needed: f64,
    /// Rows the planned batches read (`batches × B`); an integer in JSON.
    #[serde(serialize_with = "rows_up")]
    pub rows_per_run_planned: f64,
    /// The pace the plan assumed.
    pub pace: Pace,
    /// `RECONCILER_TARGET_CYCLE_SECONDS`.
    pub target_cycle_seconds: f64,
    /// The cycle's expected length if every run reads the planned rows;
    /// `None` ("never") when that is no more than the inflow.
    pub expected_cycle_seconds: Option<f64>,
    /// Planned rows over the rows needed without the margin: below 1
    /// exactly when the target cannot be met (`shortfall` says why); `+Inf`
    /// when nothing is needed.
    pub target_ratio: f64,
    /// Why the target cannot be met; `None` when it can.
    pub shortfall: Option<Shortfall>,
}

/// A count of rows held as a float for the arithmetic, written as the
/// integer it stands for (rounded up: the rows a run needs are whole rows;
/// a figure within 1e-6 of an integer is that integer, so `4019.999999999999`
/// is 4020). JSON counts are integers (docs/design.md, "Invariants").
fn rows_up<S: serde::Serializer>(value: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(whole_rows(*value))
}

/// `rows_up`'s rounding: not negative, not NaN, saturating.
pub fn whole_rows(value: f64) -> u64 {
    if !value.is_finite() || value <= 0.0 {
        return if value == f64::INFINITY { u64::MAX } else { 0 };
    }
    let nearest = value.round();
    let whole = if (value - nearest).abs() < 1e-6 {
        nearest
    } else {
        value.ceil()
    };
    whole as u64
}

/// Plans a run: the rows still to read in this cycle (those ahead
/// of the cursor plus G × the time left) spread over the runs left before the
/// target, plus [`PLAN_MARGIN`]; at least one batch; at most what fits in
/// `run_seconds` at the pace. A cycle already past its target gets every
/// batch that fits.
pub fn plan(input: PlanInput) -> RunPlan {
    let need = Need::of(&input);
    let b = f64::from(input.batch_size.max(1));
    let fit_rows = input.run_seconds.max(0.0) * input.pace.rows_per_second.max(0.0);
    let fit = (fit_rows / b).floor().max(1.0);
    let wanted = (need.bare * PLAN_MARGIN / b).ceil().max(1.0);
    let batches = wanted.min(fit).min(f64::from(u32::MAX)) as u32;
    let rate = input.run_seconds * input.rate_rows_per_second;
    outcome(&input, &need, batches, |_| {
        if rate < need.bare {
            Shortfall::RateBudget
        } else {
            Shortfall::Deadline
        }
    })
}

/// What exactly `batches` batches per run (a fixed `RECONCILER_BATCHES_PER_RUN`)
/// mean for the cycle; the same figures as [`plan`].
pub fn fixed(input: PlanInput, batches: u32) -> RunPlan {
    let need = Need::of(&input);
    outcome(&input, &need, batches.max(1), |_| Shortfall::BatchesPerRun)
}

/// Rows per run the target needs, before the margin.
struct Need {
    bare: f64,
    interval: f64,
    inflow: f64,
}

impl Need {
    fn of(input: &PlanInput) -> Need {
        let interval = input.schedule_interval_seconds.max(1.0);
        let left = (input.target_cycle_seconds - input.cycle_elapsed_seconds).max(interval);
        // This run and the ones that start before the target passes.
        let runs_left = (left / interval).ceil().max(1.0);
        let inflow = input.new_rows_per_second.max(0.0);
        Need {
            bare: (input.rows_ahead.max(0.0) + inflow * left) / runs_left,
            interval,
            inflow,
        }
    }
}

fn outcome(
    input: &PlanInput,
    need: &Need,
    batches: u32,
    why: impl FnOnce(f64) -> Shortfall,
) -> RunPlan {
    let planned = f64::from(batches) * f64::from(input.batch_size.max(1));
    let net = planned / need.interval - need.inflow;
    RunPlan {
        batches,
        rows_per_run_needed: need.bare * PLAN_MARGIN,
        rows_per_run_planned: planned,
        pace: input.pace,
        target_cycle_seconds: input.target_cycle_seconds,
        expected_cycle_seconds: (net > 0.0)
            .then(|| input.cycle_elapsed_seconds.max(0.0) + input.rows_ahead.max(0.0) / net),
        target_ratio: if need.bare > 0.0 {
            planned / need.bare
        } else {
            f64::INFINITY
        },
        shortfall: (planned < need.bare).then(|| why(planned)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(rows_ahead: f64, g: f64) -> PlanInput {
        PlanInput {
            rows_ahead,
            new_rows_per_second: g,
            cycle_elapsed_seconds: 0.0,
            target_cycle_seconds: 86_400.0,
            schedule_interval_seconds: 600.0,
            run_seconds: 480.0,
            pace: Pace {
                rows_per_second: 900.0,
                measured: true,
            },
            rate_rows_per_second: 950.0,
            batch_size: 1_900,
        }
    }

    #[test]
    fn a_million_rows_in_a_day_take_a_few_batches_a_run() {
        // 144 runs a day; 1M / 144 = 6,944 rows, +20% = 8,333: 5 batches of 1,900.
        let p = plan(input(1_000_000.0, 0.0));
        assert_eq!(p.batches, 5);
        assert_eq!(p.rows_per_run_planned, 9_500.0);
        assert_eq!(p.shortfall, None);
        let cycle = p.expected_cycle_seconds.unwrap();
        assert!(cycle < 86_400.0 && cycle > 86_400.0 / 1.5, "{cycle}");
    }

    #[test]
    fn inflow_adds_the_rows_that_arrive_before_the_target() {
        // 10 new rows/s for a day is 864,000 more rows: 1.864M / 144 × 1.2 = 15,533.
        let p = plan(input(1_000_000.0, 10.0));
        assert_eq!(p.batches, 9);
        assert_eq!(p.shortfall, None);
        assert!(p.expected_cycle_seconds.unwrap() <= 86_400.0);
    }

    #[test]
    fn a_fixed_number_is_that_number_and_says_when_it_is_too_small() {
        let p = fixed(input(10_000_000.0, 0.0), 3);
        assert_eq!(p.batches, 3);
        assert_eq!(p.shortfall, Some(Shortfall::BatchesPerRun));
        assert_eq!(fixed(input(1_000.0, 0.0), 3).shortfall, None);
    }

    #[test]
    fn a_small_table_gets_one_batch() {
        assert_eq!(plan(input(500.0, 0.0)).batches, 1);
        assert_eq!(plan(input(0.0, 0.0)).batches, 1, "never fewer than one");
    }

    #[test]
    fn ten_million_rows_are_capped_at_what_fits_before_the_deadline() {
        // 10M / 144 × 1.2 = 83,333 rows wanted; 480 s × 900 rows/s = 432,000
        // fit, so the plan is met; with 100 rows/s only 48,000 fit: 25 batches.
        assert_eq!(plan(input(10_000_000.0, 0.0)).batches, 44);
        let mut slow = input(10_000_000.0, 0.0);
        slow.pace.rows_per_second = 100.0;
        let p = plan(slow);
        assert_eq!(p.batches, 25);
        assert_eq!(p.shortfall, Some(Shortfall::Deadline));
        assert!(p.target_ratio < 1.0);
        assert!(p.expected_cycle_seconds.unwrap() > 86_400.0);
    }

    #[test]
    fn the_rate_budget_is_named_when_even_the_full_rate_is_too_little() {
        let mut i = input(100_000_000.0, 0.0);
        i.rate_rows_per_second = 950.0;
        let p = plan(i);
        assert_eq!(p.shortfall, Some(Shortfall::RateBudget));
        assert_eq!(p.batches, 227, "480 s × 900 rows/s / 1,900");
    }

    #[test]
    fn growth_faster_than_the_job_never_completes() {
        let p = plan(input(1_000_000.0, 1_000.0));
        assert_eq!(p.expected_cycle_seconds, None);
        assert!(p.shortfall.is_some());
    }

    #[test]
    fn a_late_cycle_spends_every_batch_that_fits() {
        let mut i = input(1_000_000.0, 0.0);
        i.cycle_elapsed_seconds = 90_000.0;
        let p = plan(i);
        assert_eq!(p.batches, 227);
        // 1M rows in one run exceed even 480 s at the full rate (456,000 rows).
        assert_eq!(p.shortfall, Some(Shortfall::RateBudget));
    }

    #[test]
    fn the_last_stretch_of_a_cycle_is_spread_over_the_runs_left() {
        // 50,000 rows ahead and 1 hour left: 6 runs, 10,000 rows each.
        let mut i = input(50_000.0, 0.0);
        i.cycle_elapsed_seconds = 82_800.0;
        assert_eq!(plan(i).batches, 6);
    }

    #[test]
    fn the_design_notes_arithmetic() {
        // 2,000,000 rows, B·R = 12,000/h, G = 3,000/h: ratio 4, cycle 222.2 h.
        let c = capacity(2_000_000.0, 12_000.0, 3_000.0);
        assert_eq!(c.ratio, 4.0);
        assert_eq!(
            c.expected_cycle_seconds
                .map(|s| (s / 3600.0 * 10.0).round() / 10.0),
            Some(222.2)
        );
    }

    #[test]
    fn a_job_slower_than_growth_never_completes() {
        let c = capacity(1_000.0, 2_000.0, 2_000.0);
        assert_eq!(c.ratio, 1.0);
        assert_eq!(c.expected_cycle_seconds, None);
        assert_eq!(
            capacity(1_000.0, 1_000.0, 3_000.0).expected_cycle_seconds,
            None
        );
    }

    #[test]
    fn no_growth_is_infinite_capacity() {
        let c = capacity(1_000.0, 2_000.0, 0.0);
        assert!(c.ratio.is_infinite());
        assert_eq!(c.expected_cycle_seconds, Some(1_800.0));
    }

    #[test]
    fn history_needs_two_runs_a_minute_apart() {
        assert_eq!(from_history(10.0, 1, 0, 3600.0, 0), None);
        assert_eq!(from_history(10.0, 2, 100, 30.0, 0), None);
        assert_eq!(
            from_history(0.0, 5, 0, 7_200.0, 0),
            None,
            "an empty table is not a capacity problem"
        );
        let c = from_history(10_000.0, 3, 4_000, 7_200.0, 1_000).unwrap();
        assert_eq!(
            (c.scanned_rows_per_hour, c.new_rows_per_hour, c.ratio),
            (2_000.0, 500.0, 4.0)
        );
    }

    #[test]
    fn row_counts_are_whole_rows() {
        assert_eq!(whole_rows(4019.999999999999), 4020);
        assert_eq!(whole_rows(4020.2), 4021);
        assert_eq!(whole_rows(0.0), 0);
        assert_eq!(whole_rows(-3.0), 0);
        assert_eq!(whole_rows(f64::NAN), 0);
        let plan = fixed(input(4019.999999999999 / PLAN_MARGIN, 0.0), 1);
        let json = serde_json::to_value(plan).unwrap();
        assert!(json["rows_per_run_needed"].is_u64(), "{json}");
        assert!(json["rows_per_run_planned"].is_u64(), "{json}");
    }
}
