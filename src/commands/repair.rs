//! `stripe-reconciler repair`

use super::CommandError;
use crate::config::Settings;
use crate::repair::{drain_with, RepairOptions};
use crate::shutdown;
use crate::store::Context;

/// Drains the repair commands and prints the report on stdout (one JSON
/// line). A `debezium`-shaped outbox is the application's relay's to deliver:
/// `repair` says so and exits 0 without touching it.
pub(super) async fn repair(settings: &Settings) -> Result<(), CommandError> {
    let pool = settings.database.connect().await?;
    let token = shutdown::on_signal();
    // The start-up reads in one transaction (pooler-safe: docs/schema.md).
    let mut conn = crate::store::begin(&pool)
        .await
        .context("opening a transaction")
        .map_err(CommandError::Store)?;
    crate::lifecycle::preflight::check_schema(&mut conn, settings, false).await?;
    // RECONCILER_TIMESTAMP_ZONE is known to the database (exit 78 otherwise).
    crate::lifecycle::preflight::checked(&mut conn, settings).await?;
    conn.commit()
        .await
        .context("closing a transaction")
        .map_err(CommandError::Store)?;
    let outbox = settings.outbox.clone();
    if !outbox.shape.drained_by_reconciler() {
        println!(
            "the outbox {} has the {} shape: the application's relay delivers its commands to the application's canonical writer; `repair` has nothing to drain",
            outbox.table.display(),
            outbox.shape.as_str()
        );
        pool.close().await;
        return Ok(());
    }
    let options = RepairOptions {
        outbox,
        checkout_session_column: settings.schema.checkout_session_column.clone(),
        timestamp_zone: settings.schema.times.zone.clone(),
        ..RepairOptions::default()
    };
    let statuses = &settings.schema.statuses;
    let report = drain_with(&pool, options, statuses, &token)
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
