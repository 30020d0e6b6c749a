//! The row locks of the one lock order (payment, then finding, then outbox)
//! taken by the scan, the repair worker and the review queue, and the
//! canonical writer's guarded status UPDATE, the only write into `payments`.

use super::*;

/// Locks, in id order, the rows of `(ids[i], versions[i], updated_ats[i])`
/// that are unchanged since phase 1 and returns their ids (`updated_at` read
/// as `times` says, as phase 1 read it). Rows that changed
/// (a webhook moved them while Stripe was being asked) are neither locked nor
/// returned: the caller writes nothing for them. Locking in id order, and
/// payments before findings everywhere, keeps concurrent batches and the
/// repair worker from deadlocking. `FOR NO KEY UPDATE`, so the application
/// can still insert rows that reference `payments` meanwhile.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn lock_unchanged(
    conn: &mut PgConnection,
    key: &KeyType,
    ids: &[PaymentKey],
    versions: &[i64],
    updated_ats: &[DateTime<Utc>],
    times: &PaymentTimes,
) -> Result<Vec<PaymentKey>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    // The keys in order, each probed in `payments` by primary key and locked
    // there (the lateral subquery keeps its lock: it is never flattened into
    // a join, which the planner made a merge join reading `payments` from
    // the table's start to the batch); the nested loop keeps the keys' order,
    // so rows are locked in id order.
    let sql = format!(
        "SELECT l.id::text
           FROM (SELECT u.id, u.version, u.updated_at
                   FROM unnest({}, $2::bigint[], $3::timestamptz[]) AS u(id, version, updated_at)
                  ORDER BY u.id) v
          CROSS JOIN LATERAL (SELECT p.id FROM payments AS p
                               WHERE p.id = v.id AND p.version = v.version
                                 AND {} = v.updated_at
                                 FOR NO KEY UPDATE OF p) l
          ORDER BY v.id",
        key.cast_array("$1"),
        times.updated("p")
    );
    crate::store::query_scalar(&sql)
        .bind(ids)
        .bind(versions)
        .bind(updated_ats)
        .fetch_all(conn)
        .await
        .context("locking the batch's payments")
}

/// What a guarded status transition found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransitionResult {
    /// The row held a word of `from` and now holds `to`; `version` is the new version.
    Changed {
        /// `payments.version` after the update.
        version: i64,
    },
    /// The row exists but held no word of `from` (e.g. the webhook got there
    /// first): nothing was changed.
    AlreadyMoved {
        /// The status word it has (NULL as `""`).
        status: String,
    },
    /// No payment has this id.
    Missing,
}

/// The guarded status UPDATE of the canonical writer: to the word `to`
/// with `version + 1` and `updated_at = now()`, only when the row holds one
/// of the words `from` (every word of the source state,
/// `RECONCILER_LOCAL_STATUSES`). Only `repair::writer` may call this: it is
/// the one path that changes `payments.status`.
///
/// # Errors
/// [`StoreError`] from the database.
pub(crate) async fn transition_status(
    conn: &mut PgConnection,
    key: &KeyType,
    payment_id: &PaymentKey,
    from: &[String],
    to: &str,
) -> Result<TransitionResult, StoreError> {
    // The word is cast to the column's own type, read from the catalog
    // (an ENUM, a domain, varchar: docs/schema.md, "Status words"); the guard
    // compares as text, so a word of the map the ENUM lacks matches nothing.
    let status_type = column_type(&mut *conn, "status").await?;
    let sql = format!(
        "UPDATE payments SET status = $3::text::{status_type}, version = version + 1, updated_at = now()
          WHERE id = {} AND (status)::text = ANY($2::text[])
          RETURNING (version)::bigint",
        key.cast("$1")
    );
    let version: Option<i64> = crate::store::query_scalar(&sql)
        .bind(payment_id)
        .bind(from)
        .bind(to)
        .fetch_optional(&mut *conn)
        .await
        .context("changing the payment status")?;
    if let Some(version) = version {
        return Ok(TransitionResult::Changed { version });
    }
    let sql = format!(
        "SELECT convert_to(coalesce(status, '')::text, 'SQL_ASCII') FROM payments WHERE id = {}",
        key.cast("$1")
    );
    let status: Option<Vec<u8>> = crate::store::query_scalar(&sql)
        .bind(payment_id)
        .fetch_optional(conn)
        .await
        .context("reading the payment status")?;
    Ok(status.map_or(TransitionResult::Missing, |status| {
        TransitionResult::AlreadyMoved {
            status: crate::store::text::decode(&status),
        }
    }))
}

