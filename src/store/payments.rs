//! `payments`: the batch read by id cursor and the "verified" stamp. Status
//! changes are not here: they belong to the canonical writer.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{Context, StoreError};

/// One row of a batch, as phase 1 reads it. Text columns are optional: an
/// application's own `payments` table may hold NULLs, which must become
/// findings, not a batch that fails forever.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PaymentRow {
    /// `payments.id`
    pub id: i64,
    /// `payments.stripe_payment_intent_id`, untrusted.
    pub stripe_payment_intent_id: Option<String>,
    /// `payments.status`
    pub status: Option<String>,
    /// `payments.version` when read; phase 3 writes nothing for a row whose
    /// version or `updated_at` changed meanwhile.
    pub version: i64,
    /// `payments.updated_at` when read.
    pub updated_at: DateTime<Utc>,
    /// `updated_at` falls within the grace window.
    pub recently_changed: bool,
}

/// Reads up to `limit` rows with `id > after_id` in id order, flagging those
/// updated less than `grace` ago.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read_batch(
    conn: &mut PgConnection,
    after_id: i64,
    limit: u32,
    grace: Duration,
) -> Result<Vec<PaymentRow>, StoreError> {
    super::query_as(
        "SELECT id, stripe_payment_intent_id, status, version, updated_at,
                updated_at > now() - make_interval(secs => $2) AS recently_changed
           FROM payments
          WHERE id > $1
          ORDER BY id
          LIMIT $3",
    )
    .bind(after_id)
    .bind(grace.as_secs_f64())
    .bind(i64::from(limit))
    .fetch_all(conn)
    .await
    .context("reading the batch")
}

/// Locks, in id order, the rows of `(ids[i], versions[i], updated_ats[i])`
/// that are unchanged since phase 1 and returns their ids. Rows that changed
/// (a webhook moved them while Stripe was being asked) are neither locked nor
/// returned: the caller writes nothing for them. Locking in id order keeps
/// concurrent batches and the repair worker from deadlocking.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn lock_unchanged(
    conn: &mut PgConnection,
    ids: &[i64],
    versions: &[i64],
    updated_ats: &[DateTime<Utc>],
) -> Result<Vec<i64>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    super::query_scalar(
        "SELECT p.id FROM payments AS p
           JOIN unnest($1::bigint[], $2::bigint[], $3::timestamptz[]) AS v(id, version, updated_at)
             ON p.id = v.id
          WHERE p.version = v.version AND p.updated_at = v.updated_at
          ORDER BY p.id
          FOR UPDATE OF p",
    )
    .bind(ids)
    .bind(versions)
    .bind(updated_ats)
    .fetch_all(conn)
    .await
    .context("locking the batch's payments")
}

/// Records what Stripe said for rows it answered definitively: sets
/// `last_reconciled_at = now()` and, where `statuses[i]` is not NULL,
/// `observed_external_status`, for each `(ids[i], statuses[i])`, in one
/// statement. A NULL status (Stripe's 404, a malformed id) keeps the last
/// observed one.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn mark_reconciled(
    conn: &mut PgConnection,
    ids: &[i64],
    statuses: &[Option<String>],
) -> Result<u64, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let done = super::query(
        "UPDATE payments AS p
            SET observed_external_status = coalesce(v.status, p.observed_external_status),
                last_reconciled_at = now()
           FROM unnest($1::bigint[], $2::text[]) AS v(id, status)
          WHERE p.id = v.id",
    )
    .bind(ids)
    .bind(statuses)
    .execute(conn)
    .await
    .context("stamping verified payments")?;
    Ok(done.rows_affected())
}

/// What a guarded status transition found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransitionResult {
    /// The row was in `from` and is now in `to`; `version` is the new version.
    Changed {
        /// `payments.version` after the update.
        version: i64,
    },
    /// The row exists but was no longer in `from` (e.g. the webhook got there
    /// first): nothing was changed.
    AlreadyMoved {
        /// The status it has.
        status: String,
    },
    /// No payment has this id.
    Missing,
}

/// The guarded status UPDATE of the canonical writer: `from -> to` with
/// `version + 1` and `updated_at = now()`, only when the row is in `from`.
/// Only `repair::writer` may call this: it is the one path that changes
/// `payments.status`.
///
/// # Errors
/// [`StoreError`] from the database.
pub(crate) async fn transition_status(
    conn: &mut PgConnection,
    payment_id: i64,
    from: &str,
    to: &str,
) -> Result<TransitionResult, StoreError> {
    let version: Option<i64> = super::query_scalar(
        "UPDATE payments SET status = $3, version = version + 1, updated_at = now()
          WHERE id = $1 AND status = $2
          RETURNING version",
    )
    .bind(payment_id)
    .bind(from)
    .bind(to)
    .fetch_optional(&mut *conn)
    .await
    .context("changing the payment status")?;
    if let Some(version) = version {
        return Ok(TransitionResult::Changed { version });
    }
    let status: Option<String> = super::query_scalar("SELECT status FROM payments WHERE id = $1")
        .bind(payment_id)
        .fetch_optional(conn)
        .await
        .context("reading the payment status")?;
    Ok(status.map_or(TransitionResult::Missing, |status| {
        TransitionResult::AlreadyMoved { status }
    }))
}

/// A PaymentIntent id this job once verified with Stripe (its row has an
/// observed status), used to tell a wrong key from genuinely missing
/// PaymentIntents. `None` on a new install.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn a_verified_payment_intent(pool: &sqlx::PgPool) -> Result<Option<String>, StoreError> {
    super::query_scalar(
        "SELECT stripe_payment_intent_id FROM payments WHERE observed_external_status IS NOT NULL LIMIT 1",
    )
    .fetch_optional(pool)
    .await
    .context("looking up a verified PaymentIntent")
}
