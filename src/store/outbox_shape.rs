//! Which outbox `RECONCILER_OUTBOX_TABLE` names: whether it exists, whether
//! its columns fit `RECONCILER_OUTBOX_SHAPE`, whether the reconciler created
//! it, and creating it when it is absent. `migrate`, `run` and `repair` all
//! check with [`check`] before they write anything, and stop with the same
//! sentence ([`OutboxMismatch`]).

use std::fmt;

use sqlx::PgConnection;

use super::{Context, StoreError};
use crate::config::{OutboxSettings, OutboxShape};

/// Columns an outbox of each shape must have (docs/schema.md, "Outbox";
/// Debezium's outbox event router for `debezium`).
fn required(shape: OutboxShape) -> &'static [&'static str] {
    match shape {
        OutboxShape::Reconciler => &[
            "id",
            "aggregate_type",
            "aggregate_id",
            "event_type",
            "payload",
            "created_at",
            "processed_at",
            "attempts",
            "last_error",
        ],
        OutboxShape::Debezium => &["id", "aggregatetype", "aggregateid", "type", "payload"],
    }
}

/// Debezium's optional event timestamp column, filled with `now()` when present.
pub const DEBEZIUM_TIMESTAMP: &str = "timestamp";

/// One column of an existing table.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TableColumn {
    /// `pg_attribute.attname`.
    pub name: String,
    /// NOT NULL with no default, identity or generation: an insert must name it.
    pub required: bool,
}

/// An existing outbox: its resolved `schema.table` and its columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExistingTable {
    /// `schema.table` as the catalogs spell it (the key of
    /// `reconciliation_owned_tables`).
    pub qualified: String,
    /// Its columns.
    pub columns: Vec<TableColumn>,
}

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutboxState {
    /// The table exists with the configured shape; `owned` when the
    /// reconciler created it (only then may `migrate` change it).
    Ready {
        /// Created by the reconciler.
        owned: bool,
    },
    /// No such table: `migrate` creates it (reconciler shape only).
    Absent,
}

/// The outbox cannot be used as configured (exit 78 through
/// `ConfigError::Unusable` for `RECONCILER_OUTBOX_TABLE`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboxMismatch {
    /// The table exists but lacks columns of the configured shape.
    #[error("{}", shape_sentence(.table, *.shape, .missing, .other_missing, .unfillable))]
    Shape {
        /// The table as configured.
        table: String,
        /// `RECONCILER_OUTBOX_SHAPE`.
        shape: OutboxShape,
        /// Columns of `shape` the table lacks.
        missing: Vec<String>,
        /// Columns of the other shape it lacks (empty: it has the other shape).
        other_missing: Vec<String>,
        /// NOT NULL columns without a default that no command fills.
        unfillable: Vec<String>,
    },
    /// `debezium` names a table that does not exist: it is the application's
    /// own outbox, read by its relay, so the reconciler does not create it.
    #[error("RECONCILER_OUTBOX_TABLE: the table {table} does not exist; RECONCILER_OUTBOX_SHAPE=debezium is for the application's own outbox, which its relay reads: create it, or use RECONCILER_OUTBOX_SHAPE=reconciler and run migrate")]
    RelayTableAbsent {
        /// The table as configured.
        table: String,
    },
    /// `run` or `repair` before `migrate` created the reconciler's outbox.
    #[error("RECONCILER_OUTBOX_TABLE: the table {table} does not exist; run migrate")]
    NotMigrated {
        /// The table as configured.
        table: String,
    },
}

