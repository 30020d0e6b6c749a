//! `reconciliation_findings`: at most one open finding per (payment, kind),
//! enforced by the partial unique index `reconciliation_findings_open`; a
//! finding about a PaymentIntent no payment points at (`missing_locally`) has
//! `payment_id` NULL and is unique per open (PaymentIntent, kind) through
//! `reconciliation_findings_open_intent`.

use sqlx::PgConnection;

use super::{Context, StoreError};
use crate::reconcile::Resolution;

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
    /// What a person needs to judge it (amounts, currency, deadlines).
    pub details: Option<serde_json::Value>,
    /// A person's manual resolution of the same drift (same kind, Stripe
    /// status and details) keeps it closed. `false` where closing it would
    /// hide drift of the payment's status (e.g. `pending` here while Stripe
    /// succeeded): such a finding reopens until the status is dealt with.
    pub acknowledgeable: bool,
}

/// The acknowledgement rule, over a row `v` of the unnested new findings: a
/// finding is not opened again when a person resolved the same drift by hand
/// (`$7` is [`Resolution::Manual`]).
const NOT_ACKNOWLEDGED: &str = "NOT (v.acknowledgeable AND EXISTS (
                SELECT 1 FROM reconciliation_findings r
                 WHERE r.payment_id = v.payment_id AND r.kind = v.kind
                   AND r.resolution = $7
                   AND r.external_status IS NOT DISTINCT FROM v.external_status
                   AND r.details IS NOT DISTINCT FROM v.details))";

/// The findings as parallel arrays: `$1` payment ids, `$2` kinds, `$3` local
/// statuses, `$4` external statuses, `$5` details, `$6` acknowledgeable; `$7`
/// the manual resolution [`NOT_ACKNOWLEDGED`] looks for.
fn bind_findings<'q, O>(
    query: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    findings: &'q [NewFinding],
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
    query
        .bind(findings.iter().map(|f| f.payment_id).collect::<Vec<i64>>())
        .bind(
            findings
                .iter()
                .map(|f| f.kind.as_str())
                .collect::<Vec<&str>>(),
        )
        .bind(
            findings
                .iter()
                .map(|f| f.local_status.as_str())
                .collect::<Vec<&str>>(),
        )
        .bind(
            findings
                .iter()
                .map(|f| f.external_status.as_deref())
                .collect::<Vec<Option<&str>>>(),
        )
        .bind(
            findings
                .iter()
                .map(|f| f.details.as_ref())
                .collect::<Vec<Option<&serde_json::Value>>>(),
        )
        .bind(
            findings
                .iter()
                .map(|f| f.acknowledgeable)
                .collect::<Vec<bool>>(),
        )
        .bind(Resolution::Manual.as_str())
}

/// The unnested findings, `v`.
const UNNEST_FINDINGS: &str =
    "unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::bool[])
                AS v(payment_id, kind, local_status, external_status, details, acknowledgeable)";

/// A finding the upsert touched.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CreatedFinding {
    /// `reconciliation_findings.id`
    pub id: i64,
    /// `payments.id`
    pub payment_id: i64,
    /// The kind's database string.
    pub kind: String,
    /// The row was inserted now (`false`: it was already open and only its
    /// `external_status`, `details` and `last_seen_at` were refreshed).
    pub created: bool,
}

/// Records the findings in one statement. A finding already open for the
/// same (payment, kind) is not duplicated: its `external_status`, `details`
/// and `last_seen_at` are refreshed, so the review queue shows Stripe's
/// current state. A drift a person already resolved by hand with the same
/// external status and details (an acknowledgement, e.g. a partial refund
/// that is fine) is not opened again. Returns every open finding touched,
/// with `created` telling new ones apart.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn upsert_open(
    conn: &mut PgConnection,
    findings: &[NewFinding],
) -> Result<Vec<CreatedFinding>, StoreError> {
    if findings.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "INSERT INTO reconciliation_findings
                (payment_id, kind, local_status, external_status, details, last_seen_at)
         SELECT v.payment_id, v.kind, v.local_status, v.external_status, v.details, now()
           FROM {UNNEST_FINDINGS}
          WHERE {NOT_ACKNOWLEDGED}
          ORDER BY v.payment_id
         ON CONFLICT (payment_id, kind) WHERE resolved_at IS NULL DO UPDATE
            SET external_status = EXCLUDED.external_status,
                details = EXCLUDED.details,
                last_seen_at = now()
         RETURNING id, payment_id, kind, (xmax = 0) AS created"
    );
    bind_findings(super::query_as(&sql), findings)
        .fetch_all(conn)
        .await
        .context("recording findings")
}

