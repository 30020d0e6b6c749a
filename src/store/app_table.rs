//! What the application's `payments` is, read from the catalog before
//! anything is created or read (docs/schema.md, "The columns `payments`
//! must and may have"): the relation the name resolves to on the
//! `search_path` (a table, partitioned or not; never a view), the columns
//! every command reads or the canonical writer writes, with their types, and
//! whether row-level security may hide rows from the role that runs.
//! [`check`] says in one sentence what does not fit and how to fix it.

use sqlx::PgConnection;

use super::{Context, StoreError};

/// Why `payments` cannot be reconciled as it is (exit 78: the sentence
/// names what to fix).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableMismatch {
    /// No relation named `payments` on the `search_path`.
    #[error(
        "no table named payments on the search_path ({search_path}){}: the reconciler reads the application's table payments and never creates it; give the reconciler's role a search_path that reaches it (ALTER ROLE <role> SET search_path = <schema>, public) or name the table payments, with the columns docs/schema.md lists",
        found_note(.elsewhere)
    )]
    Absent {
        /// The session's `search_path`.
        search_path: String,
        /// Relations whose name is `payments` in another case or schema
        /// (`public."Payments"`, `billing.payments`).
        elsewhere: Vec<String>,
    },
    /// `payments` is a view, a materialized view or a foreign table.
    #[error("payments is a {kind}, not a table: the reconciler builds its lookup index on payments and the canonical writer updates its rows; point the reconciler at the table itself (its search_path), docs/schema.md")]
    NotATable {
        /// What it is (`view`, `materialized view`, `foreign table`).
        kind: &'static str,
    },
    /// Row-level security on `payments` may hide rows from the role that
    /// runs: no `BYPASSRLS`, not the owner (or `FORCE ROW LEVEL SECURITY`),
    /// and no permissive policy `USING (true)` for it without a restrictive
    /// one.
    #[error("row-level security on payments may hide rows from the role {role}: a cycle would report complete over part of the table; give the role BYPASSRLS (ALTER ROLE {role} BYPASSRLS) or a policy that lets it read and update every row (CREATE POLICY reconciler_all ON payments TO {role} USING (true)), docs/schema.md")]
    RowSecurity {
        /// The role (`current_user`, quoted as an identifier).
        role: String,
    },
    /// A required column is absent.
    #[error("payments has no column {column} ({needed}): docs/schema.md lists the columns payments must have; add it or point the reconciler at the table that has it")]
    MissingColumn {
        /// The column's name.
        column: &'static str,
        /// What it is used for.
        needed: &'static str,
    },
    /// A required column has a type the reconciler cannot read or write.
    #[error("payments.{column} is {found}, expected {expected} (docs/schema.md lists the supported types)")]
    ColumnType {
        /// The column's name.
        column: &'static str,
        /// Its type (`format_type`).
        found: String,
        /// What is accepted.
        expected: &'static str,
    },
}

fn found_note(elsewhere: &[String]) -> String {
    if elsewhere.is_empty() {
        String::new()
    } else {
        format!(", but found {}", elsewhere.join(", "))
    }
}

/// A column every command needs, what it is for and which types it may
/// have (compared with the column's type, or a domain's base type).
struct Required {
    name: &'static str,
    needed: &'static str,
    types: &'static [&'static str],
    expected: &'static str,
    /// An ENUM is accepted (the status words).
    enum_ok: bool,
}

const TEXT: &[&str] = &["text", "character varying"];

/// The columns `payments` must have beside `id` (whose type
/// `store::keys::detect` checks).
const REQUIRED: [Required; 5] = [
    Required {
        name: "stripe_payment_intent_id",
        needed: "the PaymentIntent each row is verified against",
        types: TEXT,
        expected: "text or character varying (or a domain over one)",
        enum_ok: false,
    },
    Required {
        name: "status",
        needed: "the status words RECONCILER_LOCAL_STATUSES maps",
        types: TEXT,
        expected: "text, character varying, an ENUM or a domain over text",
        enum_ok: true,
    },
    Required {
        name: "version",
        needed: "an integer the canonical writer increments on every change; Rails' lock_version is not read",
        types: &["smallint", "integer", "bigint"],
        expected: "smallint, integer or bigint",
        enum_ok: false,
    },
    Required {
        name: "created_at",
        needed: "when the payment was created",
        types: &["timestamp with time zone", "timestamp without time zone"],
        expected: "timestamptz or timestamp",
        enum_ok: false,
    },
    Required {
        name: "updated_at",
        needed: "when the payment last changed",
        types: &["timestamp with time zone", "timestamp without time zone"],
        expected: "timestamptz or timestamp",
        enum_ok: false,
    },
];

