//! `payments`: the batch read by id cursor and the "verified" stamp. Status
//! changes are not here: they belong to the canonical writer.

use std::time::Duration;

use sqlx::PgConnection;

use super::{Context, StoreError};

/// One row of a batch, as phase 1 reads it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PaymentRow {
    /// `payments.id`
    pub id: i64,
    /// `payments.stripe_payment_intent_id`, untrusted.
    pub stripe_payment_intent_id: String,
    /// `payments.status`
    pub status: String,
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
    sqlx::query_as(
        "SELECT id, stripe_payment_intent_id, status,
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

/// Records what Stripe said for rows actually confirmed with it: sets
/// `observed_external_status` and `last_reconciled_at = now()` for each
/// `(ids[i], statuses[i])`, in one statement.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn mark_reconciled(
    conn: &mut PgConnection,
    ids: &[i64],
    statuses: &[String],
) -> Result<u64, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let done = sqlx::query(
        "UPDATE payments AS p
            SET observed_external_status = v.status, last_reconciled_at = now()
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