/// The SQL type of `payments.<column>` as `format_type` prints it, without
/// modifiers (`payment_status`, `character varying`, `"Status"`,
/// `billing.payment_status`): quoted and qualified by PostgreSQL itself, so
/// it is safe to cast to; a length limit (`varchar(20)`) is then checked by
/// the assignment (an error, never a silent truncation). `text` when there is no such column (the statement
/// then fails with the database's own error).
///
/// # Errors
/// [`StoreError`] from the database.
pub(crate) async fn column_type(
    conn: &mut PgConnection,
    column: &str,
) -> Result<String, StoreError> {
    let found: Option<String> = crate::store::query_scalar(
        "SELECT format_type(a.atttypid, NULL) FROM pg_attribute a
          WHERE a.attrelid = to_regclass('payments') AND a.attname = $1
            AND a.attnum > 0 AND NOT a.attisdropped",
    )
    .bind(column)
    .fetch_optional(conn)
    .await
    .context("reading the type of a column of payments")?;
    Ok(found.unwrap_or_else(|| "text".to_owned()))
}

/// The canonical writer's guarded fill of the PaymentIntent column (issue
/// 32): `stripe_payment_intent_id = $pi` with `version + 1` and `updated_at
/// = now()`, only while the column is NULL or empty, so a row judged by its
/// Checkout Session becomes a PaymentIntent row exactly once and a value
/// the application wrote meanwhile is never overwritten. Returns whether it
/// filled. Only `repair::writer` may call this.
///
/// # Errors
/// [`StoreError`] from the database.
pub(crate) async fn fill_payment_intent(
    conn: &mut PgConnection,
    key: &KeyType,
    payment_id: &PaymentKey,
    payment_intent: &str,
) -> Result<bool, StoreError> {
    let pi_type = column_type(&mut *conn, "stripe_payment_intent_id").await?;
    let sql = format!(
        "UPDATE payments SET stripe_payment_intent_id = $2::text::{pi_type}, version = version + 1, updated_at = now()
          WHERE id = {} AND coalesce((stripe_payment_intent_id)::text, '') = ''",
        key.cast("$1")
    );
    let filled = crate::store::query(&sql)
        .bind(payment_id)
        .bind(payment_intent)
        .execute(conn)
        .await
        .context("filling the payment's PaymentIntent id")?;
    Ok(filled.rows_affected() == 1)
}

/// The payment as the repair worker checks it, locked (`FOR NO KEY UPDATE`)
/// until the worker's transaction ends.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PaymentForRepair {
    /// `payments.status` (read as bytes, [`crate::store::text`])
    #[sqlx(try_from = "crate::store::text::StoredText")]
    pub status: Option<String>,
    /// `payments.stripe_payment_intent_id` (read as bytes)
    #[sqlx(try_from = "crate::store::text::StoredText")]
    pub stripe_payment_intent_id: Option<String>,
    /// The Checkout Session column (`RECONCILER_CHECKOUT_SESSION_COLUMN`)
    /// as text (read as bytes); `None` when not configured or NULL.
    #[sqlx(try_from = "crate::store::text::StoredText")]
    pub checkout_session_id: Option<String>,
}

/// Locks one payment for the repair worker, before its finding, with its
/// Checkout Session column when `session_column` is configured; `None`
/// when it does not exist. The column name enters the SQL only quoted.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn lock_for_repair(
    conn: &mut PgConnection,
    key: &KeyType,
    payment_id: &PaymentKey,
    session_column: Option<&ColumnName>,
) -> Result<Option<PaymentForRepair>, StoreError> {
    let session = session_column.map_or_else(|| "NULL".to_owned(), |c| c.quoted());
    let sql = format!(
        "SELECT convert_to(status::text, 'SQL_ASCII') AS status,
                convert_to(stripe_payment_intent_id::text, 'SQL_ASCII') AS stripe_payment_intent_id,
                convert_to(({session})::text, 'SQL_ASCII') AS checkout_session_id
           FROM payments WHERE id = {} FOR NO KEY UPDATE",
        key.cast("$1")
    );
    crate::store::query_as(&sql)
        .bind(payment_id)
        .fetch_optional(conn)
        .await
        .context("locking a payment for repair")
}