/// One column of `payments` as the catalog has it.
#[derive(Debug, sqlx::FromRow)]
struct Column {
    name: String,
    /// `format_type(atttypid, NULL)`.
    sql: String,
    /// For a domain, its base type's `format_type` (else the same).
    base: String,
    /// `pg_type.typtype` of the base type (`e`: an ENUM).
    base_kind: String,
}

/// Checks what `payments` resolves to and its required columns. `Ok(Ok(()))`
/// when every command can work with it.
///
/// # Errors
/// `Ok(Err(TableMismatch))` naming what does not fit; [`StoreError`] from
/// the database.
pub async fn check(conn: &mut PgConnection) -> Result<Result<(), TableMismatch>, StoreError> {
    let kind: Option<String> = super::query_scalar(
        "SELECT c.relkind::text FROM pg_class c WHERE c.oid = to_regclass('payments')",
    )
    .fetch_optional(&mut *conn)
    .await
    .context("looking for payments")?;
    let Some(kind) = kind else {
        return absent(conn).await.map(Err);
    };
    let not_a_table = match kind.as_str() {
        "v" => Some("view"),
        "m" => Some("materialized view"),
        "f" => Some("foreign table"),
        _ => None,
    };
    if let Some(kind) = not_a_table {
        return Ok(Err(TableMismatch::NotATable { kind }));
    }
    let columns: Vec<Column> = super::query_as(
        "SELECT a.attname::text AS name, format_type(a.atttypid, NULL) AS sql,
                format_type(coalesce(nullif(t.typbasetype, 0), t.oid), NULL) AS base,
                b.typtype::text AS base_kind
           FROM pg_attribute a
           JOIN pg_type t ON t.oid = a.atttypid
           JOIN pg_type b ON b.oid = coalesce(nullif(t.typbasetype, 0), t.oid)
          WHERE a.attrelid = to_regclass('payments') AND a.attnum > 0 AND NOT a.attisdropped",
    )
    .fetch_all(&mut *conn)
    .await
    .context("reading the columns of payments")?;
    for r in &REQUIRED {
        let Some(c) = columns.iter().find(|c| c.name == r.name) else {
            return Ok(Err(TableMismatch::MissingColumn {
                column: r.name,
                needed: r.needed,
            }));
        };
        let fits = r.types.contains(&c.base.as_str()) || (r.enum_ok && c.base_kind == "e");
        if !fits {
            return Ok(Err(TableMismatch::ColumnType {
                column: r.name,
                found: c.sql.clone(),
                expected: r.expected,
            }));
        }
    }
    Ok(row_security(conn)
        .await?
        .map_or(Ok(()), |role| Err(TableMismatch::RowSecurity { role })))
}

/// [`TableMismatch::Absent`]: the `search_path` and the tables named like
/// `payments` in other schemas (a quoted `"Payments"`, another schema).
///
/// # Errors
/// [`StoreError`] from the database.
async fn absent(conn: &mut PgConnection) -> Result<TableMismatch, StoreError> {
    let (search_path, elsewhere): (String, Vec<String>) = super::query_as(
        "SELECT current_setting('search_path'),
                coalesce(array_agg(quote_ident(n.nspname) || '.' || quote_ident(c.relname)
                                   ORDER BY n.nspname, c.relname), '{}')
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE lower(c.relname) = 'payments' AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
            AND n.nspname NOT IN ('pg_catalog', 'information_schema')",
    )
    .fetch_one(&mut *conn)
    .await
    .context("looking for payments in other schemas")?;
    Ok(TableMismatch::Absent {
        search_path,
        elsewhere,
    })
}

/// The role that runs (quoted), when row-level security on `payments` may
/// hide rows from it ([`TableMismatch::RowSecurity`]); `None` when it sees
/// every row.
async fn row_security(conn: &mut PgConnection) -> Result<Option<String>, StoreError> {
    super::query_scalar(
        "SELECT quote_ident(current_user) FROM pg_class c, pg_roles r
          WHERE c.oid = to_regclass('payments') AND r.rolname = current_user
            AND c.relrowsecurity AND NOT r.rolsuper AND NOT r.rolbypassrls
            AND (c.relforcerowsecurity OR NOT pg_has_role(current_user, c.relowner, 'USAGE'))
            AND NOT (EXISTS (SELECT 1 FROM pg_policy p
                              WHERE p.polrelid = c.oid AND p.polpermissive
                                AND p.polcmd IN ('*', 'r')
                                AND pg_get_expr(p.polqual, c.oid) = 'true'
                                AND (0 = ANY (p.polroles)
                                     OR EXISTS (SELECT 1 FROM unnest(p.polroles) x
                                                 WHERE pg_has_role(current_user, x, 'MEMBER'))))
                     AND NOT EXISTS (SELECT 1 FROM pg_policy p
                                      WHERE p.polrelid = c.oid AND NOT p.polpermissive))",
    )
    .fetch_optional(conn)
    .await
    .context("reading the row-level security of payments")
}