/// Of these findings, the `(payment_id, kind)` pairs [`upsert_open`] would
/// create: not already open, not acknowledged. For `run --dry-run`, which
/// writes nothing.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn not_yet_open(
    conn: &mut PgConnection,
    findings: &[NewFinding],
) -> Result<Vec<(i64, String)>, StoreError> {
    if findings.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT DISTINCT v.payment_id, v.kind
           FROM {UNNEST_FINDINGS}
          WHERE NOT EXISTS (SELECT 1 FROM reconciliation_findings f
                             WHERE f.payment_id = v.payment_id AND f.kind = v.kind
                               AND f.resolved_at IS NULL)
            AND {NOT_ACKNOWLEDGED}"
    );
    bind_findings(super::query_as(&sql), findings)
        .fetch_all(conn)
        .await
        .context("counting findings a run would create")
}

/// For payments Stripe has just answered for, resolves every open finding
/// whose kind is no longer what the scan decides: `cleared` when the payment
/// now has no finding, `superseded` when it has another (e.g. the
/// PaymentIntent's status moved on, a refund was seen). `current[i]` is the
/// kind decided for `payment_ids[i]` (NULL for none). Where `with_status[i]`
/// is false (a 404, a malformed id: an answer that says nothing about the
/// money), open findings of the money kinds stay open: only a later answer
/// that shows the money can clear them. Returns the ids of the findings
/// resolved, so their repair commands can be closed in the same transaction.
/// The caller holds the payments' row locks (payment before finding,
/// everywhere).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn resolve_stale(
    conn: &mut PgConnection,
    payment_ids: &[i64],
    current: &[Option<String>],
    with_status: &[bool],
) -> Result<Vec<i64>, StoreError> {
    if payment_ids.is_empty() {
        return Ok(Vec::new());
    }
    super::query_scalar(
        "UPDATE reconciliation_findings f
            SET resolved_at = now(),
                resolution = CASE WHEN v.kind IS NULL THEN $5::text ELSE $6::text END
           FROM unnest($1::bigint[], $2::text[], $3::bool[]) AS v(payment_id, kind, with_status)
          WHERE f.payment_id = v.payment_id AND f.resolved_at IS NULL
            AND f.kind IS DISTINCT FROM v.kind
            AND (v.with_status OR NOT f.kind = ANY($4))
         RETURNING f.id",
    )
    .bind(payment_ids)
    .bind(current)
    .bind(with_status)
    .bind(crate::reconcile::FindingKind::money_kinds())
    .bind(Resolution::Cleared.as_str())
    .bind(Resolution::Superseded.as_str())
    .fetch_all(conn)
    .await
    .context("resolving findings the scan no longer sees")
}

/// The open findings of these payments that a repair command repairs
/// (`missed_success`, `missed_cancel`).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn open_repairable(
    conn: &mut PgConnection,
    payment_ids: &[i64],
) -> Result<Vec<i64>, StoreError> {
    if payment_ids.is_empty() {
        return Ok(Vec::new());
    }
    let kinds: Vec<String> = crate::reconcile::RepairCommand::ALL
        .iter()
        .map(|c| c.finding_kind().as_str().into_owned())
        .collect();
    super::query_scalar(
        "SELECT id FROM reconciliation_findings
          WHERE payment_id = ANY($1) AND resolved_at IS NULL AND kind = ANY($2)",
    )
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
    payment_ids: &[i64],
) -> Result<Vec<i64>, StoreError> {
    if payment_ids.is_empty() {
        return Ok(Vec::new());
    }
    super::query_scalar(
        "SELECT DISTINCT payment_id FROM reconciliation_findings
          WHERE payment_id = ANY($1) AND resolved_at IS NULL AND kind = ANY($2)",
    )
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
    let done = super::query(
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

/// Resolves one open finding by hand ([`Resolution::Manual`]), keeping who
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
            SET resolved_at = now(), resolution = $4, resolved_by = $2, resolution_note = $3
          WHERE id = $1 AND resolved_at IS NULL",
    )
    .bind(finding_id)
    .bind(by)
    .bind(note)
    .bind(Resolution::Manual.as_str())
    .execute(conn)
    .await
    .context("resolving a finding by hand")?;
    Ok(done.rows_affected() == 1)
}

