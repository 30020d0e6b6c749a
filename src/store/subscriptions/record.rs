//! Phase 3 of a subscriptions batch, set-based: what the scan confirmed of
//! each row (`reconciliation_subscription_state`), its findings recorded
//! once per open (row, kind) — or (Stripe subscription, kind) for one no
//! row names — and the open findings a later read no longer sees cleared.

use sqlx::PgConnection;

use super::KIND_PREFIX;
use crate::key::PaymentKey;
use crate::reconcile::Resolution;
use crate::store::{Context, StoreError};

/// A row the scan confirmed with Stripe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmed {
    /// The row's key.
    pub key: PaymentKey,
    /// Its subscription id.
    pub stripe_id: String,
    /// Stripe's status as read.
    pub status: String,
}

/// Stamps the rows confirmed with Stripe for `job`.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn stamp(
    conn: &mut PgConnection,
    job: &str,
    rows: &[Confirmed],
) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let keys: Vec<&PaymentKey> = rows.iter().map(|r| &r.key).collect();
    let ids: Vec<&str> = rows.iter().map(|r| r.stripe_id.as_str()).collect();
    let statuses: Vec<&str> = rows.iter().map(|r| r.status.as_str()).collect();
    crate::store::query(
        "INSERT INTO reconciliation_subscription_state
                (job, subscription_id, stripe_subscription_id, observed_status, last_reconciled_at)
         SELECT $1, v.k, v.s, v.st, now()
           FROM unnest($2::text[], $3::text[], $4::text[]) AS v(k, s, st)
          ORDER BY v.k
         ON CONFLICT (job, subscription_id) DO UPDATE
            SET stripe_subscription_id = EXCLUDED.stripe_subscription_id,
                observed_status = EXCLUDED.observed_status,
                last_reconciled_at = now()",
    )
    .bind(job)
    .bind(keys)
    .bind(ids)
    .bind(statuses)
    .execute(conn)
    .await
    .context("stamping the confirmed subscriptions")?;
    Ok(())
}

/// A finding to record.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFinding {
    /// The row's key; `None` for a Stripe subscription no row names.
    pub key: Option<PaymentKey>,
    /// The Stripe subscription.
    pub stripe_id: Option<String>,
    /// The kind's database string (`subscription_…`).
    pub kind: String,
    /// The application's status word (or what stands for it).
    pub local_status: String,
    /// Stripe's status.
    pub external_status: Option<String>,
    /// What a person needs (`differs`, values, reasons).
    pub details: serde_json::Value,
    /// The connected account.
    pub account: Option<String>,
}

/// An open finding [`record`] touched.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Recorded {
    /// `reconciliation_findings.id`.
    pub id: i64,
    /// The row's key (`None`: a Stripe subscription no row names).
    pub key: Option<PaymentKey>,
    /// The kind.
    pub kind: String,
    /// Inserted now (`false`: it was open and only refreshed).
    pub created: bool,
}

/// Records `findings` in one statement per target: a finding already open
/// for the same (row, kind) — or (Stripe subscription, kind) — is refreshed
/// (`external_status`, `details`, `last_seen_at`), never duplicated.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn record(
    conn: &mut PgConnection,
    findings: &[NewFinding],
) -> Result<Vec<Recorded>, StoreError> {
    let (rows, orphans): (Vec<&NewFinding>, Vec<&NewFinding>) =
        findings.iter().partition(|f| f.key.is_some());
    let mut recorded = upsert(
        &mut *conn,
        &rows,
        "(subscription_id, kind) WHERE resolved_at IS NULL AND subscription_id IS NOT NULL",
    )
    .await?;
    recorded.extend(
        upsert(
            conn,
            &orphans,
            "(stripe_subscription_id, kind) WHERE resolved_at IS NULL AND subscription_id IS NULL
               AND payment_id IS NULL AND stripe_subscription_id IS NOT NULL",
        )
        .await?,
    );
    Ok(recorded)
}

