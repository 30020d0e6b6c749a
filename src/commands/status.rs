//! `stripe-reconciler status [--json]`

use chrono::{TimeZone, Utc};

use super::CommandError;
use crate::config::Settings;
use crate::status::{self, human_duration, Status};
use crate::store::Context;

/// Prints the job's state: a screen for people, or one JSON object.
pub(super) async fn status(settings: &Settings, json: bool) -> Result<(), CommandError> {
    let (_pool, mut conn) = super::connect(settings).await?;
    let mut conn = crate::store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(CommandError::Store)?;
    let st = status::read(&mut conn, &settings.job.job)
        .await
        .map_err(CommandError::Store)?;
    if json {
        let line =
            serde_json::to_string_pretty(&st).map_err(|e| CommandError::Usage(e.to_string()))?;
        println!("{line}");
    } else {
        print!("{}", render(&st));
    }
    Ok(())
}

fn when(unix: Option<f64>) -> String {
    unix.and_then(|t| Utc.timestamp_opt(t as i64, 0).single())
        .map_or_else(
            || "never".to_owned(),
            |t| {
                format!(
                    "{} ({} ago)",
                    t.format("%Y-%m-%d %H:%M:%S UTC"),
                    human_duration((Utc::now() - t).num_seconds() as f64)
                )
            },
        )
}

/// The human-readable screen.
pub fn render(st: &Status) -> String {
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<34}{v}\n"));
    line("job", st.job.clone());
    line("reconciliation lag", human_duration(st.lag_seconds));
    line("payments", format!("{:.0}", st.rows));
    line(
        "cursor",
        format!(
            "id {} ({:.1}% of this cycle)",
            st.cursor_position, st.cycle_progress_percent
        ),
    );
    line(
        "cycle age",
        st.cycle_age_seconds
            .map_or_else(|| "no cycle yet".into(), human_duration),
    );
    line("last cycle completed", when(st.cycle_last_completed_unix));
    line("last successful run", when(st.last_success_unix));
    line(
        "outbox repairs pending",
        format!(
            "{} (oldest {})",
            st.outbox_pending,
            human_duration(st.outbox_oldest_pending_seconds)
        ),
    );
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
    if st.open_findings.is_empty() {
        line("open findings", "none".into());
    } else {
        let total: i64 = st.open_findings.iter().map(|(_, n)| n).sum();
        line("open findings", total.to_string());
        for (kind, n) in &st.open_findings {
            line(&format!("  {kind}"), n.to_string());
        }
    }
    out
}
