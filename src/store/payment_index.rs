//! Checks and changes of the application's `payments` table that cannot live
//! in a migration file: the plain lookup index on `stripe_payment_intent_id`
//! is built `CONCURRENTLY` (outside any transaction); a UNIQUE one only on
//! `migrate --unique-payment-intent-index` (docs/design.md, "Invariants":
//! `migrate` never adds a constraint to the application's table); the plain index on
//! `(RECONCILER_PARTITION_COLUMN, id)` likewise. `payments.id`'s type is
//! `store::keys`'.

use sqlx::PgConnection;

use super::{Context, StoreError};
use crate::config::ColumnName;

/// The unique index `migrate --unique-payment-intent-index` adds (older
/// versions added it by default; installs that have it keep it).
pub const UNIQUE_INDEX: &str = "payments_stripe_payment_intent_id_unique";
/// The plain lookup index `migrate` adds when no index covers the column.
pub const PLAIN_INDEX: &str = "payments_stripe_payment_intent_id_lookup";

/// How a `CREATE INDEX CONCURRENTLY` on `payments` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexBuild {
    /// The index is built and valid.
    Built,
    /// Its lock was not granted within
    /// [`super::legacy::INDEX_LOCK_TIMEOUT`] (a long transaction on
    /// `payments`): nothing was left behind; the next `migrate` tries again.
    LockTimeout,
}

/// What indexes `payments.stripe_payment_intent_id` alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentIntentIndex {
    /// A valid UNIQUE index (or constraint): duplicates cannot exist.
    Unique,
    /// A valid plain index: duplicates are possible but found by lookup.
    Plain,
    /// None: a duplicate lookup would scan the table.
    Missing,
}

/// Reads which index covers `payments (stripe_payment_intent_id)`.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn payment_intent_index(
    conn: &mut PgConnection,
) -> Result<PaymentIntentIndex, StoreError> {
    let unique: Option<bool> = super::query_scalar(
        "SELECT bool_or(i.indisunique) FROM pg_index i
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
          WHERE i.indrelid = 'payments'::regclass AND i.indnatts = 1 AND i.indisvalid
            AND i.indpred IS NULL AND a.attname = 'stripe_payment_intent_id'",
    )
    .fetch_one(conn)
    .await
    .context("reading the indexes of payments")?;
    Ok(match unique {
        Some(true) => PaymentIntentIndex::Unique,
        Some(false) => PaymentIntentIndex::Plain,
        None => PaymentIntentIndex::Missing,
    })
}

/// The statements that build the plain lookup index by hand (`psql`, as the
/// table's owner), one per line, for a user whose `migrate` could not: no
/// statement timeout for the session, an invalid leftover of an interrupted
/// build dropped, the index built `CONCURRENTLY` (the application keeps
/// writing).
pub fn build_by_hand() -> String {
    format!(
        "SET statement_timeout = 0;\nDROP INDEX CONCURRENTLY IF EXISTS {PLAIN_INDEX};\nCREATE INDEX CONCURRENTLY IF NOT EXISTS {PLAIN_INDEX} ON payments (stripe_payment_intent_id);"
    )
}

/// Builds `name` on `payments (stripe_payment_intent_id)` with `CREATE
/// [UNIQUE] INDEX CONCURRENTLY`, so the application keeps writing. An invalid
/// leftover of an earlier interrupted build is dropped first. `conn` must not
/// be in a transaction. Its lock waits are bounded
/// ([`IndexBuild::LockTimeout`]). On a partitioned `payments` the plain index
/// is built per partition ([`create_partitioned_index`]); a UNIQUE one is
/// not asked for there (it would need the partition key).
///
/// # Errors
/// [`StoreError`]: e.g. a duplicate inserted meanwhile fails a unique build
/// (the invalid index is dropped again).
pub async fn create_payment_intent_index(
    conn: &mut PgConnection,
    unique: bool,
) -> Result<IndexBuild, StoreError> {
    let name = if unique { UNIQUE_INDEX } else { PLAIN_INDEX };
    if !unique && payments_partitioned(&mut *conn).await? {
        return create_partitioned_index(conn, name, &["stripe_payment_intent_id"]).await;
    }
    if !drop_invalid(conn, name).await? {
        return Ok(IndexBuild::LockTimeout);
    }
    let sql = if unique {
        format!("CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {name} ON payments (stripe_payment_intent_id)")
    } else {
        format!(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON payments (stripe_payment_intent_id)"
        )
    };
    build(conn, name, &sql).await
}

