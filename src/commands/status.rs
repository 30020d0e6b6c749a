//! `stripe-reconciler status [--json]`: the job's state ([`crate::status`]).

use super::CommandError;
use crate::config::Settings;
use crate::lifecycle::preflight;
use crate::scan::ScanGroups;
use crate::status;
use crate::store::Context;

/// Prints the job's state: a screen for people, or one JSON object.
pub(super) async fn status(settings: &Settings, json: bool) -> Result<(), CommandError> {
    let (_pool, mut conn) = super::connect(settings).await?;
    // Every read in one transaction (pooler-safe: docs/schema.md).
    let mut conn = crate::store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(CommandError::Store)?;
    let settings = &preflight::checked(&mut conn, settings).await?;
    let st = status::read_planned(&mut conn, &ScanGroups::of(settings), &settings.events)
        .await
        .map_err(CommandError::Store)?;
    if json {
        let line = serde_json::to_string_pretty(&st)?;
        println!("{line}");
    } else {
        print!("{}", status::render(&st, settings.run.grace));
    }
    Ok(())
}
