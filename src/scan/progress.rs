//! PURE progress of the current cycle for the per-batch log line: rows done
//! of the rows in the cycle, and an estimated time to the end of the cycle.

/// Where the cycle stands after a batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CycleProgress {
    /// Rows behind the cursor (estimated from the id range; exact for dense ids).
    pub rows_done: u64,
    /// Rows in the cycle (`payments` rows, planner estimate on large tables).
    pub rows_total: u64,
    /// Seconds of scanning left to the end of the cycle at this run's pace;
    /// `None` before the pace is known.
    pub eta_seconds: Option<f64>,
    /// Further runs needed after this one to finish the cycle (0 when this run
    /// reaches the end of the table at its batch budget).
    pub more_runs: u64,
}

/// What the run knows about the table, read once at its start.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TableExtent {
    /// `payments` rows (estimate).
    pub rows: f64,
    /// Lowest `payments.id`.
    pub min_id: Option<i64>,
    /// Highest `payments.id`.
    pub max_id: Option<i64>,
    /// Rows the cursor had walked in the cycle when the run started
    /// (`cycle_rows_done`); the progress of a walk without an id range.
    pub rows_done: u64,
}

/// This run's pace and budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    /// Rows scanned by this run so far.
    pub rows_scanned: u64,
    /// Seconds this run has spent so far.
    pub elapsed_seconds: f64,
    /// Rows this run may still read (batches left × batch size).
    pub rows_left_in_run: u64,
    /// Rows a whole run may read (batches per run × batch size).
    pub rows_per_run: u64,
}

/// The cycle's progress with the cursor at `cursor` (0 right after a wrap),
/// `walked` rows of the cycle walked by this run (after its last wrap; those
/// before it when it did not wrap): from the id range for integer keys, else
/// from the rows walked.
pub fn cycle_progress(
    table: TableExtent,
    (cursor, walked): (i64, u64),
    pace: Pace,
) -> CycleProgress {
    let total = table.rows.max(0.0).round() as u64;
    let done = match (table.min_id, table.max_id) {
        (Some(lo), Some(hi)) if hi >= lo && cursor >= lo => {
            // In f64: ids may span the whole bigint range (docs/keys.md).
            let share = (cursor.min(hi) as f64 - lo as f64 + 1.0) / (hi as f64 - lo as f64 + 1.0);
            (share * total as f64).round() as u64
        }
        (Some(_), Some(_)) => 0,
        _ => walked,
    };
    let remaining = total.saturating_sub(done);
    let rate = (pace.elapsed_seconds > 0.0 && pace.rows_scanned > 0)
        .then(|| pace.rows_scanned as f64 / pace.elapsed_seconds);
    let beyond_this_run = remaining.saturating_sub(pace.rows_left_in_run);
    CycleProgress {
        rows_done: done.min(total),
        rows_total: total,
        eta_seconds: rate.map(|r| remaining as f64 / r),
        more_runs: beyond_this_run.div_ceil(pace.rows_per_run.max(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: TableExtent = TableExtent {
        rows: 10_000.0,
        min_id: Some(1),
        max_id: Some(10_000),
        rows_done: 0,
    };

    fn pace(scanned: u64, seconds: f64, left: u64) -> Pace {
        Pace {
            rows_scanned: scanned,
            elapsed_seconds: seconds,
            rows_left_in_run: left,
            rows_per_run: 2_000,
        }
    }

    #[test]
    fn rows_done_and_eta_follow_the_cursor_and_the_pace() {
        let p = cycle_progress(TABLE, (4_000, 0), pace(1_000, 10.0, 1_000));
        assert_eq!((p.rows_done, p.rows_total), (4_000, 10_000));
        // 6,000 rows left at 100 rows/s.
        assert_eq!(p.eta_seconds, Some(60.0));
        // 1,000 more in this run, 5,000 after it: 3 runs of 2,000.
        assert_eq!(p.more_runs, 3);
    }

    #[test]
    fn a_wrap_starts_the_count_again_and_an_empty_table_has_nothing_to_do() {
        let p = cycle_progress(TABLE, (0, 0), pace(10_000, 50.0, 0));
        assert_eq!(p.rows_done, 0);
        let empty = cycle_progress(TableExtent::default(), (0, 0), pace(0, 0.0, 200));
        assert_eq!(
            (empty.rows_done, empty.rows_total, empty.more_runs),
            (0, 0, 0)
        );
        assert_eq!(empty.eta_seconds, None, "no pace yet");
    }

    #[test]
    fn a_key_walk_counts_the_rows_walked() {
        let uuid = TableExtent {
            rows: 20_000.0,
            min_id: None,
            max_id: None,
            rows_done: 0,
        };
        let p = cycle_progress(uuid, (0, 6_000), pace(6_000, 10.0, 2_000));
        assert_eq!((p.rows_done, p.rows_total), (6_000, 20_000));
        assert_eq!(p.more_runs, 6);
    }
}
