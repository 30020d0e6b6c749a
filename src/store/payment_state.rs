//! `reconciliation_payment_state`: the reconciler's own state per payment
//! (what Stripe said, when it last confirmed the payment, the payment's
//! `created_at` copied when first seen). docs/design.md, "Invariants": the scan
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

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::config::PaymentTimes;

use super::{Context, StoreError};
use crate::key::{KeyKind, KeyType, PaymentKey, Position, Walk};

/// Records, in one statement, what a read observed for each row of
/// `(ids[i], confirmed[i], statuses[i])`: a row first seen gets its state row
/// (the payment's `created_at` copied); a confirmed row also gets
/// `last_reconciled_at = now()` and, where `statuses[i]` is not NULL,
/// `observed_external_status` (a NULL status, Stripe's 404 or a malformed id,
/// keeps the last observed one). Rows not confirmed keep what they had. Ids of
/// payments deleted meanwhile are skipped; a repeated id counts once,
/// confirmed if any of its entries is. Each id is one primary-key probe of
/// `payments` (a lateral subquery the planner cannot turn into a join: as a
/// join it chose a merge join that read `payments`' primary key from the
/// table's start to the batch, a cost growing with the cursor's position).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn record(
    conn: &mut PgConnection,
    key: &KeyType,
    ids: &[PaymentKey],
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
         SELECT DISTINCT ON (v.id) p.id, p.created_at, v.status,
                CASE WHEN v.confirmed THEN now() END
           FROM unnest({ids}, $2::bool[], $3::text[]) AS v(id, confirmed, status)
          CROSS JOIN LATERAL (SELECT p.id, {} AS created_at FROM payments p
                               WHERE p.id = v.id OFFSET 0) p
          ORDER BY v.id, v.confirmed DESC
         ON CONFLICT (payment_id) DO UPDATE
            SET observed_external_status =
                    coalesce(excluded.observed_external_status, s.observed_external_status),
                last_reconciled_at = excluded.last_reconciled_at,
                created_at = excluded.created_at
          WHERE excluded.last_reconciled_at IS NOT NULL",
        times.created("p"),
        ids = key.cast_array("$1")
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

/// Registers every payment without a state row (`last_reconciled_at` NULL,
/// `created_at` copied), in one statement without a statement timeout (a
/// lock wait bounded to 10 s): what migration 0010 does for integer keys,
/// for a table whose key columns [`super::keys::align`] has just given
/// `payments.id`'s type (uuid, text, numeric), so that the first cycle
/// updates state rows instead of inserting each row ahead of the walk
/// ([`register_new`]) and updating it again. Returns the rows registered.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn register_existing(
    conn: &mut PgConnection,
    times: &PaymentTimes,
) -> Result<u64, StoreError> {
    let sql = format!(
        "INSERT INTO reconciliation_payment_state (payment_id, created_at)
         SELECT p.id, {} FROM payments p
         ON CONFLICT (payment_id) DO NOTHING",
        times.created("p")
    );
    let mut tx = super::begin_with(
        &mut *conn,
        super::Timeouts {
            statement: "0",
            lock: "10s",
        },
    )
    .await
    .context("opening a transaction")?;
    let done = super::query(&sql)
        .execute(&mut *tx)
        .await
        .context("registering the existing payments")?;
    tx.commit()
        .await
        .context("committing the registered payments")?;
    Ok(done.rows_affected())
}

/// Registers every payment without a state row (`last_reconciled_at` NULL,
/// `created_at` copied): what a walk of the reconciler's own ordered copy
/// (docs/keys.md, "The walk") does once at the start of each run, so the
/// rows inserted since the last run take their place in the copy's
/// `(created_at, id)` order. One anti-join over `payments` and the state
/// table (a hash anti-join: in proportion to the table; BENCHMARKS.md,
/// "Issue 40"), in a transaction of its own without a statement timeout (a
/// lock wait bounded to 10 s). Returns the rows registered.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn register_unseen(
    conn: &mut PgConnection,
    times: &PaymentTimes,
) -> Result<u64, StoreError> {
    let sql = format!(
        "INSERT INTO reconciliation_payment_state (payment_id, created_at)
         SELECT p.id, {} FROM payments p
          WHERE NOT EXISTS (SELECT 1 FROM reconciliation_payment_state s WHERE s.payment_id = p.id)
          ORDER BY p.id
         ON CONFLICT (payment_id) DO NOTHING",
        times.created("p")
    );
    let mut tx = super::begin_with(
        &mut *conn,
        super::Timeouts {
            statement: "0",
            lock: "10s",
        },
    )
    .await
    .context("opening a transaction")?;
    let done = super::query(&sql)
        .execute(&mut *tx)
        .await
        .context("registering the payments inserted since the last run")?;
    tx.commit()
        .await
        .context("committing the registered payments")?;
    Ok(done.rows_affected())
}