/// Runs the `CREATE INDEX CONCURRENTLY` `sql` of the index `name` under
/// [`super::legacy::INDEX_LOCK_TIMEOUT`]; a failed build's invalid index is
/// dropped again.
async fn build(conn: &mut PgConnection, name: &str, sql: &str) -> Result<IndexBuild, StoreError> {
    let built = super::legacy::concurrently(&mut *conn, sql).await;
    if built.is_err() {
        drop_invalid(conn, name).await?;
    }
    match built {
        Ok(()) => Ok(IndexBuild::Built),
        Err(e) if super::legacy::is_lock_unavailable(&e) => Ok(IndexBuild::LockTimeout),
        Err(e) => Err(e),
    }
}

/// Invalid indexes (an interrupted `CREATE INDEX CONCURRENTLY`) whose names
/// occur in `sql` (a migration's text).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn invalid_indexes_named_in(
    conn: &mut PgConnection,
    sql: &str,
) -> Result<Vec<String>, StoreError> {
    let mut tx = super::begin(&mut *conn)
        .await
        .context("opening a transaction")?;
    let invalid: Vec<String> = super::query_scalar(
        "SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
          WHERE NOT i.indisvalid",
    )
    .fetch_all(&mut *tx)
    .await
    .context("looking for invalid indexes")?;
    tx.commit().await.context("closing a transaction")?;
    Ok(invalid
        .into_iter()
        .filter(|name| sql.contains(name.as_str()))
        .collect())
}

/// Drops the index `name` if it is invalid (`DROP INDEX CONCURRENTLY`, so the
/// application keeps writing, under [`super::legacy::INDEX_LOCK_TIMEOUT`]).
/// `conn` must not be in a transaction. Returns `false` when an invalid
/// index is still there (its lock was not granted in time).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn drop_invalid(conn: &mut PgConnection, name: &str) -> Result<bool, StoreError> {
    let mut tx = super::begin(&mut *conn)
        .await
        .context("opening a transaction")?;
    let invalid: bool = super::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                         WHERE c.relname = $1 AND NOT i.indisvalid)",
    )
    .bind(name)
    .fetch_one(&mut *tx)
    .await
    .context("looking for an invalid index")?;
    tx.commit().await.context("closing a transaction")?;
    if invalid {
        let dropped =
            super::legacy::concurrently(conn, &format!("DROP INDEX CONCURRENTLY IF EXISTS {name}"))
                .await;
        match dropped {
            Ok(()) => {}
            Err(e) if super::legacy::is_lock_unavailable(&e) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Whether `payments` exists yet (the demo's migrations create it; an
/// application brings its own).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn payments_exists(conn: &mut PgConnection) -> Result<bool, StoreError> {
    super::query_scalar("SELECT to_regclass('payments') IS NOT NULL")
        .fetch_one(conn)
        .await
        .context("looking for payments")
}

/// The name of the index `migrate` adds on `payments (<column>, id)` for
/// `RECONCILER_PARTITION_COLUMN`: `payments_partition_<column>` lower-cased
/// (a plain identifier, so it needs no quoting) and cut to PostgreSQL's 63
/// bytes.
pub fn partition_index_name(column: &ColumnName) -> String {
    let mut name = format!(
        "payments_partition_{}",
        column.as_str().to_ascii_lowercase()
    );
    name.truncate(63);
    name
}

/// A valid index of `payments` whose first column is `column` and second
/// `id` (the user's own, or the one [`create_partition_index`] adds): its
/// name, or `None`.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn partition_index(
    conn: &mut PgConnection,
    column: &ColumnName,
) -> Result<Option<String>, StoreError> {
    super::query_scalar(
        "SELECT c.relname::text FROM pg_index i
           JOIN pg_class c ON c.oid = i.indexrelid
           JOIN pg_attribute a0 ON a0.attrelid = i.indrelid AND a0.attnum = i.indkey[0]
           JOIN pg_attribute a1 ON a1.attrelid = i.indrelid AND a1.attnum = i.indkey[1]
          WHERE i.indrelid = 'payments'::regclass AND i.indnatts >= 2 AND i.indisvalid
            AND i.indpred IS NULL AND a0.attname = $1 AND a1.attname = 'id'
          ORDER BY c.relname LIMIT 1",
    )
    .bind(column.as_str())
    .fetch_optional(conn)
    .await
    .context("reading the indexes of payments")
}

/// A valid, non-partial index of `payments` whose first column is `column`
/// (any index of the application's): its name, or `None`. `migrate` uses
/// it to say which lookup index would help (the Checkout Session column).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn leading_index(
    conn: &mut PgConnection,
    column: &ColumnName,
) -> Result<Option<String>, StoreError> {
    super::query_scalar(
        "SELECT c.relname::text FROM pg_index i
           JOIN pg_class c ON c.oid = i.indexrelid
           JOIN pg_attribute a0 ON a0.attrelid = i.indrelid AND a0.attnum = i.indkey[0]
          WHERE i.indrelid = 'payments'::regclass AND i.indisvalid
            AND i.indpred IS NULL AND a0.attname = $1
          ORDER BY c.relname LIMIT 1",
    )
    .bind(column.as_str())
    .fetch_optional(conn)
    .await
    .context("reading the indexes of payments")
}

