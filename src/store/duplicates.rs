//! Duplicate PaymentIntent ids in `payments`, counted for `migrate`'s report
//! (docs/schema.md): in one scan, or in bounded steps along the lookup index.

use sqlx::PgConnection;

use super::{Context, StoreError};

/// PaymentIntent ids held by more than one row: `(ids, rows holding them)`.
/// Scans the table once, in one statement without a statement timeout
/// (`SET LOCAL statement_timeout = 0`: a role's default must not cut it
/// short: docs/operations.md, "A role's statement timeout"); `migrate` only,
/// when no index orders the column (with
/// one, [`count_duplicates_step`] counts in bounded steps).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn count_duplicates(conn: &mut PgConnection) -> Result<(i64, i64), StoreError> {
    let mut tx = super::begin_with(&mut *conn, UNBOUNDED)
        .await
        .context("opening a transaction")?;
    let counted = super::query_as(
        "SELECT count(*), coalesce(sum(n), 0)::bigint FROM (
             SELECT count(*) AS n FROM payments
              WHERE stripe_payment_intent_id IS NOT NULL
              GROUP BY stripe_payment_intent_id HAVING count(*) > 1) d",
    )
    .fetch_one(&mut *tx)
    .await
    .context("counting duplicate PaymentIntent ids")?;
    tx.commit().await.context("closing a transaction")?;
    Ok(counted)
}

/// No statement timeout, a bounded lock wait: `migrate`'s long statements.
const UNBOUNDED: super::Timeouts = super::Timeouts {
    statement: "0",
    lock: "10s",
};

/// Rows of `payments` one step of [`count_duplicates_step`] reads (an index
/// range, well under a second).
pub const DUPLICATE_STEP_ROWS: i64 = 50_000;

/// Where a count of duplicate PaymentIntent ids in steps stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DuplicateCount {
    /// Rows with a PaymentIntent id read so far.
    pub rows_read: i64,
    /// PaymentIntent ids held by more than one row, so far.
    pub ids: i64,
    /// The rows holding them, so far.
    pub rows: i64,
    /// The last PaymentIntent id counted (every row of it included).
    after: Option<String>,
    /// The whole column has been counted.
    pub done: bool,
}

/// Counts the next [`DUPLICATE_STEP_ROWS`] rows of `payments` in
/// `stripe_payment_intent_id` order into `count`, in a transaction of its
/// own bounded like the job's ([`super::Timeouts::JOB`]): one range of the
/// index on the column, whose last id is counted whole (a step never splits
/// a PaymentIntent's rows). Needs a valid index on the column
/// ([`super::payment_index::payment_intent_index`] not `Missing`), or each step scans the table.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn count_duplicates_step(
    conn: &mut PgConnection,
    count: &mut DuplicateCount,
) -> Result<(), StoreError> {
    // The first step starts at '' (no text sorts before it) and includes it.
    let (from, op) = match &count.after {
        None => (String::new(), ">="),
        Some(after) => (after.clone(), ">"),
    };
    let sql = format!(
        "WITH bound AS (
              SELECT max(pi) AS last FROM (
                  SELECT stripe_payment_intent_id AS pi FROM payments
                   WHERE stripe_payment_intent_id {op} $1
                   ORDER BY stripe_payment_intent_id LIMIT $2) step),
              groups AS (
              SELECT count(*) AS n FROM payments, bound
               WHERE stripe_payment_intent_id {op} $1 AND stripe_payment_intent_id <= bound.last
               GROUP BY stripe_payment_intent_id)
         SELECT (SELECT last FROM bound), coalesce(sum(n), 0)::bigint,
                count(*) FILTER (WHERE n > 1), coalesce(sum(n) FILTER (WHERE n > 1), 0)::bigint
           FROM groups"
    );
    let mut tx = super::begin(&mut *conn)
        .await
        .context("opening a transaction")?;
    let (last, read, ids, rows): (Option<String>, i64, i64, i64) = super::query_as(&sql)
        .bind(from)
        .bind(DUPLICATE_STEP_ROWS)
        .fetch_one(&mut *tx)
        .await
        .context("counting duplicate PaymentIntent ids")?;
    tx.commit().await.context("closing a transaction")?;
    count.rows_read += read;
    count.ids += ids;
    count.rows += rows;
    count.done = last.is_none() || read < DUPLICATE_STEP_ROWS;
    count.after = last;
    Ok(())
}
