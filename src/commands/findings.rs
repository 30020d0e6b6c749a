//! `stripe-reconciler findings list|resolve`: the review queue.

use super::CommandError;
use crate::config::Settings;
use crate::reconcile::RepairCommand;

use crate::repair::worker::MAX_ATTEMPTS;
use crate::store::{findings, outbox, Context};

/// Lists findings as a table, or JSON lines with `--json`.
pub(super) async fn list(
    settings: &Settings,
    kind: Option<&str>,
    open: bool,
    json: bool,
    limit: i64,
) -> Result<(), CommandError> {
    let (_pool, mut conn) = super::connect(settings).await?;
    let mut conn = crate::store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(CommandError::Store)?;
    let rows = findings::list(&mut conn, kind, open, limit)
        .await
        .map_err(CommandError::Store)?;
    if json {
        for row in &rows {
            if let Ok(line) = serde_json::to_string(row) {
                println!("{line}");
            }
        }
        return Ok(());
    }
    println!(
        "{:>8}  {:>10}  {:<32}  {:<8}  {:<24}  {:<20}  resolution",
        "id", "payment", "kind", "local", "stripe", "detected"
    );
    for f in &rows {
        let resolution = match (&f.resolution, &f.resolved_by) {
            (None, _) => "open".to_owned(),
            (Some(r), Some(by)) => format!(
                "{r} by {by}: {}",
                f.resolution_note.as_deref().unwrap_or("")
            ),
            (Some(r), None) => r.clone(),
        };
        println!(
            "{:>8}  {:>10}  {:<32}  {:<8}  {:<24}  {:<20}  {}",
            f.id,
            f.payment_id,
            f.kind,
            f.local_status,
            f.external_status.as_deref().unwrap_or("-"),
            f.detected_at.format("%Y-%m-%d %H:%M:%S"),
            resolution
        );
    }
    println!("{} finding(s)", rows.len());
    Ok(())
}

/// Resolves one open finding by hand, keeping who and why. Refuses a finding
/// whose repair command is still pending (the repair would still apply).
pub(super) async fn resolve(
    settings: &Settings,
    id: i64,
    note: &str,
    by: &str,
) -> Result<(), CommandError> {
    if note.trim().is_empty() {
        return Err(CommandError::Usage(
            "--note must say why the finding is resolved".into(),
        ));
    }
    let (_pool, mut conn) = super::connect(settings).await?;
    let types = RepairCommand::EVENT_TYPES;
    let mut tx = crate::store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(CommandError::Store)?;
    if outbox::has_pending_repair(&mut tx, &types, id, MAX_ATTEMPTS)
        .await
        .map_err(CommandError::Store)?
    {
        return Err(CommandError::Usage(format!(
            "finding {id} has a repair command pending in the outbox; run `stripe-reconciler repair` instead"
        )));
    }
    if !findings::resolve_manually(&mut tx, id, by, note)
        .await
        .map_err(CommandError::Store)?
    {
        return Err(CommandError::Usage(format!(
            "finding {id} does not exist or is already resolved"
        )));
    }
    let closed =
        outbox::close_for_finding(&mut tx, &types, id, "superseded by a manual resolution")
            .await
            .map_err(CommandError::Store)?;
    tx.commit()
        .await
        .context("committing the resolution")
        .map_err(CommandError::Store)?;
    if closed > 0 {
        tracing::info!(
            finding_id = id,
            commands = closed,
            "closed the finding's stuck repair commands"
        );
    }
    tracing::info!(
        finding_id = id,
        resolved_by = by,
        "finding resolved by hand"
    );
    println!("finding {id} resolved by {by}");
    Ok(())
}