/// The statements that build the partition's index by hand (`psql`, as the
/// table's owner), as [`build_by_hand`] does for the PaymentIntent index.
pub fn partition_build_by_hand(column: &ColumnName) -> String {
    let name = partition_index_name(column);
    format!(
        "SET statement_timeout = 0;\nDROP INDEX CONCURRENTLY IF EXISTS {name};\nCREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON payments ({}, id);",
        column.quoted()
    )
}

/// Builds the plain index [`partition_index_name`] on `payments (<column>,
/// id)` with `CREATE INDEX CONCURRENTLY` (never UNIQUE: it is a lookup
/// index, not a constraint), dropping an invalid leftover first. `conn` must
/// not be in a transaction; its lock waits are bounded. Returns how the build
/// ended and the index's name.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn create_partition_index(
    conn: &mut PgConnection,
    column: &ColumnName,
) -> Result<(IndexBuild, String), StoreError> {
    let name = partition_index_name(column);
    if payments_partitioned(&mut *conn).await? {
        let built = create_partitioned_index(conn, &name, &[column.as_str(), "id"]).await?;
        return Ok((built, name));
    }
    if !drop_invalid(conn, &name).await? {
        return Ok((IndexBuild::LockTimeout, name));
    }
    let sql = format!(
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON payments ({}, id)",
        column.quoted()
    );
    Ok((build(conn, &name, &sql).await?, name))
}

/// Whether `payments` is a partitioned table (`relkind = 'p'`): an index on
/// it is built per partition ([`create_partitioned_index`]).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn payments_partitioned(conn: &mut PgConnection) -> Result<bool, StoreError> {
    let mut tx = super::begin(&mut *conn)
        .await
        .context("opening a transaction")?;
    let partitioned: Option<bool> = super::query_scalar(
        "SELECT c.relkind = 'p' FROM pg_class c WHERE c.oid = to_regclass('payments')",
    )
    .fetch_optional(&mut *tx)
    .await
    .context("reading whether payments is partitioned")?;
    tx.commit().await.context("closing a transaction")?;
    Ok(partitioned.unwrap_or(false))
}

/// The partitions of `payments` (direct children, quoted and qualified),
/// each with the name of its own index of `name` (the partition's name and
/// `name`'s suffix, cut to 63 bytes) and the name of an existing valid index
/// of the partition on exactly `columns` (`None`: to build).
async fn partitions(
    conn: &mut PgConnection,
    name: &str,
    columns: &[&str],
) -> Result<Vec<(String, String, Option<String>)>, StoreError> {
    let mut tx = super::begin(&mut *conn)
        .await
        .context("opening a transaction")?;
    let rows: Vec<(String, String, Option<String>)> = super::query_as(
        "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname),
                left(c.relname || '_' || $1, 63),
                (SELECT quote_ident(x.relname) FROM pg_index i
                   JOIN pg_class x ON x.oid = i.indexrelid
                  WHERE i.indrelid = c.oid AND i.indisvalid AND i.indpred IS NULL
                    AND NOT i.indisunique AND i.indexprs IS NULL
                    AND (SELECT array_agg(a.attname::text ORDER BY k.ord)
                           FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                           JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum) = $2
                  ORDER BY x.relname LIMIT 1)
           FROM pg_inherits h
           JOIN pg_class c ON c.oid = h.inhrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE h.inhparent = to_regclass('payments')
          ORDER BY c.relname",
    )
    .bind(name)
    .bind(columns)
    .fetch_all(&mut *tx)
    .await
    .context("reading the partitions of payments")?;
    tx.commit().await.context("closing a transaction")?;
    Ok(rows)
}

