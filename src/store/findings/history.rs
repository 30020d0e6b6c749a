//! The review loop's reads and writes (docs/review.md): one finding with its
//! history (`findings show`), the all-or-nothing resolution of many
//! (`findings resolve --file`), and the findings a notification is owed for.
//! The history itself is written by the trigger of
//! `migrations/0013_findings_history.sql` on every insert and update of
//! `reconciliation_findings`, so no writer can forget it.

use sqlx::PgConnection;

use super::review::FindingView;
use crate::reconcile::Resolution;
use crate::store::{query, query_as, Context, StoreError};

/// The columns of a [`FindingView`], over `reconciliation_findings f` joined
/// to `payments p` (the payment's text as bytes, [`crate::store::text`]).
const VIEW_COLUMNS: &str = "f.id, to_jsonb(f.payment_id) AS payment_id,
        convert_to(to_jsonb(p) ->> 'order_id', 'SQL_ASCII') AS order_id,
        convert_to(coalesce(nullif((p.stripe_payment_intent_id)::text, ''), f.stripe_payment_intent_id)::text,
                   'SQL_ASCII') AS stripe_payment_intent_id,
        f.checkout_session_id, f.subscription_id, f.stripe_subscription_id,
        f.stripe_account_id, f.kind, f.local_status,
        f.external_status, f.detected_at, f.resolved_at, f.resolution, f.resolved_by,
        f.resolution_note, f.details, f.last_seen_at,
        CASE WHEN jsonb_typeof(f.details->'deadline') = 'string'
             THEN extract(epoch FROM (f.details->>'deadline')::timestamptz - now())::float8
        END AS seconds_to_deadline";

/// One finding; `None` when no finding has this id.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn find(conn: &mut PgConnection, id: i64) -> Result<Option<FindingView>, StoreError> {
    let sql = format!(
        "SELECT {VIEW_COLUMNS} FROM reconciliation_findings f
           LEFT JOIN payments p ON p.id = f.payment_id WHERE f.id = $1"
    );
    query_as(&sql)
        .bind(id)
        .fetch_optional(conn)
        .await
        .context("reading a finding")
}

/// One entry of a finding's history (`reconciliation_findings_history`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct HistoryEntry {
    /// The finding this entry is about (a reopened drift is a new finding:
    /// the history of one shows every finding of its payment and kind).
    pub finding_id: i64,
    /// When (the database's clock).
    pub at: chrono::DateTime<chrono::Utc>,
    /// `detected`, `refreshed`, `resolved` or `reopened`.
    pub what: String,
    /// Who: the person of a manual resolution, else `stripe-reconciler`.
    pub who: Option<String>,
    /// The resolution recorded (`manual`, `cleared`, ...), for `resolved`.
    pub resolution: Option<String>,
    /// The person's note, or which finding a reopening follows.
    pub note: Option<String>,
    /// Stripe's status at that moment.
    pub external_status: Option<String>,
}

/// The history of a finding and of every finding of the same payment and
/// kind (or, without a payment, the same PaymentIntent and kind), oldest
/// first: a drift resolved, reopened and resolved again shows each step.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn history(conn: &mut PgConnection, id: i64) -> Result<Vec<HistoryEntry>, StoreError> {
    query_as(
        "SELECT h.finding_id, h.at, h.what, h.who, h.resolution, h.note, h.external_status
           FROM reconciliation_findings_history h
          WHERE h.finding_id IN (
                SELECT r.id FROM reconciliation_findings f
                  JOIN reconciliation_findings r ON r.kind = f.kind
                   AND (r.payment_id = f.payment_id
                        OR (f.payment_id IS NULL AND r.payment_id IS NULL
                            AND r.stripe_payment_intent_id = f.stripe_payment_intent_id))
                 WHERE f.id = $1)
          ORDER BY h.at, h.id",
    )
    .bind(id)
    .fetch_all(conn)
    .await
    .context("reading a finding's history")
}

/// A finding named for resolution, as it stands.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct NamedFinding {
    /// `reconciliation_findings.id`
    pub id: i64,
    /// Still open.
    pub open: bool,
    /// The kind's database string.
    pub kind: String,
}

/// The findings among `ids` that exist, in id order: one statement over the
/// whole list (a join with the array, whatever its length). With `lock`,
/// each is locked `FOR UPDATE`, in id order, until the transaction ends:
/// only the reconciler's own rows; the application's `payments` is never
/// read nor locked (docs/review.md). A scan or repair worker holding one of
/// them makes this wait (bounded by the transaction's `lock_timeout`); the
/// order keeps two resolutions from deadlocking each other.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn named(
    conn: &mut PgConnection,
    ids: &[i64],
    lock: bool,
) -> Result<Vec<NamedFinding>, StoreError> {
    let sql = format!(
        "SELECT f.id, f.resolved_at IS NULL AS open, f.kind
           FROM reconciliation_findings f
          WHERE f.id IN (SELECT unnest($1::bigint[]))
          ORDER BY f.id{}",
        if lock { " FOR UPDATE OF f" } else { "" }
    );
    query_as(&sql)
        .bind(ids)
        .fetch_all(conn)
        .await
        .context(if lock {
            "locking the findings named"
        } else {
            "reading the findings named"
        })
}

/// Resolves open findings by hand ([`Resolution::Manual`]), `ids[i]` by
/// `by[i]` with `notes[i]`, in one statement. Returns how many were resolved
/// (the caller checks it is all of them).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn resolve_many(
    conn: &mut PgConnection,
    ids: &[i64],
    by: &[&str],
    notes: &[&str],
) -> Result<u64, StoreError> {
    let done = query(
        "UPDATE reconciliation_findings f
            SET resolved_at = now(), resolution = $4, resolved_by = v.by, resolution_note = v.note
           FROM unnest($1::bigint[], $2::text[], $3::text[]) AS v(id, by, note)
          WHERE f.id = v.id AND f.resolved_at IS NULL",
    )
    .bind(ids)
    .bind(by)
    .bind(notes)
    .bind(Resolution::Manual.as_str())
    .execute(conn)
    .await
    .context("resolving findings by hand")?;
    Ok(done.rows_affected())
}

/// The open findings of `kinds` (every kind but `kinds` when `exclude`) no
/// notification has been sent for, oldest first, at most `limit`.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn not_notified(
    conn: &mut PgConnection,
    kinds: &[String],
    exclude: bool,
    limit: i64,
) -> Result<Vec<FindingView>, StoreError> {
    let sql = format!(
        "SELECT {VIEW_COLUMNS} FROM reconciliation_findings f
           LEFT JOIN payments p ON p.id = f.payment_id
          WHERE f.resolved_at IS NULL AND (f.kind = ANY($1)) <> $3
            AND NOT EXISTS (SELECT 1 FROM reconciliation_notified n WHERE n.finding_id = f.id)
          ORDER BY f.id LIMIT $2"
    );
    query_as(&sql)
        .bind(kinds)
        .bind(limit)
        .bind(exclude)
        .fetch_all(conn)
        .await
        .context("reading the findings to notify")
}

/// Claims these findings for a notification: records them as notified and
/// returns the ids this transaction claimed (a concurrent run's claim waits
/// for this transaction; committed, it keeps the finding from being posted
/// twice; rolled back after a failed post, it leaves it to the next run).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn mark_notified(conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<i64>, StoreError> {
    crate::store::query_scalar(
        "INSERT INTO reconciliation_notified (finding_id)
         SELECT unnest($1::bigint[]) ON CONFLICT DO NOTHING RETURNING finding_id",
    )
    .bind(ids)
    .fetch_all(conn)
    .await
    .context("claiming the findings to notify")
}
