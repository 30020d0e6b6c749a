//! The screen of `status` for people: one escaped line per figure
//! ([`crate::terminal`]; issue 21).

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};

use super::{lag_holder, Status};
use crate::capacity::{RunPlan, Shortfall};
use crate::terminal::{escape, human_duration};

/// `unix` (seconds) as a UTC time and how long before `now` it was;
/// `never` for `None`.
fn when(unix: Option<f64>, now: DateTime<Utc>) -> String {
    unix.and_then(|t| Utc.timestamp_opt(t as i64, 0).single())
        .map_or_else(
            || "never".to_owned(),
            |t| {
                format!(
                    "{} ({} ago)",
                    t.format("%Y-%m-%d %H:%M:%S UTC"),
                    human_duration((now - t).num_seconds() as f64)
                )
            },
        )
}

/// The human-readable screen. `grace` is `RECONCILER_GRACE_SECONDS`, to tell
/// why a recently changed payment is not confirmed yet. Every line is
/// escaped ([`crate::terminal`]; issue 21): the lag holder's order and
/// PaymentIntent ids, its repair's last error and the finding kinds are
/// stored text.
pub fn render(st: &Status, grace: Duration) -> String {
    let mut out = String::new();
    let mut line = |k: &str, v: String| {
        out.push_str(&format!("{:<34}{}\n", escape(k), escape(&v)));
    };
    line("job", st.job.clone());
    if let Some(p) = &st.partition {
        line("partition", format!("{} = {:?}", p.column, p.value));
    }
    line("reconciliation lag", human_duration(st.lag_seconds));
    if let Some(h) = &st.lag_held_by {
        for (k, v) in lag_holder::lines(h, st, grace) {
            line(k, v);
        }
    }
    line("payments", format!("{:.0}", st.rows));
    for (k, v) in cycle_lines(st) {
        line(k, v);
    }
    for (k, v) in events_lines(st) {
        line(k, v);
    }
    match (st.outbox_pending, st.outbox_oldest_pending_seconds) {
        (Some(pending), Some(oldest)) => line(
            "outbox repairs pending",
            format!("{pending} (oldest {})", human_duration(oldest)),
        ),
        _ => line(
            "outbox",
            format!(
                "drained by the application's relay ({} shape)",
                st.outbox_shape
            ),
        ),
    }
    for (k, v) in capacity_lines(st) {
        line(k, v);
    }
    if let Some(p) = &st.plan {
        for (k, v) in plan_lines(p) {
            line(k, v);
        }
    }
    for (k, v) in findings_lines(st) {
        line(&k, v);
    }
    out
}

/// The cycle's lines: the cursor and its share of the cycle, the cycle's
/// age, when the last cycle completed and when the last run succeeded.
fn cycle_lines(st: &Status) -> Vec<(&'static str, String)> {
    let cursor = format!(
        "id {} ({:.1}% of this cycle)",
        st.cursor_position, st.cycle_progress_percent
    );
    let age = st
        .cycle_age_seconds
        .map_or_else(|| "no cycle yet".into(), human_duration);
    vec![
        ("cursor", cursor),
        ("cycle age", age),
        (
            "last cycle completed",
            when(st.cycle_last_completed_unix, st.database_now),
        ),
        (
            "last successful run",
            when(st.last_success_unix, st.database_now),
        ),
    ]
}

/// The open findings: their total (or `none`), then each kind, most first.
fn findings_lines(st: &Status) -> Vec<(String, String)> {
    if st.open_findings.is_empty() {
        return vec![("open findings".into(), "none".into())];
    }
    let total: i64 = st.open_findings.values().sum();
    let mut out = vec![("open findings".to_owned(), total.to_string())];
    let mut by_count: Vec<(&String, &i64)> = st.open_findings.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (kind, n) in by_count {
        out.push((format!("  {kind}"), n.to_string()));
    }
    out
}

/// The events feed's lines: its lag, last commit, connected accounts and
/// held PaymentIntents (or that it never ran).
fn events_lines(st: &Status) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut line = |k: &'static str, v: String| out.push((k, v));
    match &st.events {
        None => line("events feed", "never ran".into()),
        Some(e) => {
            line(
                "events lag",
                e.lag_seconds
                    .map_or_else(|| "no position yet".into(), human_duration),
            );
            line(
                "events last committed",
                when(e.last_success_unix, st.database_now),
            );
            if e.connected_accounts > 0 {
                line(
                    "events connected accounts",
                    format!(
                        "{} (each with its own events position)",
                        e.connected_accounts
                    ),
                );
            }
            line(
                "events PaymentIntents held",
                match e.oldest_held_event_unix {
                    Some(t) if e.payment_intents_held > 0 => format!(
                        "{} (read again next run; oldest event {})",
                        e.payment_intents_held,
                        when(Some(t), st.database_now)
                    ),
                    _ => "0".into(),
                },
            );
        }
    }
    out
}

/// The capacity lines: B*R / G and the expected cycle time, or why unknown.
fn capacity_lines(st: &Status) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut line = |k: &'static str, v: String| out.push((k, v));
    match &st.capacity {
        None => line(
            "capacity",
            "unknown (needs two runs a minute apart in the last 24 h)".into(),
        ),
        Some(c) => {
            line(
                "capacity B*R / G",
                format!(
                    "{:.2} ({:.0} rows/h scanned, {:.0} new rows/h)",
                    c.ratio, c.scanned_rows_per_hour, c.new_rows_per_hour
                ),
            );
            line(
                "expected cycle time",
                c.expected_cycle_seconds
                    .map_or_else(|| "never (B*R <= G)".into(), human_duration),
            );
        }
    }
    out
}

/// The next run's plan: rows per run needed, the pace, the expected cycle
/// against the target and, when it cannot be met, why.
fn plan_lines(p: &RunPlan) -> Vec<(&'static str, String)> {
    let pace = if p.pace.measured {
        "measured over the last 24 h"
    } else {
        "estimated from the rate limit: no run scanned rows yet"
    };
    let mut lines = vec![
        (
            "next run plan",
            format!(
                "{} batches ({:.0} rows; {:.0} rows per run needed)",
                p.batches, p.rows_per_run_planned, p.rows_per_run_needed
            ),
        ),
        (
            "  pace",
            format!("{:.1} rows/s ({pace})", p.pace.rows_per_second),
        ),
        (
            "  expected cycle / target",
            format!(
                "{} / {}",
                p.expected_cycle_seconds
                    .map_or_else(|| "never".into(), human_duration),
                human_duration(p.target_cycle_seconds)
            ),
        ),
    ];
    if let Some(why) = p.shortfall {
        lines.push((
            "  target not met",
            match why {
                Shortfall::RateBudget => "the Stripe rate budget is too small for the table (raise RECONCILER_RATE_LIMIT_RPS or the target)",
                Shortfall::Deadline => "a run cannot read enough rows before RECONCILER_RUN_DEADLINE_SECONDS (raise it, run more often, or raise the target)",
                Shortfall::BatchesPerRun => "RECONCILER_BATCHES_PER_RUN is too small (set it to auto)",
            }
            .to_owned(),
        ));
    }
    lines
}