async fn upsert(
    conn: &mut PgConnection,
    findings: &[&NewFinding],
    target: &str,
) -> Result<Vec<Recorded>, StoreError> {
    if findings.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "INSERT INTO reconciliation_findings
                (subscription_id, stripe_subscription_id, kind, local_status, external_status,
                 details, last_seen_at, stripe_account_id)
         SELECT v.k, v.s, v.kind, v.local, v.ext, v.details, now(), v.account
           FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[],
                       $7::text[]) AS v(k, s, kind, local, ext, details, account)
          ORDER BY v.k, v.s, v.kind
         ON CONFLICT {target} DO UPDATE
            SET external_status = EXCLUDED.external_status,
                details = EXCLUDED.details,
                last_seen_at = now(),
                stripe_account_id = EXCLUDED.stripe_account_id
         RETURNING id, subscription_id AS key, kind, (xmax = 0) AS created"
    );
    crate::store::query_as(&sql)
        .bind(findings.iter().map(|f| f.key.as_ref()).collect::<Vec<_>>())
        .bind(
            findings
                .iter()
                .map(|f| f.stripe_id.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(findings.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>())
        .bind(
            findings
                .iter()
                .map(|f| f.local_status.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            findings
                .iter()
                .map(|f| f.external_status.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(findings.iter().map(|f| &f.details).collect::<Vec<_>>())
        .bind(
            findings
                .iter()
                .map(|f| f.account.as_deref())
                .collect::<Vec<_>>(),
        )
        .fetch_all(conn)
        .await
        .context("recording subscription findings")
}

/// Resolves as `cleared` the open subscription findings of the rows `keys`
/// (confirmed with Stripe) whose kind the read no longer sees (`kept`:
/// the `(key, kind)` pairs it saw). Returns the resolved findings' ids.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn clear_stale(
    conn: &mut PgConnection,
    keys: &[PaymentKey],
    kept: &[(PaymentKey, String)],
) -> Result<Vec<i64>, StoreError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let (kept_keys, kept_kinds): (Vec<&PaymentKey>, Vec<&str>) =
        kept.iter().map(|(k, kind)| (k, kind.as_str())).unzip();
    crate::store::query_scalar(
        "UPDATE reconciliation_findings f
            SET resolved_at = now(), resolution = $4
          WHERE f.resolved_at IS NULL AND f.subscription_id = ANY($1::text[])
            AND (f.kind LIKE $5 || '%' OR f.kind = 'write_refused')
            AND NOT EXISTS (SELECT 1 FROM unnest($2::text[], $3::text[]) AS k(key, kind)
                             WHERE k.key = f.subscription_id AND k.kind = f.kind)
         RETURNING f.id",
    )
    .bind(keys)
    .bind(kept_keys)
    .bind(kept_kinds)
    .bind(Resolution::Cleared.as_str())
    .bind(KIND_PREFIX.replace('_', "\\_"))
    .fetch_all(conn)
    .await
    .context("clearing subscription findings no longer seen")
}

/// Resolves as `cleared` the open `kind` findings of the Stripe
/// subscriptions `stripe_ids` that a row now names or that no longer grant
/// (the events job's missing-locally findings). Returns how many.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn clear_orphans(
    conn: &mut PgConnection,
    kind: &str,
    stripe_ids: &[String],
) -> Result<u64, StoreError> {
    if stripe_ids.is_empty() {
        return Ok(0);
    }
    let done = crate::store::query(
        "UPDATE reconciliation_findings SET resolved_at = now(), resolution = $3
          WHERE resolved_at IS NULL AND subscription_id IS NULL AND payment_id IS NULL
            AND kind = $1 AND stripe_subscription_id = ANY($2::text[])",
    )
    .bind(kind)
    .bind(stripe_ids)
    .bind(Resolution::Cleared.as_str())
    .execute(conn)
    .await
    .context("clearing missing-locally subscription findings")?;
    Ok(done.rows_affected())
}
