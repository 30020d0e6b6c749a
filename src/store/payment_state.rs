//! `reconciliation_payment_state`: the reconciler's own state per payment
//! (what Stripe said, when it last confirmed the payment, the payment's
//! `created_at` copied when first seen). DESIGN.md, Turn 3 contract: the scan
//! writes nothing into the application's rows, so this table, not `payments`,
//! receives every stamp of the scan and the events job. Keyed by
//! `payments.id`, without a foreign key (it would check or cascade the
//! application's DELETEs); [`forget_deleted`] removes rows of deleted payments.
//!
//! A payment is *seen* once it has a row here: carried over by the migration,
//! read by a batch, or registered at the head of the table
//! ([`register_new`]). The lag counts seen rows from their last confirmation
//! (or `created_at`) and rows beyond the highest seen id from `created_at`
//! (`store::stats`).

use sqlx::PgConnection;

use crate::config::PaymentTimes;

use super::{Context, StoreError};

/// Records, in one statement, what a read observed for each row of
/// `(ids[i], confirmed[i], statuses[i])`: a row first seen gets its state row
/// (the payment's `created_at` copied); a confirmed row also gets
/// `last_reconciled_at = now()` and, where `statuses[i]` is not NULL,
/// `observed_external_status` (a NULL status, Stripe's 404 or a malformed id,
/// keeps the last observed one). Rows not confirmed keep what they had. Ids of
/// payments deleted meanwhile are skipped; a repeated id counts once,
/// confirmed if any of its entries is.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn record(
    conn: &mut PgConnection,
    ids: &[i64],
    confirmed: &[bool],
    statuses: &[Option<String>],
    times: &PaymentTimes,
) -> Result<(), StoreError> {
    if ids.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "INSERT INTO reconciliation_payment_state AS s
                (payment_id, created_at, observed_external_status, last_reconciled_at)
         SELECT DISTINCT ON (v.id) p.id, {}, v.status,
                CASE WHEN v.confirmed THEN now() END
           FROM unnest($1::bigint[], $2::bool[], $3::text[]) AS v(id, confirmed, status)
           JOIN payments p ON p.id = v.id
          ORDER BY v.id, v.confirmed DESC
         ON CONFLICT (payment_id) DO UPDATE
            SET observed_external_status =
                    coalesce(excluded.observed_external_status, s.observed_external_status),
                last_reconciled_at = excluded.last_reconciled_at
          WHERE excluded.last_reconciled_at IS NOT NULL",
        times.created("p")
    );
    super::query(&sql)
        .bind(ids)
        .bind(confirmed)
        .bind(statuses)
        .execute(conn)
        .await
        .context("recording what Stripe confirmed")?;
    Ok(())
}

/// The highest payment id with a state row; 0 when none. Callers bind it as
/// a parameter (one primary-key lookup first) so that the planner sees the
/// value and reads the few rows beyond it by primary key.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn highest_seen(conn: &mut PgConnection) -> Result<i64, StoreError> {
    super::query_scalar("SELECT coalesce(max(payment_id), 0) FROM reconciliation_payment_state")
        .fetch_one(conn)
        .await
        .context("reading the highest seen payment")
}

/// Registers up to `limit` payments beyond the highest seen id (in id order,
/// `last_reconciled_at` NULL, `created_at` copied), so that the rows the lag
/// must read from `payments` itself stay the few inserted since the last
/// batch. Called once per batch with the batch size, it keeps up with the
/// table's growth whenever the scan can complete a cycle at all (B·R > G,
/// DESIGN.md "Why a cursor"). Returns the rows registered. Rows are
/// inserted in id order, the one order every writer of this table takes
/// (two partitions' jobs register the same ids at once).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn register_new(
    conn: &mut PgConnection,
    limit: u32,
    times: &PaymentTimes,
) -> Result<u64, StoreError> {
    let sql = format!(
        "INSERT INTO reconciliation_payment_state (payment_id, created_at)
         SELECT p.id, {} FROM payments p
          WHERE p.id > (SELECT coalesce(max(payment_id), 0) FROM reconciliation_payment_state)
          ORDER BY p.id
          LIMIT $1
         ON CONFLICT (payment_id) DO NOTHING",
        times.created("p")
    );
    let done = super::query(&sql)
        .bind(i64::from(limit))
        .execute(conn)
        .await
        .context("registering new payments")?;
    Ok(done.rows_affected())
}

/// Registers the payments in `(after_id, through_id]` without a state row
/// (`last_reconciled_at` NULL, `created_at` copied): the range a partition's
/// batch walked holds other partitions' rows, which must stay seen (their
/// lag counts from `created_at` until their own job confirms them). A
/// primary-key range of the batch's id span, inserted in id order (the
/// other partitions' jobs register overlapping ranges at the same time: one
/// order, so they wait for each other instead of deadlocking). Returns the
/// rows registered.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn register_range(
    conn: &mut PgConnection,
    (after_id, through_id): (i64, i64),
    times: &PaymentTimes,
) -> Result<u64, StoreError> {
    let sql = format!(
        "INSERT INTO reconciliation_payment_state (payment_id, created_at)
         SELECT p.id, {} FROM payments p
          WHERE p.id > $1 AND p.id <= $2
          ORDER BY p.id
         ON CONFLICT (payment_id) DO NOTHING",
        times.created("p")
    );
    let done = super::query(&sql)
        .bind(after_id)
        .bind(through_id)
        .execute(conn)
        .await
        .context("registering the range's payments")?;
    Ok(done.rows_affected())
}

/// Forgets the state rows in `(after_id, through_id]` whose payment no longer
/// exists: the range a batch's cursor just walked, so every deleted payment is
/// forgotten within a cycle and stops counting in the lag. Returns the rows
/// removed.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn forget_deleted(
    conn: &mut PgConnection,
    after_id: i64,
    through_id: i64,
) -> Result<u64, StoreError> {
    let done = super::query(
        "DELETE FROM reconciliation_payment_state s
          WHERE s.payment_id > $1 AND s.payment_id <= $2
            AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.id = s.payment_id)",
    )
    .bind(after_id)
    .bind(through_id)
    .execute(conn)
    .await
    .context("forgetting deleted payments")?;
    Ok(done.rows_affected())
}