/// A finding as the review queue shows it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct FindingView {
    /// `reconciliation_findings.id`
    pub id: i64,
    /// `payments.id`; `None` for a finding about a PaymentIntent no payment
    /// points at (`missing_locally`).
    pub payment_id: Option<i64>,
    /// The payment's order, for a person to look up.
    pub order_id: Option<String>,
    /// The payment's PaymentIntent id (as stored; may be malformed), or the
    /// PaymentIntent a finding without payment names.
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
    /// [`Resolution::as_str`] of why it was resolved; kept as text because a
    /// person or another version may have written any value.
    pub resolution: Option<String>,
    /// Who resolved it by hand.
    pub resolved_by: Option<String>,
    /// Why.
    pub resolution_note: Option<String>,
    /// What a person needs to judge it (amounts in minor units, currency,
    /// refund share, deadlines), as the scan last saw it.
    pub details: Option<serde_json::Value>,
    /// When a scan last saw this drift.
    pub last_seen_at: Option<chrono::DateTime<chrono::Utc>>,
    /// For the aging kinds, seconds until the deadline in `details`
    /// (negative: since), by the database's clock; `None` for other kinds.
    pub seconds_to_deadline: Option<f64>,
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
        "SELECT f.id, f.payment_id, p.order_id,
                coalesce(p.stripe_payment_intent_id, f.stripe_payment_intent_id) AS stripe_payment_intent_id,
                f.kind, f.local_status,
                f.external_status, f.detected_at, f.resolved_at, f.resolution, f.resolved_by,
                f.resolution_note, f.details, f.last_seen_at,
                CASE WHEN jsonb_typeof(f.details->'deadline') = 'string'
                     THEN extract(epoch FROM (f.details->>'deadline')::timestamptz - now())::float8
                END AS seconds_to_deadline
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

/// How many findings [`list`] would return without its limit.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn count(
    conn: &mut PgConnection,
    kind: Option<&str>,
    open_only: bool,
) -> Result<i64, StoreError> {
    super::query_scalar(
        "SELECT count(*) FROM reconciliation_findings f
          WHERE ($1::text IS NULL OR f.kind = $1) AND (NOT $2 OR f.resolved_at IS NULL)",
    )
    .bind(kind)
    .bind(open_only)
    .fetch_one(conn)
    .await
    .context("counting findings")
}

/// A finding as the repair worker checks it before applying its command.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FindingForRepair {
    /// `payments.id` the finding is about; `None` for a finding about a
    /// PaymentIntent alone (never repairable).
    pub payment_id: Option<i64>,
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

/// A finding about a PaymentIntent no `payments` row points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewIntentFinding {
    /// The PaymentIntent id (`pi_...`, validated).
    pub stripe_payment_intent_id: String,
    /// The kind's database string (`missing_locally`).
    pub kind: String,
    /// Stripe's status when detected.
    pub external_status: Option<String>,
    /// Amount, currency, metadata key, Dashboard context.
    pub details: Option<serde_json::Value>,
}

/// What `local_status` says on a finding without a payment.
pub const NO_LOCAL_ROW: &str = "none";