fn shape_sentence(
    table: &str,
    shape: OutboxShape,
    missing: &[String],
    other_missing: &[String],
    unfillable: &[String],
) -> String {
    let other = match shape {
        OutboxShape::Reconciler => OutboxShape::Debezium,
        OutboxShape::Debezium => OutboxShape::Reconciler,
    };
    let what = if missing.is_empty() {
        format!(
            "has NOT NULL columns without a default that a command cannot fill ({})",
            unfillable.join(", ")
        )
    } else {
        format!("lacks the columns {}", missing.join(", "))
    };
    let other_fit = if other_missing.is_empty() {
        format!(" (it has the {} shape)", other.as_str())
    } else {
        String::new()
    };
    format!(
        "RECONCILER_OUTBOX_TABLE: the table {table} does not have the {} outbox shape: it {what}; \
         set RECONCILER_OUTBOX_TABLE to another table (the reconciler creates it), \
         or RECONCILER_OUTBOX_SHAPE={}{other_fit}",
        shape.as_str(),
        other.as_str(),
    )
}

/// The pure part of [`check`]: whether `columns` fit `shape`.
///
/// # Errors
/// [`OutboxMismatch::Shape`].
pub fn fits(
    table: &str,
    shape: OutboxShape,
    columns: &[TableColumn],
) -> Result<(), OutboxMismatch> {
    let lacking = |s: OutboxShape| -> Vec<String> {
        required(s)
            .iter()
            .filter(|c| !columns.iter().any(|t| t.name == **c))
            .map(|c| (*c).to_owned())
            .collect()
    };
    let missing = lacking(shape);
    let filled = |name: &str| {
        required(shape).contains(&name)
            || (shape == OutboxShape::Debezium && name == DEBEZIUM_TIMESTAMP)
    };
    let unfillable: Vec<String> = columns
        .iter()
        .filter(|c| c.required && !filled(&c.name))
        .map(|c| c.name.clone())
        .collect();
    if missing.is_empty() && unfillable.is_empty() {
        return Ok(());
    }
    let other = match shape {
        OutboxShape::Reconciler => OutboxShape::Debezium,
        OutboxShape::Debezium => OutboxShape::Reconciler,
    };
    Err(OutboxMismatch::Shape {
        table: table.to_owned(),
        shape,
        missing,
        other_missing: lacking(other),
        unfillable,
    })
}

/// Reads the table `settings` names, if it exists (PostgreSQL's own name
/// resolution: the `search_path` for an unqualified name).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn existing(
    conn: &mut PgConnection,
    settings: &OutboxSettings,
) -> Result<Option<ExistingTable>, StoreError> {
    let quoted = settings.table.quoted();
    let qualified: Option<String> = super::query_scalar(
        "SELECT n.nspname || '.' || c.relname FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.oid = to_regclass($1)",
    )
    .bind(&quoted)
    .fetch_optional(&mut *conn)
    .await
    .context("looking up the outbox table")?;
    let Some(qualified) = qualified else {
        return Ok(None);
    };
    let columns: Vec<TableColumn> = super::query_as(
        "SELECT attname::text AS name,
                (attnotnull AND NOT atthasdef AND attidentity = '' AND attgenerated = '') AS required
           FROM pg_attribute
          WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped
          ORDER BY attnum",
    )
    .bind(&quoted)
    .fetch_all(&mut *conn)
    .await
    .context("reading the outbox's columns")?;
    Ok(Some(ExistingTable { qualified, columns }))
}

/// Whether the reconciler created the table `qualified` (`schema.table`).
/// `false` before migration 0009 made the record table.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn owned(conn: &mut PgConnection, qualified: &str) -> Result<bool, StoreError> {
    // Two statements: a statement naming an absent table fails to parse.
    let recorded: bool =
        super::query_scalar("SELECT to_regclass('reconciliation_owned_tables') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await
            .context("reading which tables the reconciler created")?;
    if !recorded {
        return Ok(false);
    }
    super::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM reconciliation_owned_tables WHERE table_name = $1)",
    )
    .bind(qualified)
    .fetch_one(conn)
    .await
    .context("reading which tables the reconciler created")
}

