//! `stripe-reconciler repair`

use super::CommandError;
use crate::config::Settings;
use crate::repair::{drain_with, RepairOptions};
use crate::{db, shutdown};

/// Drains the repair commands and prints the report on stdout (one JSON line).
pub(super) async fn repair(settings: &Settings) -> Result<(), CommandError> {
    let pool = db::connect(settings.connect_options()?).await?;
    let token = shutdown::on_signal();
    let statuses = &settings.job.statuses;
    let report = drain_with(&pool, RepairOptions::default(), statuses, &token)
        .await
        .map_err(CommandError::Store)?;
    tracing::info!(
        applied = report.applied,
        no_op = report.no_op,
        failed = report.failed,
        stuck = report.stuck,
        "repair summary"
    );
    match serde_json::to_string(&report) {
        Ok(line) => println!("{line}"),
        Err(e) => tracing::error!(error = %e, "cannot serialise the repair report"),
    }
    pool.close().await;
    if token.is_cancelled() {
        return Err(CommandError::Scan(crate::outcome::RunError::Interrupted));
    }
    Ok(())
}