/// Records findings without a payment in one statement, once per open
/// (PaymentIntent, kind): an open one is refreshed (`external_status`,
/// `details`, `last_seen_at`), one a person resolved by hand with the same
/// external status and details is not opened again. Returns how many were
/// created.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn upsert_open_for_intents(
    conn: &mut PgConnection,
    findings: &[NewIntentFinding],
) -> Result<u64, StoreError> {
    if findings.is_empty() {
        return Ok(0);
    }
    let intents: Vec<&str> = findings
        .iter()
        .map(|f| f.stripe_payment_intent_id.as_str())
        .collect();
    let kinds: Vec<&str> = findings.iter().map(|f| f.kind.as_str()).collect();
    let externals: Vec<Option<&str>> = findings
        .iter()
        .map(|f| f.external_status.as_deref())
        .collect();
    let details: Vec<Option<&serde_json::Value>> =
        findings.iter().map(|f| f.details.as_ref()).collect();
    let created: Vec<bool> = super::query_scalar(
        "INSERT INTO reconciliation_findings
                (payment_id, stripe_payment_intent_id, kind, local_status, external_status,
                 details, last_seen_at)
         SELECT NULL, v.intent, v.kind, $5, v.external_status, v.details, now()
           FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[])
                AS v(intent, kind, external_status, details)
          WHERE NOT EXISTS (
                SELECT 1 FROM reconciliation_findings r
                 WHERE r.payment_id IS NULL AND r.stripe_payment_intent_id = v.intent
                   AND r.kind = v.kind AND r.resolution = $6
                   AND r.external_status IS NOT DISTINCT FROM v.external_status
                   AND r.details IS NOT DISTINCT FROM v.details)
          ORDER BY v.intent
         ON CONFLICT (stripe_payment_intent_id, kind) WHERE resolved_at IS NULL AND payment_id IS NULL
         DO UPDATE SET external_status = EXCLUDED.external_status,
                       details = EXCLUDED.details,
                       last_seen_at = now()
         RETURNING (xmax = 0) AS created",
    )
    .bind(intents)
    .bind(kinds)
    .bind(externals)
    .bind(details)
    .bind(NO_LOCAL_ROW)
    .bind(Resolution::Manual.as_str())
    .fetch_all(conn)
    .await
    .context("recording findings without a payment")?;
    Ok(created.into_iter().filter(|c| *c).count() as u64)
}

/// For PaymentIntents Stripe has just answered for, resolves every open
/// finding without a payment whose kind is no longer what the events job
/// decides: `cleared` when there is none now (a `payments` row appeared, or
/// the PaymentIntent no longer qualifies), `superseded` otherwise.
/// `current[i]` is the kind decided for `intents[i]` (NULL for none).
/// Returns how many were resolved.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn resolve_stale_for_intents(
    conn: &mut PgConnection,
    intents: &[&str],
    current: &[Option<&str>],
) -> Result<u64, StoreError> {
    if intents.is_empty() {
        return Ok(0);
    }
    let done = super::query(
        "UPDATE reconciliation_findings f
            SET resolved_at = now(),
                resolution = CASE WHEN v.kind IS NULL THEN $3::text ELSE $4::text END
           FROM unnest($1::text[], $2::text[]) AS v(intent, kind)
          WHERE f.payment_id IS NULL AND f.stripe_payment_intent_id = v.intent
            AND f.resolved_at IS NULL AND f.kind IS DISTINCT FROM v.kind",
    )
    .bind(intents)
    .bind(current)
    .bind(Resolution::Cleared.as_str())
    .bind(Resolution::Superseded.as_str())
    .execute(conn)
    .await
    .context("resolving findings without a payment")?;
    Ok(done.rows_affected())
}

/// Which of these PaymentIntents already have an open finding of `kind`
/// without a payment (no need to ask Stripe again to keep it open).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn open_for_intents(
    conn: &mut PgConnection,
    intents: &[&str],
    kind: &str,
) -> Result<Vec<String>, StoreError> {
    if intents.is_empty() {
        return Ok(Vec::new());
    }
    super::query_scalar(
        "SELECT stripe_payment_intent_id FROM reconciliation_findings
          WHERE payment_id IS NULL AND resolved_at IS NULL
            AND stripe_payment_intent_id = ANY($1) AND kind = $2",
    )
    .bind(intents)
    .bind(kind)
    .fetch_all(conn)
    .await
    .context("looking up open findings without a payment")
}