/// Checks the configured outbox without changing anything.
///
/// # Errors
/// `Ok(Err(OutboxMismatch))` when the table does not fit; [`StoreError`]
/// from the database.
pub async fn check(
    conn: &mut PgConnection,
    settings: &OutboxSettings,
) -> Result<Result<OutboxState, OutboxMismatch>, StoreError> {
    let table = settings.table.display();
    let Some(found) = existing(&mut *conn, settings).await? else {
        return Ok(match settings.shape {
            OutboxShape::Reconciler => Ok(OutboxState::Absent),
            OutboxShape::Debezium => Err(OutboxMismatch::RelayTableAbsent { table }),
        });
    };
    if let Err(mismatch) = fits(&table, settings.shape, &found.columns) {
        return Ok(Err(mismatch));
    }
    let owned = owned(conn, &found.qualified).await?;
    Ok(Ok(OutboxState::Ready { owned }))
}

/// Creates the reconciler-shaped outbox (docs/schema.md, "Outbox") with its index on
/// unprocessed commands, and records it in `reconciliation_owned_tables`, in
/// the caller's transaction (which holds the migration lock). A no-op when
/// the table appeared meanwhile.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn create(conn: &mut PgConnection, settings: &OutboxSettings) -> Result<(), StoreError> {
    let table = settings.table.quoted();
    // The same index name an older 0001 gave `outbox`.
    let index = format!("\"{}_unprocessed\"", settings.table.name());
    let sql = format!(
        "CREATE TABLE IF NOT EXISTS {table} (
             id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             aggregate_type text        NOT NULL,
             aggregate_id   text        NOT NULL,
             event_type     text        NOT NULL,
             payload        jsonb       NOT NULL,
             created_at     timestamptz NOT NULL DEFAULT now(),
             processed_at   timestamptz,
             attempts       int         NOT NULL DEFAULT 0,
             last_error     text
         );
         CREATE INDEX IF NOT EXISTS {index} ON {table} (event_type, id) WHERE processed_at IS NULL;"
    );
    sqlx::raw_sql(&sql)
        .execute(&mut *conn)
        .await
        .context("creating the outbox")?;
    super::query(
        "INSERT INTO reconciliation_owned_tables (table_name)
         SELECT n.nspname || '.' || c.relname FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.oid = to_regclass($1)
         ON CONFLICT (table_name) DO NOTHING",
    )
    .bind(&table)
    .execute(conn)
    .await
    .context("recording the outbox as the reconciler's")?;
    Ok(())
}

impl fmt::Display for OutboxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutboxState::Ready { owned: true } => f.write_str("created by the reconciler"),
            OutboxState::Ready { owned: false } => f.write_str("the application's, left as it is"),
            OutboxState::Absent => f.write_str("absent"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(names: &[&str]) -> Vec<TableColumn> {
        names
            .iter()
            .map(|n| TableColumn {
                name: (*n).to_owned(),
                required: false,
            })
            .collect()
    }

    #[test]
    fn a_debezium_table_fits_debezium_and_says_so_under_reconciler() {
        let debezium = cols(&[
            "id",
            "aggregatetype",
            "aggregateid",
            "type",
            "payload",
            "timestamp",
        ]);
        assert_eq!(fits("outbox", OutboxShape::Debezium, &debezium), Ok(()));
        let e = fits("outbox", OutboxShape::Reconciler, &debezium).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("lacks the columns aggregate_type, aggregate_id, event_type, created_at, processed_at, attempts, last_error"), "{text}");
        assert!(
            text.contains("RECONCILER_OUTBOX_SHAPE=debezium (it has the debezium shape)"),
            "{text}"
        );
        assert!(
            text.contains("set RECONCILER_OUTBOX_TABLE to another table"),
            "{text}"
        );
    }

    #[test]
    fn a_required_column_no_command_fills_does_not_fit() {
        let mut c = cols(&["id", "aggregatetype", "aggregateid", "type", "payload"]);
        c.push(TableColumn {
            name: "tenant".into(),
            required: true,
        });
        let text = fits("outbox", OutboxShape::Debezium, &c)
            .unwrap_err()
            .to_string();
        assert!(text.contains("cannot fill (tenant)"), "{text}");
    }
}
