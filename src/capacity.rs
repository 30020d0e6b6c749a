//! Pure capacity arithmetic (DESIGN.md, "Why a cursor"): with N rows, B·R rows
//! scanned per hour and G new rows per hour, a cycle takes N / (B·R − G) hours
//! and never completes when B·R <= G.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
