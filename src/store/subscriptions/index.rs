//! The lookup index on the subscriptions table's subscription id column
//! (the events job finds a row by `sub_…`): found when any valid index
//! leads with the column, else built `CONCURRENTLY` (the application keeps
//! writing), per partition on a partitioned table (`ON ONLY` the parent,
//! each partition's built concurrently, then attached). A lookup index, never
//! UNIQUE: nothing constrains the application's rows.

use sqlx::PgConnection;

use crate::store::legacy::{concurrently, is_lock_unavailable};
use crate::store::payment_index::{drop_invalid, IndexBuild};
use crate::store::{Context, StoreError};

/// The name of the index `migrate` builds on `table (column)`, cut to 63 bytes.
pub fn index_name(table: &str, column: &str) -> String {
    let mut name = format!("{table}_{column}_lookup");
    name.truncate(63);
    name
}

/// The name of a valid index of `qualified` whose first column is
/// `column`; `None` when there is none.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn leading(
    conn: &mut PgConnection,
    qualified: &str,
    column: &str,
) -> Result<Option<String>, StoreError> {
    crate::store::query_scalar(
        "SELECT x.relname::text FROM pg_index i
           JOIN pg_class x ON x.oid = i.indexrelid
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
          WHERE i.indrelid = to_regclass($1) AND i.indisvalid AND i.indpred IS NULL
            AND a.attname = $2
          ORDER BY x.relname LIMIT 1",
    )
    .bind(qualified)
    .bind(column)
    .fetch_optional(conn)
    .await
    .context("looking for the subscription id index")
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Builds the plain index `name` on `qualified (column)`; `partitioned`:
/// per partition. `conn` must not be in a transaction.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn build(
    conn: &mut PgConnection,
    qualified: &str,
    (name, column): (&str, &str),
    partitioned: bool,
) -> Result<IndexBuild, StoreError> {
    let (quoted, col) = (quote(name), quote(column));
    if !partitioned {
        let sql =
            format!("CREATE INDEX CONCURRENTLY IF NOT EXISTS {quoted} ON {qualified} ({col})");
        let built = concurrently(&mut *conn, &sql).await;
        return finish(conn, name, built).await;
    }
    let parent = format!("CREATE INDEX IF NOT EXISTS {quoted} ON ONLY {qualified} ({col})");
    if let Err(e) = concurrently(&mut *conn, &parent).await {
        return finish(conn, name, Err(e)).await;
    }
    for (partition, index) in partitions(conn, qualified, name).await? {
        let child = quote(&index);
        let sql = format!("CREATE INDEX CONCURRENTLY IF NOT EXISTS {child} ON {partition} ({col})");
        let built = concurrently(&mut *conn, &sql).await;
        if finish(conn, &index, built).await? == IndexBuild::LockTimeout {
            return Ok(IndexBuild::LockTimeout);
        }
        let attached: bool = crate::store::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_inherits
                             WHERE inhrelid = to_regclass($1) AND inhparent = to_regclass($2))",
        )
        .bind(&child)
        .bind(&quoted)
        .fetch_one(&mut *conn)
        .await
        .context("reading the partitioned index")?;
        if !attached {
            let sql = format!("ALTER INDEX {quoted} ATTACH PARTITION {child}");
            if let Err(e) = concurrently(&mut *conn, &sql).await {
                return finish(conn, &index, Err(e)).await;
            }
        }
    }
    Ok(IndexBuild::Built)
}

/// A build's end: a lock not granted in time is [`IndexBuild::LockTimeout`]
/// (the invalid index it left dropped again).
async fn finish(
    conn: &mut PgConnection,
    name: &str,
    built: Result<(), StoreError>,
) -> Result<IndexBuild, StoreError> {
    if built.is_err() {
        drop_invalid(conn, name).await?;
    }
    match built {
        Ok(()) => Ok(IndexBuild::Built),
        Err(e) if is_lock_unavailable(&e) => Ok(IndexBuild::LockTimeout),
        Err(e) => Err(e),
    }
}

/// The partitions of `qualified` (quoted and qualified), each with the name
/// of its own index of `name`.
async fn partitions(
    conn: &mut PgConnection,
    qualified: &str,
    name: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    crate::store::query_as(
        "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname),
                left(c.relname || '_' || $2, 63)
           FROM pg_inherits h
           JOIN pg_class c ON c.oid = h.inhrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE h.inhparent = to_regclass($1)
          ORDER BY c.relname",
    )
    .bind(qualified)
    .bind(name)
    .fetch_all(conn)
    .await
    .context("reading the partitions of the subscriptions table")
}
