//! The repair guards: what the scan and the repair worker check before a
//! command may touch a payment (repairable findings, blocking findings, the
//! finding itself, locked), and the resolution the canonical writer records.

use sqlx::PgConnection;

use crate::key::{KeyType, PaymentKey};
use crate::reconcile::Resolution;
use crate::store::{query, query_as, query_scalar, Context, StoreError};

/// The open findings of these payments that a repair command repairs
/// (`missed_success`, `missed_cancel`).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn open_repairable(
    conn: &mut PgConnection,
    key: &KeyType,
    payment_ids: &[PaymentKey],
) -> Result<Vec<i64>, StoreError> {
    if payment_ids.is_empty() {
        return Ok(Vec::new());
    }
    let kinds: Vec<String> = crate::reconcile::RepairCommand::ALL
        .iter()
        .map(|c| c.finding_kind().as_str().into_owned())
        .collect();
    let sql = format!(
        "SELECT id FROM reconciliation_findings
          WHERE payment_id = ANY({}) AND resolved_at IS NULL AND kind = ANY($2)",
        key.cast_array("$1")
    );
    query_scalar(&sql)
        .bind(payment_ids)
        .bind(kinds)
        .fetch_all(conn)
        .await
        .context("looking up repairable findings")
}

/// Which of these payments have an open finding of a blocking kind
/// ([`crate::reconcile::FindingKind::is_blocking`]): no repair may touch them.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn blocked_payments(
    conn: &mut PgConnection,
    key: &KeyType,
    payment_ids: &[PaymentKey],
) -> Result<Vec<PaymentKey>, StoreError> {
    if payment_ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT DISTINCT payment_id::text FROM reconciliation_findings
          WHERE payment_id = ANY({}) AND resolved_at IS NULL AND kind = ANY($2)",
        key.cast_array("$1")
    );
    query_scalar(&sql)
        .bind(payment_ids)
        .bind(crate::reconcile::FindingKind::blocking_kinds())
        .fetch_all(conn)
        .await
        .context("looking for findings that block repairs")
}

/// Resolves one open finding with `resolution` (e.g. [`Resolution::Repaired`]). Returns
/// `false` when it was already resolved or does not exist.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn resolve(
    conn: &mut PgConnection,
    finding_id: i64,
    resolution: Resolution,
) -> Result<bool, StoreError> {
    let done = query(
        "UPDATE reconciliation_findings SET resolved_at = now(), resolution = $2
          WHERE id = $1 AND resolved_at IS NULL",
    )
    .bind(finding_id)
    .bind(resolution.as_str())
    .execute(conn)
    .await
    .context("resolving a finding")?;
    Ok(done.rows_affected() == 1)
}

/// A finding as the repair worker checks it before applying its command.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FindingForRepair {
    /// `payments.id` the finding is about; `None` for a finding about a
    /// PaymentIntent alone (never repairable).
    pub payment_id: Option<PaymentKey>,
    /// The kind's database string.
    pub kind: String,
    /// Not yet resolved.
    pub open: bool,
}

/// Locks one finding (`FOR UPDATE`) for the repair worker; `None` when it does
/// not exist.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn lock_for_repair(
    conn: &mut PgConnection,
    finding_id: i64,
) -> Result<Option<FindingForRepair>, StoreError> {
    query_as(
        "SELECT payment_id::text AS payment_id, kind, resolved_at IS NULL AS open
           FROM reconciliation_findings WHERE id = $1 FOR UPDATE",
    )
    .bind(finding_id)
    .fetch_optional(conn)
    .await
    .context("locking a finding for repair")
}
