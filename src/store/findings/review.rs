//! The review queue (`findings list`, `findings resolve`): findings as a
//! person sees them, and the manual resolution that keeps who and why.

use sqlx::PgConnection;

use crate::reconcile::Resolution;
use crate::store::text::StoredText;
use crate::store::{query, query_as, query_scalar, Context, StoreError};

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
    let done = query(
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
    /// `payments.id` in its JSON form (`to_jsonb`: a number for integer and
    /// numeric keys, a string for uuid and text keys; docs/keys.md); `None`
    /// for a finding about a PaymentIntent no payment points at
    /// (`missing_locally`).
    pub payment_id: Option<serde_json::Value>,
    /// The payment's order, for a person to look up (read as bytes: a stray
    /// byte shows as `\xNN`, [`crate::store::text`]).
    #[sqlx(try_from = "StoredText")]
    pub order_id: Option<String>,
    /// The payment's PaymentIntent id (as stored; may be malformed), or the
    /// PaymentIntent a finding without payment names (read as bytes, like
    /// `order_id`).
    #[sqlx(try_from = "StoredText")]
    pub stripe_payment_intent_id: Option<String>,
    /// The connected account (`acct_…`) the finding is about; `None`: the
    /// platform's own account (docs/connect.md).
    pub stripe_account_id: Option<String>,
    /// The payment's Checkout Session when it was judged by its session
    /// (docs/checkout-sessions.md); `None` otherwise.
    pub checkout_session_id: Option<String>,
    /// The subscription row's key as text, for a subscription finding
    /// (docs/subscriptions.md); `None` otherwise.
    pub subscription_id: Option<String>,
    /// The Stripe subscription (`sub_…`) of a subscription finding.
    pub stripe_subscription_id: Option<String>,
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

impl FindingView {
    /// The payment's key as text (`payments.id::text`), untrusted: escape it
    /// before printing. `None` for a finding without payment.
    pub fn payment_key(&self) -> Option<String> {
        self.payment_id
            .as_ref()
            .and_then(crate::key::PaymentKey::from_json)
            .map(|k| k.as_str().to_owned())
    }
}

impl FindingView {
    /// What disagrees on this finding ([`crate::reconcile::differs`]).
    pub fn differs(&self) -> crate::reconcile::Differs {
        crate::reconcile::differs(
            &self.kind,
            &self.local_status,
            self.external_status.as_deref(),
            self.details.as_ref(),
        )
    }

    /// The Dashboard link of this finding's PaymentIntent (or Checkout
    /// Session) in `mode`, on its connected account if any; `None` when no
    /// stored id is well formed ([`crate::dashboard::finding_url`]).
    pub fn dashboard_url(&self, mode: crate::dashboard::DashboardMode) -> Option<String> {
        let account = self.stripe_account_id.as_deref();
        crate::dashboard::finding_url(
            account,
            self.stripe_payment_intent_id.as_deref(),
            self.checkout_session_id.as_deref(),
            mode,
        )
        .or_else(|| {
            let sub = self.stripe_subscription_id.as_deref()?;
            crate::dashboard::subscription_url_on(account, sub, mode)
        })
    }
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
    query_as(
        "SELECT f.id, to_jsonb(f.payment_id) AS payment_id,
                convert_to(to_jsonb(p) ->> 'order_id', 'SQL_ASCII') AS order_id,
                convert_to(coalesce(nullif((p.stripe_payment_intent_id)::text, ''), f.stripe_payment_intent_id)::text,
                           'SQL_ASCII') AS stripe_payment_intent_id,
                f.checkout_session_id, f.subscription_id, f.stripe_subscription_id,
                f.stripe_account_id, f.kind, f.local_status,
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
    query_scalar(
        "SELECT count(*) FROM reconciliation_findings f
          WHERE ($1::text IS NULL OR f.kind = $1) AND (NOT $2 OR f.resolved_at IS NULL)",
    )
    .bind(kind)
    .bind(open_only)
    .fetch_one(conn)
    .await
    .context("counting findings")
}