/// Whether the state table holds no row while `payments` holds some: what
/// an interrupted [`register_existing`] leaves on a first install (two
/// one-row lookups).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn empty_beside_payments(conn: &mut PgConnection) -> Result<bool, StoreError> {
    super::query_scalar(
        "SELECT NOT EXISTS (SELECT 1 FROM reconciliation_payment_state)
            AND EXISTS (SELECT 1 FROM payments)",
    )
    .fetch_one(conn)
    .await
    .context("looking for unregistered payments")
}

/// The last seen payment in the walk's order: the highest key (a key walk)
/// or the latest `created_at` with its highest key (a `(created_at, id)`
/// walk); `None` when none. Callers bind it as a parameter (one index lookup
/// first) so that the planner sees the value and reads the few rows beyond
/// it by index.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn highest_seen(
    conn: &mut PgConnection,
    key: &KeyType,
) -> Result<Option<Position>, StoreError> {
    let sql = match key.walk() {
        // Qualified names: `ORDER BY payment_id` would order by the text
        // output column of the same name.
        Walk::Key => {
            "SELECT s.payment_id::text AS key, NULL::timestamptz
               FROM reconciliation_payment_state s
              ORDER BY s.payment_id DESC LIMIT 1"
        }
        Walk::CreatedAt => {
            "SELECT s.payment_id::text AS key, s.created_at
               FROM reconciliation_payment_state s
              ORDER BY s.created_at DESC, s.payment_id DESC LIMIT 1"
        }
    };
    let row: Option<(PaymentKey, Option<DateTime<Utc>>)> = super::query_as(sql)
        .fetch_optional(conn)
        .await
        .context("reading the highest seen payment")?;
    Ok(row.map(|(key, created_at)| Position { key, created_at }))
}

/// Where the earliest state row never confirmed lies in the walk's order,
/// as text: its key (a key walk) or its `created_at` (a `(created_at, id)`
/// walk); `None`: there is none. One lookup on a partial index of the
/// unconfirmed rows (`..._unconfirmed`, `..._unconfirmed_created`, migration
/// 0019). The rows behind the cursor bind it as a parameter, so the planner
/// sees how few unconfirmed rows can lie behind the cursor, and the range
/// it reads starts at the first live entry (entries of rows confirmed since
/// the last vacuum are skipped once, not reread every batch).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn earliest_unconfirmed(
    conn: &mut PgConnection,
    key: &KeyType,
) -> Result<Option<String>, StoreError> {
    let sql = match key.walk() {
        Walk::Key => {
            "SELECT convert_to(s.payment_id::text, 'SQL_ASCII') FROM reconciliation_payment_state s
              WHERE s.last_reconciled_at IS NULL ORDER BY s.payment_id LIMIT 1"
        }
        Walk::CreatedAt => {
            "SELECT convert_to(to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), 'SQL_ASCII')
               FROM reconciliation_payment_state s
              WHERE s.last_reconciled_at IS NULL ORDER BY s.created_at LIMIT 1"
        }
    };
    let bytes: Option<Vec<u8>> = super::query_scalar(sql)
        .fetch_optional(conn)
        .await
        .context("reading the earliest unconfirmed payment")?;
    Ok(bytes.map(|b| lower_bound_text(&b)))
}

/// A text no greater than `bytes` in the key's order that a UTF-8 client
/// can send: `bytes` itself when valid UTF-8, else its valid prefix (a
/// text key with a stray byte in a `SQL_ASCII` database, docs/keys.md: the
/// prefix sorts at or before the key, so the range read from it still
/// holds the row).
pub(crate) fn lower_bound_text(bytes: &[u8]) -> String {
    bytes
        .utf8_chunks()
        .next()
        .map_or_else(String::new, |chunk| chunk.valid().to_owned())
}

