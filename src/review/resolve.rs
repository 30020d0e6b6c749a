//! `findings resolve`: findings resolved by hand, keeping who and why; one
//! finding, or every finding a file names in one transaction. A finding
//! whose repair command is still pending is refused (the repair would still
//! apply); the resolution closes the finding's stuck repair commands.

use std::collections::HashMap;
use std::path::Path;

use sqlx::PgConnection;

use super::{FileLine, ReviewError};
use crate::config::OutboxSettings;
use crate::reconcile::RepairCommand;
use crate::repair::worker::MAX_ATTEMPTS;
use crate::store::findings::{self, NamedFinding};
use crate::store::{outbox, payments, Context};
use crate::terminal::escape;

/// The note that closes a resolved finding's repair commands.
const SUPERSEDED: &str = "superseded by a manual resolution";

/// Checks a resolution's `note` and `by` (`--by`, else `USER`) before
/// anything is read; returns who resolves, trimmed.
///
/// # Errors
/// [`ReviewError::Usage`] for an empty note or no one to name.
pub fn who_resolves<'a>(note: &str, by: Option<&'a str>) -> Result<&'a str, ReviewError> {
    if note.trim().is_empty() {
        return Err(ReviewError::Usage(
            "--note must say why the finding is resolved".into(),
        ));
    }
    match by.map(str::trim) {
        Some(by) if !by.is_empty() => Ok(by),
        _ => Err(ReviewError::Usage(
            "say who resolves the finding: --by NAME (or set USER)".into(),
        )),
    }
}

/// Resolves open finding `id` by hand as `by` with `note` ([`who_resolves`]
/// checked both), closes its stuck repair commands in `outbox_settings`, and
/// says so on stdout.
///
/// # Errors
/// [`ReviewError::Refused`] when the finding has a repair command pending,
/// does not exist or is already resolved; [`ReviewError::Store`].
pub async fn resolve(
    conn: &mut PgConnection,
    outbox_settings: &OutboxSettings,
    id: i64,
    note: &str,
    by: &str,
) -> Result<(), ReviewError> {
    let types = RepairCommand::EVENT_TYPES;
    let mut tx = crate::store::begin(&mut *conn)
        .await
        .context("opening a transaction")?;
    // Payment before finding, like every writer: no deadlock with a scan.
    payments::lock_for_finding(&mut tx, id).await?;
    if outbox::has_pending_repair(&mut tx, outbox_settings, &types, id, MAX_ATTEMPTS).await? {
        return Err(ReviewError::Refused(format!(
            "finding {id} has a repair command pending in the outbox; run `stripe-reconciler repair` instead"
        )));
    }
    if !findings::resolve_manually(&mut tx, id, by, note).await? {
        return Err(ReviewError::Refused(format!(
            "finding {id} does not exist or is already resolved"
        )));
    }
    let closed =
        outbox::close_for_findings(&mut tx, outbox_settings, &types, &[id], SUPERSEDED).await?;
    tx.commit().await.context("committing the resolution")?;
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
    println!("finding {id} resolved by {}", escape(by));
    Ok(())
}

/// Resolves every finding `lines` (read from `path` by
/// [`super::read_file`]) names in one transaction, or none: the first
/// problem is reported with its line and nothing changes. With `dry_run`,
/// prints what would be resolved.
///
/// # Errors
/// [`ReviewError::Refused`] naming the line of a finding that does not
/// exist, is already resolved or has a repair command pending;
/// [`ReviewError::Store`].
pub async fn resolve_file(
    conn: &mut PgConnection,
    outbox_settings: &OutboxSettings,
    lines: &[FileLine],
    path: &Path,
    dry_run: bool,
) -> Result<(), ReviewError> {
    let mut tx = crate::store::begin(&mut *conn)
        .await
        .context("opening a transaction")?;
    let ids: Vec<i64> = lines.iter().map(|l| l.id).collect();
    let named = findings::lock_named(&mut tx, &ids).await?;
    let named: HashMap<i64, &NamedFinding> = named.iter().map(|n| (n.id, n)).collect();
    let types = RepairCommand::EVENT_TYPES;
    check_resolvable(&mut tx, outbox_settings, lines, &named).await?;
    if dry_run {
        print_dry_run(lines, &named);
        return Ok(());
    }
    let by: Vec<&str> = lines.iter().map(|l| l.by.as_str()).collect();
    let notes: Vec<&str> = lines.iter().map(|l| l.note.as_str()).collect();
    let done = findings::resolve_many(&mut tx, &ids, &by, &notes).await?;
    if done != lines.len() as u64 {
        return Err(ReviewError::Refused(format!(
            "{done} of {} findings could be resolved; nothing was resolved",
            lines.len()
        )));
    }
    outbox::close_for_findings(&mut tx, outbox_settings, &types, &ids, SUPERSEDED).await?;
    tx.commit().await.context("committing the resolutions")?;
    tracing::info!(findings = done, "findings resolved by hand from a file");
    println!(
        "resolved {done} finding(s) from {}",
        escape(&path.display().to_string())
    );
    Ok(())
}

/// Refuses the whole file when a line names a finding that does not exist,
/// is already resolved, or has a repair command pending.
async fn check_resolvable(
    tx: &mut PgConnection,
    outbox_settings: &OutboxSettings,
    lines: &[FileLine],
    named: &HashMap<i64, &NamedFinding>,
) -> Result<(), ReviewError> {
    let types = RepairCommand::EVENT_TYPES;
    for l in lines {
        let refuse = |why: &str| {
            ReviewError::Refused(format!(
                "line {}: finding {} {why}; nothing was resolved",
                l.line, l.id
            ))
        };
        match named.get(&l.id) {
            None => return Err(refuse("does not exist")),
            Some(n) if !n.open => return Err(refuse("is already resolved")),
            Some(_) => {}
        }
        if outbox::has_pending_repair(&mut *tx, outbox_settings, &types, l.id, MAX_ATTEMPTS).await?
        {
            return Err(refuse(
                "has a repair command pending in the outbox (run `stripe-reconciler repair`)",
            ));
        }
    }
    Ok(())
}

/// What `--dry-run` prints: each finding that would be resolved, escaped.
fn print_dry_run(lines: &[FileLine], named: &HashMap<i64, &NamedFinding>) {
    for l in lines {
        let kind = named.get(&l.id).map_or("", |n| n.kind.as_str());
        println!(
            "would resolve finding {} ({}) by {}: {}",
            l.id,
            escape(kind),
            escape(&l.by),
            escape(&l.note)
        );
    }
    println!(
        "{} finding(s) would be resolved; nothing changed (--dry-run)",
        lines.len()
    );
}
