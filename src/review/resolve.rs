//! `findings resolve`: findings resolved by hand, keeping who and why; one
//! finding, or every finding a file names in one transaction. A finding
//! whose repair command is still pending is refused (the repair would still
//! apply); the resolution closes the finding's stuck repair commands. Only
//! the reconciler's own rows are locked, never the application's
//! `payments` (docs/review.md).

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;

use sqlx::PgConnection;

use super::{FileLine, ReviewError};
use crate::config::OutboxSettings;
use crate::reconcile::RepairCommand;
use crate::repair::worker::MAX_ATTEMPTS;
use crate::store::findings::{self, NamedFinding};
use crate::store::{self, outbox, Context};
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
    // The finding only, never the application's payment (docs/review.md):
    // a scan or repair worker holding it makes this wait, not the reverse.
    findings::named(&mut tx, &[id], true).await?;
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
/// The file is checked set-based (one statement for the findings, one for
/// their pending repairs) without any lock: a refused file, and every
/// `--dry-run`, locks nothing. Only then are the findings locked (the
/// reconciler's own rows, in id order; never the application's
/// `payments`), checked again under the lock (a scan or repair may have
/// moved meanwhile), resolved in one statement and committed
/// (docs/review.md). A deadlock with a scan is retried ([`store::retry`]).
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
    let ids: Vec<i64> = lines.iter().map(|l| l.id).collect();
    let named = {
        let mut tx = crate::store::begin(&mut *conn)
            .await
            .context("opening a transaction")?;
        let named = findings::named(&mut tx, &ids, false).await?;
        check_resolvable(&mut tx, outbox_settings, lines, &named).await?;
        named
    };
    if dry_run {
        print_dry_run(lines, &named);
        return Ok(());
    }
    let mut attempt = 1;
    let done = loop {
        match resolve_locked(&mut *conn, outbox_settings, lines, &ids).await {
            Ok(done) => break done,
            Err(e) if store::retry::again(&e, attempt, "findings resolve --file").await => {
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    };
    tracing::info!(findings = done, "findings resolved by hand from a file");
    println!(
        "resolved {done} finding(s) from {}",
        escape(&path.display().to_string())
    );
    Ok(())
}

/// The write of [`resolve_file`]: locks the named findings (ours only),
/// checks them again, resolves them and closes their stuck repair commands,
/// in one transaction. Returns how many were resolved (all of them).
async fn resolve_locked(
    conn: &mut PgConnection,
    outbox_settings: &OutboxSettings,
    lines: &[FileLine],
    ids: &[i64],
) -> Result<u64, ReviewError> {
    let types = RepairCommand::EVENT_TYPES;
    let mut tx = crate::store::begin(&mut *conn)
        .await
        .context("opening a transaction")?;
    let named = findings::named(&mut tx, ids, true).await?;
    check_resolvable(&mut tx, outbox_settings, lines, &named).await?;
    let by: Vec<&str> = lines.iter().map(|l| l.by.as_str()).collect();
    let notes: Vec<&str> = lines.iter().map(|l| l.note.as_str()).collect();
    let done = findings::resolve_many(&mut tx, ids, &by, &notes).await?;
    if done != lines.len() as u64 {
        return Err(ReviewError::Refused(format!(
            "{done} of {} findings could be resolved; nothing was resolved",
            lines.len()
        )));
    }
    outbox::close_for_findings(&mut tx, outbox_settings, &types, ids, SUPERSEDED).await?;
    tx.commit().await.context("committing the resolutions")?;
    Ok(done)
}

/// Refuses the whole file when a line names a finding that does not exist,
/// is already resolved, or has a repair command pending (the first such
/// line, in file order). `named` is what [`findings::named`] found.
async fn check_resolvable(
    tx: &mut PgConnection,
    outbox_settings: &OutboxSettings,
    lines: &[FileLine],
    named: &[NamedFinding],
) -> Result<(), ReviewError> {
    let types = RepairCommand::EVENT_TYPES;
    let found: HashMap<i64, &NamedFinding> = named.iter().map(|n| (n.id, n)).collect();
    let open: Vec<i64> = named.iter().filter(|n| n.open).map(|n| n.id).collect();
    let pending: HashSet<i64> =
        outbox::pending_repairs(tx, outbox_settings, &types, &open, MAX_ATTEMPTS)
            .await?
            .into_iter()
            .collect();
    for l in lines {
        let why = match found.get(&l.id) {
            None => "does not exist",
            Some(n) if !n.open => "is already resolved",
            Some(_) if pending.contains(&l.id) => {
                "has a repair command pending in the outbox (run `stripe-reconciler repair`)"
            }
            Some(_) => continue,
        };
        return Err(ReviewError::Refused(format!(
            "line {}: finding {} {why}; nothing was resolved",
            l.line, l.id
        )));
    }
    Ok(())
}

/// What `--dry-run` prints: each finding that would be resolved, escaped.
fn print_dry_run(lines: &[FileLine], named: &[NamedFinding]) {
    let kinds: HashMap<i64, &str> = named.iter().map(|n| (n.id, n.kind.as_str())).collect();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for l in lines {
        let kind = kinds.get(&l.id).copied().unwrap_or("");
        let _ = writeln!(
            out,
            "would resolve finding {} ({}) by {}: {}",
            l.id,
            escape(kind),
            escape(&l.by),
            escape(&l.note)
        );
    }
    let _ = writeln!(
        out,
        "{} finding(s) would be resolved; nothing changed (--dry-run)",
        lines.len()
    );
}