/// The statements that build the plain index `name` on the partitioned
/// `payments (<columns>)` by hand (`psql`, as the table's owner): the
/// parent's index `ON ONLY payments` (a catalog entry, instant), each
/// partition's built `CONCURRENTLY` (the application keeps writing), each
/// attached; the parent's index is valid once every partition's is attached.
///
/// # Errors
/// [`StoreError`] from the database (the partitions are read).
pub async fn partitioned_build_by_hand(
    conn: &mut PgConnection,
    name: &str,
    columns: &[&str],
) -> Result<String, StoreError> {
    let list = quoted_columns(columns);
    let mut sql = format!(
        "SET statement_timeout = 0;\nCREATE INDEX IF NOT EXISTS {name} ON ONLY payments ({list});"
    );
    for (partition, index, existing) in partitions(conn, name, columns).await? {
        let index = match existing {
            Some(existing) => existing,
            None => {
                let index = quote(&index);
                sql.push_str(&format!(
                    "\nCREATE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {partition} ({list});"
                ));
                index
            }
        };
        sql.push_str(&format!("\nALTER INDEX {name} ATTACH PARTITION {index};"));
    }
    Ok(sql)
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn quoted_columns(columns: &[&str]) -> String {
    columns
        .iter()
        .map(|c| quote(c))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Builds the plain index `name` on the partitioned `payments (<columns>)`
/// without blocking the application (docs/schema.md, "A partitioned
/// payments"): `CREATE INDEX … ON ONLY payments` (a catalog entry under a
/// bounded lock wait), then on each partition without a valid index on
/// `columns` its own built `CREATE INDEX CONCURRENTLY` (one simple-protocol
/// statement each), then `ALTER INDEX … ATTACH PARTITION`; the parent's
/// index is valid once every partition's is attached. A partition that is
/// itself partitioned is not supported by this step (its build fails with the
/// database's message). `conn` must not be in a transaction.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn create_partitioned_index(
    conn: &mut PgConnection,
    name: &str,
    columns: &[&str],
) -> Result<IndexBuild, StoreError> {
    let list = quoted_columns(columns);
    let mut tx = super::begin(&mut *conn)
        .await
        .context("opening a transaction")?;
    let created = super::query(&format!(
        "CREATE INDEX IF NOT EXISTS {name} ON ONLY payments ({list})"
    ))
    .execute(&mut *tx)
    .await
    .context("creating the partitioned index on payments");
    match created {
        Ok(_) => tx.commit().await.context("closing a transaction")?,
        Err(e) if super::legacy::is_lock_unavailable(&e) => return Ok(IndexBuild::LockTimeout),
        Err(e) => return Err(e),
    }
    for (partition, index, existing) in partitions(conn, name, columns).await? {
        let index = match existing {
            Some(existing) => existing,
            None => {
                if !drop_invalid(conn, &index).await? {
                    return Ok(IndexBuild::LockTimeout);
                }
                let index = quote(&index);
                let sql = format!(
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {partition} ({list})"
                );
                match super::legacy::concurrently(&mut *conn, &sql).await {
                    Ok(()) => {}
                    Err(e) if super::legacy::is_lock_unavailable(&e) => {
                        return Ok(IndexBuild::LockTimeout)
                    }
                    Err(e) => return Err(e),
                }
                index
            }
        };
        if !attach(conn, name, &index).await? {
            return Ok(IndexBuild::LockTimeout);
        }
    }
    Ok(IndexBuild::Built)
}

/// Attaches the partition's index `index` to the parent's `name` unless it
/// is attached already, in a transaction of its own. `false` when the lock
/// was not granted in time.
///
/// # Errors
/// [`StoreError`] from the database.
async fn attach(conn: &mut PgConnection, name: &str, index: &str) -> Result<bool, StoreError> {
    let mut tx = super::begin(&mut *conn)
        .await
        .context("opening a transaction")?;
    let attached = super::query(
        "SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass($1) AND inhparent = to_regclass($2)",
    )
    .bind(index)
    .bind(name)
    .fetch_optional(&mut *tx)
    .await
    .context("reading the partitioned index")?
    .is_some();
    if !attached {
        let done = super::query(&format!("ALTER INDEX {name} ATTACH PARTITION {index}"))
            .execute(&mut *tx)
            .await
            .context("attaching a partition's index");
        match done {
            Ok(_) => {}
            Err(e) if super::legacy::is_lock_unavailable(&e) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    tx.commit().await.context("closing a transaction")?;
    Ok(true)
}