/// Registers up to `limit` payments beyond the last seen one in the walk's
/// order (`last_reconciled_at` NULL, `created_at` copied), so that the rows
/// the lag must read from `payments` itself stay the few inserted since the
/// last batch. Called once per batch with the batch size, it keeps up with the
/// table's growth whenever the scan can complete a cycle at all (B·R > G,
/// docs/design.md, "The cursor and cycles"). A key walk of uuid, text or numeric keys has no
/// "beyond" (random keys): nothing is registered, and the lag reads unseen
/// rows from `payments` (docs/keys.md). Returns the rows registered. Rows
/// of an integer walk are inserted in id order, the one order every writer
/// of this table takes (two partitions' jobs register the same ids at once;
/// a race lost anyway is retried, [`super::retry`]). Rows beyond the head
/// are probed one by one in the state table (`OFFSET 0` keeps the
/// `NOT EXISTS` a per-row subplan: the planner, guessing a third of the
/// table beyond the head, hashed the whole state table every batch).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn register_new(
    conn: &mut PgConnection,
    key: &KeyType,
    limit: u32,
    times: &PaymentTimes,
) -> Result<u64, StoreError> {
    let created = times.created("p");
    let sql = match (key.walk(), key.kind()) {
        // Registered once per run instead ([`register_unseen`]).
        _ if key.own_copy() => return Ok(0),
        (Walk::Key, KeyKind::Integer) => format!(
            "INSERT INTO reconciliation_payment_state (payment_id, created_at)
             SELECT p.id, {created} FROM payments p
              WHERE p.id > (SELECT coalesce(max(payment_id), -9223372036854775808)
                              FROM reconciliation_payment_state)
                AND NOT EXISTS (SELECT 1 FROM reconciliation_payment_state s WHERE s.payment_id = p.id OFFSET 0)
              ORDER BY p.id
              LIMIT $1
             ON CONFLICT (payment_id) DO NOTHING"
        ),
        (Walk::CreatedAt, _) => format!(
            "INSERT INTO reconciliation_payment_state (payment_id, created_at)
             SELECT p.id, {created} FROM payments p
              WHERE p.created_at >= {}
                AND NOT EXISTS (SELECT 1 FROM reconciliation_payment_state s WHERE s.payment_id = p.id OFFSET 0)
              ORDER BY p.created_at, p.id
              LIMIT $1
             ON CONFLICT (payment_id) DO NOTHING",
            times.created_bound(
                "(SELECT coalesce(max(created_at), '-infinity') FROM reconciliation_payment_state)"
            )
        ),
        (Walk::Key, _) => return Ok(0),
    };
    let done = super::query(&sql)
        .bind(i64::from(limit))
        .execute(conn)
        .await
        .context("registering new payments")?;
    Ok(done.rows_affected())
}

/// The condition of `alias`'s rows in the walked range `(after, through]`
/// of the walk's order: the key at `$1`/`$3` and `created_at` at `$2`/`$4`;
/// `after` `None` is the cycle's start, `through` `None` the table's end.
/// `times`: the `created_at` bound in the application's column type
/// (`payments`); `None` for the reconciler's own `timestamptz` copy.
fn in_range(
    key: &KeyType,
    (alias, created, id): (&str, &str, &str),
    (after, through): (bool, bool),
    times: Option<&PaymentTimes>,
) -> String {
    let compare = |op: &str, k: u8, c: u8| {
        let k = key.cast(&format!("${k}"));
        let c = format!("${c}");
        let bound = times.map_or_else(|| format!("{c}::timestamptz"), |t| t.created_bound(&c));
        match key.walk() {
            Walk::Key => format!("{alias}.{id} {op} {k}"),
            Walk::CreatedAt => format!("({alias}.{created}, {alias}.{id}) {op} ({bound}, {k})"),
        }
    };
    let mut parts = vec!["TRUE".to_owned()];
    if after {
        parts.push(compare(">", 1, 2));
    }
    if through {
        parts.push(compare("<=", 3, 4));
    }
    // Implied by the two row comparisons, but estimated as the narrow range
    // it is: the planner takes two row comparisons for independent halves
    // of the table (a quarter of it), and then hashes or JIT-compiles for
    // what is a batch's span.
    if after && through && key.walk() == Walk::CreatedAt {
        let bound =
            |c: &str| times.map_or_else(|| format!("{c}::timestamptz"), |t| t.created_bound(c));
        parts.push(format!(
            "{alias}.{created} BETWEEN {} AND {}",
            bound("$2"),
            bound("$4")
        ));
    }
    parts.join(" AND ")
}

