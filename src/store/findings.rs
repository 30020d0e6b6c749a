//! `reconciliation_findings`: at most one open finding per (payment, kind),
//! enforced by the partial unique index `reconciliation_findings_open`.

use sqlx::PgConnection;

use super::{Context, StoreError};

/// A finding to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFinding {
    /// `payments.id`
    pub payment_id: i64,
    /// The kind's database string (`missed_success`, `unexpected:a->b`, ...).
    pub kind: String,
    /// `payments.status` when detected.
    pub local_status: String,
    /// Stripe's status when detected; `None` when Stripe had nothing to say.
    pub external_status: Option<String>,
}

/// A finding the insert actually created (it was not already open).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CreatedFinding {
    /// `reconciliation_findings.id`
    pub id: i64,
    /// `payments.id`
    pub payment_id: i64,
    /// The kind's database string.
    pub kind: String,
}

/// Inserts the findings in one statement; those already open are skipped
/// (`ON CONFLICT ... WHERE resolved_at IS NULL DO NOTHING`). Returns only the
/// rows created now.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn insert_open(
    conn: &mut PgConnection,
    findings: &[NewFinding],
) -> Result<Vec<CreatedFinding>, StoreError> {
    if findings.is_empty() {
        return Ok(Vec::new());
    }
    let payment_ids: Vec<i64> = findings.iter().map(|f| f.payment_id).collect();
    let kinds: Vec<&str> = findings.iter().map(|f| f.kind.as_str()).collect();
    let locals: Vec<&str> = findings.iter().map(|f| f.local_status.as_str()).collect();
    let externals: Vec<Option<&str>> = findings
        .iter()
        .map(|f| f.external_status.as_deref())
        .collect();
    super::query_as(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status)
         SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[])
         ON CONFLICT (payment_id, kind) WHERE resolved_at IS NULL DO NOTHING
         RETURNING id, payment_id, kind",
    )
    .bind(payment_ids)
    .bind(kinds)
    .bind(locals)
    .bind(externals)
    .fetch_all(conn)
    .await
    .context("recording findings")
}

/// Resolves every open finding of these payments with `resolution = 'cleared'`:
/// a later scan verified them in sync. Returns how many were cleared.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn clear_in_sync(
    conn: &mut PgConnection,
    payment_ids: &[i64],
) -> Result<u64, StoreError> {
    if payment_ids.is_empty() {
        return Ok(0);
    }
    let done = super::query(
        "UPDATE reconciliation_findings
            SET resolved_at = now(), resolution = 'cleared'
          WHERE resolved_at IS NULL AND payment_id = ANY($1::bigint[])",
    )
    .bind(payment_ids)
    .execute(conn)
    .await
    .context("clearing findings of in-sync payments")?;
    Ok(done.rows_affected())
}

/// Resolves one open finding with `resolution` (e.g. `repaired`). Returns
/// `false` when it was already resolved or does not exist.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn resolve(
    conn: &mut PgConnection,
    finding_id: i64,
    resolution: &str,
) -> Result<bool, StoreError> {
    let done = super::query(
        "UPDATE reconciliation_findings SET resolved_at = now(), resolution = $2
          WHERE id = $1 AND resolved_at IS NULL",
    )
    .bind(finding_id)
    .bind(resolution)
    .execute(conn)
    .await
    .context("resolving a finding")?;
    Ok(done.rows_affected() == 1)
}

/// Resolves one open finding by hand (`resolution = 'manual'`), keeping who
/// and why. Returns `false` when it was already resolved or does not exist.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn resolve_manually(
    conn: &mut PgConnection,
    finding_id: i64,
    by: &str,
    note: &str,
) -> Result<bool, StoreError> {
    let done = super::query(
        "UPDATE reconciliation_findings
            SET resolved_at = now(), resolution = 'manual', resolved_by = $2, resolution_note = $3
          WHERE id = $1 AND resolved_at IS NULL",
    )
    .bind(finding_id)
    .bind(by)
    .bind(note)
    .execute(conn)
    .await
    .context("resolving a finding by hand")?;
    Ok(done.rows_affected() == 1)
}

/// A finding as the review queue shows it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct FindingView {
    /// `reconciliation_findings.id`
    pub id: i64,
    /// `payments.id`
    pub payment_id: i64,
    /// The payment's order, for a person to look up.
    pub order_id: Option<String>,
    /// The payment's PaymentIntent id (as stored; may be malformed).
    pub stripe_payment_intent_id: Option<String>,
    /// The kind's database string.
    pub kind: String,
    /// Local status when detected.
    pub local_status: String,
    /// Stripe status when detected.
    pub external_status: Option<String>,
    /// When detected.
    pub detected_at: chrono::DateTime<chrono::Utc>,
    /// When resolved; `None` while open.
    pub resolved_at: Option<chrono::DateTime<chrono::Utc>>,
    /// `repaired`, `cleared`, `manual`.
    pub resolution: Option<String>,
    /// Who resolved it by hand.
    pub resolved_by: Option<String>,
    /// Why.
    pub resolution_note: Option<String>,
}

/// Lists findings, newest first, at most `limit` rows.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn list(
    conn: &mut PgConnection,
    kind: Option<&str>,
    open_only: bool,
    limit: i64,
) -> Result<Vec<FindingView>, StoreError> {
    super::query_as(
        "SELECT f.id, f.payment_id, p.order_id, p.stripe_payment_intent_id, f.kind, f.local_status,
                f.external_status, f.detected_at, f.resolved_at, f.resolution, f.resolved_by,
                f.resolution_note
           FROM reconciliation_findings f
           LEFT JOIN payments p ON p.id = f.payment_id
          WHERE ($1::text IS NULL OR f.kind = $1) AND (NOT $2 OR f.resolved_at IS NULL)
          ORDER BY f.id DESC
          LIMIT $3",
    )
    .bind(kind)
    .bind(open_only)
    .bind(limit)
    .fetch_all(conn)
    .await
    .context("listing findings")
}

/// A finding as the repair worker checks it before applying its command.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FindingForRepair {
    /// `payments.id` the finding is about.
    pub payment_id: i64,
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
    super::query_as(
        "SELECT payment_id, kind, resolved_at IS NULL AS open
           FROM reconciliation_findings WHERE id = $1 FOR UPDATE",
    )
    .bind(finding_id)
    .fetch_optional(conn)
    .await
    .context("locking a finding for repair")
}
