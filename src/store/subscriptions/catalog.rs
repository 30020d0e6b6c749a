//! The subscriptions table as the catalogue has it, for the start-up checks
//! and `migrate` (docs/subscriptions.md, "What migrate checks"): whether the
//! relation exists and is a table, its key column, and each named column's
//! type.

use sqlx::PgConnection;

use crate::store::{Context, StoreError};

/// The relation `RECONCILER_SUBSCRIPTIONS_TABLE` names.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Relation {
    /// `"schema"."table"` as the catalogue resolves it.
    pub qualified: String,
    /// `r` a table, `p` a partitioned table, anything else refused.
    pub kind: String,
}

/// One column of the table.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CatalogColumn {
    /// Its name.
    pub name: String,
    /// Its type as `format_type` spells it (a domain's own name).
    pub sql_type: String,
    /// The base type's `typcategory`: `S` string, `N` numeric, `D`
    /// date/time, `E` enum, `B` boolean, `U` user-defined (citext)…
    pub category: String,
    /// The base type's name (`timestamptz`, `timestamp`, `int8`, `text`…).
    pub base: String,
}

/// The relation `quoted` names (`"schema"."table"` or `"table"`, resolved on
/// the `search_path`); `None` when there is none.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn relation(
    conn: &mut PgConnection,
    quoted: &str,
) -> Result<Option<Relation>, StoreError> {
    crate::store::query_as(
        "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) AS qualified,
                c.relkind::text AS kind
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.oid = to_regclass($1)",
    )
    .bind(quoted)
    .fetch_optional(conn)
    .await
    .context("looking up the subscriptions table")
}

/// Every column of the relation `qualified`.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn columns(
    conn: &mut PgConnection,
    qualified: &str,
) -> Result<Vec<CatalogColumn>, StoreError> {
    crate::store::query_as(
        "SELECT a.attname::text AS name,
                format_type(a.atttypid, a.atttypmod) AS sql_type,
                b.typcategory::text AS category,
                b.typname::text AS base
           FROM pg_attribute a
           JOIN pg_type t ON t.oid = a.atttypid
           JOIN pg_type b ON b.oid = coalesce(nullif(t.typbasetype, 0), t.oid)
          WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
          ORDER BY a.attnum",
    )
    .bind(qualified)
    .fetch_all(conn)
    .await
    .context("reading the subscriptions table's columns")
}

/// The values of the enum type `sql_type` (a status column of Stripe's
/// words, e.g. Vercel's template); empty for a type that is not an enum.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn enum_labels(
    conn: &mut PgConnection,
    sql_type: &str,
) -> Result<Vec<String>, StoreError> {
    crate::store::query_scalar(
        "SELECT e.enumlabel::text FROM pg_enum e
          WHERE e.enumtypid = to_regtype($1) ORDER BY e.enumsortorder",
    )
    .bind(sql_type)
    .fetch_all(conn)
    .await
    .context("reading the status column's enum")
}