/// Registers the payments in the walked range `(after, through]` without a
/// state row (`last_reconciled_at` NULL, `created_at` copied): the range a
/// partition's batch walked holds other partitions' rows, which must stay
/// seen (their lag counts from `created_at` until their own job confirms
/// them). An index range of the batch's span, inserted in key order (the
/// other partitions' jobs register overlapping ranges at the same time: one
/// order, so they wait for each other instead of deadlocking). Returns the
/// rows registered.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn register_range(
    conn: &mut PgConnection,
    key: &KeyType,
    after: Option<&Position>,
    through: Option<&Position>,
    times: &PaymentTimes,
) -> Result<u64, StoreError> {
    let sql = format!(
        "INSERT INTO reconciliation_payment_state (payment_id, created_at)
         SELECT p.id, {} FROM payments p
          WHERE {}
          ORDER BY p.id
         ON CONFLICT (payment_id) DO NOTHING",
        times.created("p"),
        in_range(
            key,
            ("p", "created_at", "id"),
            (after.is_some(), through.is_some()),
            Some(times)
        )
    );
    let done = bind_range(super::query(&sql), after, through)
        .execute(conn)
        .await
        .context("registering the range's payments")?;
    Ok(done.rows_affected())
}

fn bind_range<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    after: Option<&'q Position>,
    through: Option<&'q Position>,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    query
        .bind(after.map(|p| &p.key))
        .bind(after.and_then(|p| p.created_at))
        .bind(through.map(|p| &p.key))
        .bind(through.and_then(|p| p.created_at))
}

/// Forgets the state rows in the walked range `(after, through]` whose
/// payment no longer exists: the range a batch's cursor just walked, so every
/// deleted payment is forgotten within a cycle and stops counting in the lag.
/// (In a `(created_at, id)` walk the state row's own `created_at` places it:
/// the ranges of a cycle cover the whole order, so every row is looked at
/// once per cycle.) Returns the keys removed.
///
/// One primary-key probe of `payments` per state row of the range: the
/// `OFFSET 0` keeps the `NOT EXISTS` a per-row subplan. As an anti-join the
/// planner hashed the whole of `payments` for every batch (it overestimates
/// a range of `(created_at, payment_id)` tenfold): a cost growing with the
/// table, not the batch.
///
/// The keys of `read` (the rows the batch read from `payments` in its
/// phase 1) are not probed: they existed a moment ago. One deleted since
/// is forgotten when the next cycle's walk passes it (its open findings
/// resolve now: the batch's keys are looked up for them); this spares a
/// random probe of `payments` per row of a walk of the own copy.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn forget_deleted(
    conn: &mut PgConnection,
    key: &KeyType,
    (after, through): (Option<&Position>, Option<&Position>),
    read: &[PaymentKey],
) -> Result<Vec<PaymentKey>, StoreError> {
    let sql = format!(
        "DELETE FROM reconciliation_payment_state s
          WHERE {}
            AND NOT (s.payment_id = ANY({}))
            AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.id = s.payment_id OFFSET 0)
         RETURNING s.payment_id::text",
        in_range(
            key,
            ("s", "created_at", "payment_id"),
            (after.is_some(), through.is_some()),
            None
        ),
        key.cast_array("$5")
    );
    super::query_scalar(&sql)
        .bind(after.map(|p| &p.key))
        .bind(after.and_then(|p| p.created_at))
        .bind(through.map(|p| &p.key))
        .bind(through.and_then(|p| p.created_at))
        .bind(read)
        .fetch_all(conn)
        .await
        .context("forgetting deleted payments")
}

#[cfg(test)]
mod tests {
    use super::lower_bound_text;

    #[test]
    fn a_key_with_a_stray_byte_is_bounded_by_its_valid_prefix() {
        assert_eq!(lower_bound_text(b"pay_b\xff"), "pay_b");
        assert_eq!(lower_bound_text(b"pay_b\xffc"), "pay_b");
        assert_eq!(lower_bound_text("pay_ü".as_bytes()), "pay_ü");
        assert_eq!(lower_bound_text(b""), "");
    }
}
