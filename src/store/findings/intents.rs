//! Findings about a PaymentIntent alone (`payment_id` NULL; `missing_locally`
//! from the events job), unique per open (PaymentIntent, kind) through
//! `reconciliation_findings_open_intent`.

use sqlx::PgConnection;

use crate::reconcile::Resolution;
use crate::store::{query, query_scalar, Context, StoreError};

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
    /// The connected account whose feed named it (`None`: the platform's).
    pub stripe_account_id: Option<String>,
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
    let accounts: Vec<Option<&str>> = findings
        .iter()
        .map(|f| f.stripe_account_id.as_deref())
        .collect();
    let created: Vec<bool> = query_scalar(
        "INSERT INTO reconciliation_findings
                (payment_id, stripe_payment_intent_id, kind, local_status, external_status,
                 details, last_seen_at, stripe_account_id)
         SELECT NULL, v.intent, v.kind, $5, v.external_status, v.details, now(), v.account
           FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $7::text[])
                AS v(intent, kind, external_status, details, account)
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
                       stripe_account_id = EXCLUDED.stripe_account_id,
                       last_seen_at = now()
         RETURNING (xmax = 0) AS created",
    )
    .bind(intents)
    .bind(kinds)
    .bind(externals)
    .bind(details)
    .bind(NO_LOCAL_ROW)
    .bind(Resolution::Manual.as_str())
    .bind(accounts)
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
    let done = query(
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
    query_scalar(
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
