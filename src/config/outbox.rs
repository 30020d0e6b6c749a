//! Where repair commands go (docs/schema.md, "Outbox"):
//! `RECONCILER_OUTBOX_TABLE` and `RECONCILER_OUTBOX_SHAPE`.

use serde::Deserialize;

use super::error::{invalid, ConfigError};
use super::value;
use super::ColumnName;

/// `RECONCILER_OUTBOX_TABLE`: a table name, optionally schema-qualified
/// (`schema.table`), each part a validated identifier ([`ColumnName`]'s
/// rule). Only such a name reaches SQL, always double-quoted, so it is
/// matched exactly (case included) and cannot inject anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxTable {
    schema: Option<String>,
    name: String,
}

impl OutboxTable {
    /// Validates `raw` (`table` or `schema.table`).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for `RECONCILER_OUTBOX_TABLE`.
    pub fn parse(raw: &str) -> Result<Self, ConfigError> {
        Self::parse_as("RECONCILER_OUTBOX_TABLE", raw)
    }

    /// Validates `raw` (`table` or `schema.table`) for the variable `var`
    /// (`RECONCILER_SUBSCRIPTIONS_TABLE` follows the same rule).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `var`.
    pub fn parse_as(var: &'static str, raw: &str) -> Result<Self, ConfigError> {
        let part = |p: &str| {
            ColumnName::parse(var, p).map(|c| c.as_str().to_owned()).map_err(|_| {
                invalid(
                    var,
                    format!("{raw:?} is not a table name (table or schema.table, each 1-63 letters, digits or _, not starting with a digit)"),
                )
            })
        };
        match raw.trim().split_once('.') {
            Some((schema, name)) => Ok(OutboxTable {
                schema: Some(part(schema)?),
                name: part(name)?,
            }),
            None => Ok(OutboxTable {
                schema: None,
                name: part(raw)?,
            }),
        }
    }

    /// The table name without its schema, as the catalogs spell it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The schema when one was given; `None` means the first schema of the
    /// `search_path` that has the table (PostgreSQL's own resolution).
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The name quoted for SQL: `"schema"."table"` or `"table"`.
    pub fn quoted(&self) -> String {
        // Validated names hold no `"`, so quoting cannot be escaped.
        match &self.schema {
            Some(schema) => format!("\"{schema}\".\"{}\"", self.name),
            None => format!("\"{}\"", self.name),
        }
    }

    /// The name as the user wrote it (for messages).
    pub fn display(&self) -> String {
        match &self.schema {
            Some(schema) => format!("{schema}.{}", self.name),
            None => self.name.clone(),
        }
    }
}

impl Default for OutboxTable {
    fn default() -> Self {
        OutboxTable {
            schema: None,
            name: "outbox".to_owned(),
        }
    }
}

/// `RECONCILER_OUTBOX_SHAPE`: whose columns the outbox has, and so who
/// delivers its commands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OutboxShape {
    /// `reconciler`: `aggregate_type`, `aggregate_id`, `event_type`,
    /// `payload`, `created_at`, `processed_at`, `attempts`, `last_error`
    /// (docs/schema.md, "Outbox"); our `repair` worker drains it.
    #[default]
    Reconciler,
    /// `debezium`: `id` (uuid), `aggregatetype`, `aggregateid`, `type`,
    /// `payload` (jsonb) and an optional `timestamp` (Debezium's outbox event
    /// router); the application's relay delivers each command to its own
    /// canonical writer, and the finding resolves when a later read sees the
    /// payment in sync (`cleared`).
    Debezium,
    /// `plain`: the design note's own outbox, `aggregate_type`,
    /// `aggregate_id`, `event_type`, `payload` (other columns filled by their
    /// defaults), without our bookkeeping columns (`processed_at`,
    /// `attempts`, `last_error`): the application's relay delivers it, as for
    /// `debezium`.
    Plain,
}

impl OutboxShape {
    /// The value of `RECONCILER_OUTBOX_SHAPE`.
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxShape::Reconciler => "reconciler",
            OutboxShape::Debezium => "debezium",
            OutboxShape::Plain => "plain",
        }
    }

    /// Whether our `repair` worker drains this outbox (and so whether its
    /// backlog is ours to count); `debezium` and `plain` are the
    /// application's relay's.
    pub fn drained_by_reconciler(self) -> bool {
        self == OutboxShape::Reconciler
    }

    /// Every shape, in the order a mismatch suggests another.
    pub const ALL: [OutboxShape; 3] = [
        OutboxShape::Reconciler,
        OutboxShape::Plain,
        OutboxShape::Debezium,
    ];
}

/// The outbox group: table and shape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboxSettings {
    /// `RECONCILER_OUTBOX_TABLE` (default `outbox`).
    pub table: OutboxTable,
    /// `RECONCILER_OUTBOX_SHAPE` (default `reconciler`).
    pub shape: OutboxShape,
}

#[derive(Deserialize)]
struct OutboxVars {
    outbox_table: Option<String>,
    outbox_shape: Option<String>,
}

/// Parses the outbox group.
///
/// # Errors
/// [`ConfigError::Invalid`] naming the malformed variable.
pub(super) fn parse<I>(vars: I) -> Result<OutboxSettings, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: OutboxVars = value::read(Some("RECONCILER_"), vars)?;
    let table = match raw.outbox_table.filter(|s| !s.trim().is_empty()) {
        Some(t) => OutboxTable::parse(&t)?,
        None => OutboxTable::default(),
    };
    let shape = match raw.outbox_shape.as_deref().map(str::trim) {
        None | Some("") | Some("reconciler") => OutboxShape::Reconciler,
        Some("debezium") => OutboxShape::Debezium,
        Some("plain") => OutboxShape::Plain,
        Some(other) => {
            return Err(invalid(
                "RECONCILER_OUTBOX_SHAPE",
                format!("{other:?} is not `reconciler`, `plain` or `debezium`"),
            ))
        }
    };
    Ok(OutboxSettings { table, shape })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn defaults_to_our_outbox() {
        let s = parse(vars(&[])).unwrap();
        assert_eq!(s.table.quoted(), "\"outbox\"");
        assert_eq!(s.shape, OutboxShape::Reconciler);
    }

    #[test]
    fn schema_qualified_table_is_quoted_per_part() {
        let s = parse(vars(&[
            ("RECONCILER_OUTBOX_TABLE", "app.Outbox_Events"),
            ("RECONCILER_OUTBOX_SHAPE", "debezium"),
        ]))
        .unwrap();
        assert_eq!(s.table.quoted(), "\"app\".\"Outbox_Events\"");
        assert_eq!(s.table.schema(), Some("app"));
        assert_eq!(s.table.name(), "Outbox_Events");
        assert_eq!(s.shape, OutboxShape::Debezium);
    }

    #[test]
    fn hostile_names_and_unknown_shapes_are_refused() {
        for bad in [
            "out\"box",
            "a.b.c",
            "outbox; DROP TABLE payments",
            ".outbox",
            "1box",
        ] {
            let e = parse(vars(&[("RECONCILER_OUTBOX_TABLE", bad)])).unwrap_err();
            assert_eq!(e.var(), Some("RECONCILER_OUTBOX_TABLE"), "{bad}");
        }
        assert_eq!(
            parse(vars(&[("RECONCILER_OUTBOX_SHAPE", "plain")]))
                .unwrap()
                .shape,
            OutboxShape::Plain
        );
        let e = parse(vars(&[("RECONCILER_OUTBOX_SHAPE", "kafka")])).unwrap_err();
        assert_eq!(e.var(), Some("RECONCILER_OUTBOX_SHAPE"));
    }
}
