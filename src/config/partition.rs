//! One job per partition of `payments` (docs/connect.md, "Several Stripe
//! accounts"): `RECONCILER_PARTITION_COLUMN` and `RECONCILER_PARTITION_VALUE`
//! restrict a job to the rows where the column equals the value, so one
//! release per Stripe account (own key, own `RECONCILER_JOB`, own cursor)
//! runs side by side on one table.

use serde::Deserialize;

use super::error::{invalid, ConfigError};
use super::{value, ColumnName};

const COLUMN_VAR: &str = "RECONCILER_PARTITION_COLUMN";
const VALUE_VAR: &str = "RECONCILER_PARTITION_VALUE";
/// The longest value accepted, in bytes (a key of a partition, not a text).
const MAX_VALUE_BYTES: usize = 1_000;

/// How the value is compared with the column, as the catalogue says at start
/// (`store::payments::check_partition`): the value is always a bound
/// parameter, cast in SQL to the column's kind so that the index on
/// `(column, id)` is usable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PartitionKind {
    /// Not checked against the catalogue yet: compared as text (every
    /// command that reads `payments` checks first, which fixes the kind).
    #[default]
    Unchecked,
    /// `text` or `character varying`: compared as text.
    Text,
    /// `smallint`, `integer` or `bigint`: the value is a whole number,
    /// compared as `bigint`.
    Integer,
}

/// `RECONCILER_PARTITION_COLUMN` = `RECONCILER_PARTITION_VALUE`: the rows of
/// `payments` this job owns. Rows whose column is NULL belong to no
/// partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// `RECONCILER_PARTITION_COLUMN`, a validated identifier (double-quoted
    /// in SQL like every configured column).
    pub column: ColumnName,
    /// `RECONCILER_PARTITION_VALUE`, exactly as given (never trimmed, never
    /// spliced into SQL: always bound).
    pub value: String,
    /// How the value compares with the column.
    pub kind: PartitionKind,
}

impl Partition {
    /// The SQL condition `<alias>."column" = $<param>` (with the cast of
    /// [`PartitionKind`]); the caller binds [`Partition::value`] as text at
    /// `param`.
    pub fn condition(&self, alias: &str, param: u8) -> String {
        let cast = match self.kind {
            PartitionKind::Integer => "::bigint",
            PartitionKind::Text | PartitionKind::Unchecked => "::text",
        };
        format!("{alias}.{} = ${param}{cast}", self.column.quoted())
    }
}

#[derive(Deserialize)]
struct PartitionVars {
    partition_column: Option<String>,
    partition_value: Option<String>,
}

/// Parses the pair: both or neither (an empty value counts as unset).
///
/// # Errors
/// [`ConfigError`] naming the variable that is missing or malformed.
pub(super) fn parse<I>(vars: I) -> Result<Option<Partition>, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: PartitionVars = value::read(Some("RECONCILER_"), vars)?;
    let column = raw.partition_column.filter(|c| !c.trim().is_empty());
    let value = raw.partition_value.filter(|v| !v.trim().is_empty());
    match (column, value) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(ConfigError::Invalid {
            var: VALUE_VAR,
            reason: format!("not set, but {COLUMN_VAR} is: set both (the column and the value this job owns) or neither"),
        }),
        (None, Some(_)) => Err(ConfigError::Invalid {
            var: COLUMN_VAR,
            reason: format!("not set, but {VALUE_VAR} is: set both (the column and the value this job owns) or neither"),
        }),
        (Some(column), Some(value)) => {
            if value.len() > MAX_VALUE_BYTES {
                return Err(invalid(
                    VALUE_VAR,
                    format!("longer than {MAX_VALUE_BYTES} bytes"),
                ));
            }
            Ok(Some(Partition {
                column: ColumnName::parse(COLUMN_VAR, &column)?,
                value,
                kind: PartitionKind::Unchecked,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Settings;

    fn settings(pairs: &[(&str, &str)]) -> Result<Settings, super::ConfigError> {
        let mut vars = vec![("DATABASE_URL".to_owned(), "postgres://db/p".to_owned())];
        vars.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Settings::from_vars(vars)
    }

    #[test]
    fn one_of_the_pair_alone_names_the_missing_one() {
        let job = ("RECONCILER_JOB", "eu");
        let e = settings(&[job, ("RECONCILER_PARTITION_COLUMN", "entity")]).unwrap_err();
        assert_eq!(e.var(), Some("RECONCILER_PARTITION_VALUE"), "{e}");
        let e = settings(&[job, ("RECONCILER_PARTITION_VALUE", "eu")]).unwrap_err();
        assert_eq!(e.var(), Some("RECONCILER_PARTITION_COLUMN"), "{e}");
        let e = settings(&[
            job,
            ("RECONCILER_PARTITION_COLUMN", "entity"),
            ("RECONCILER_PARTITION_VALUE", " "),
        ])
        .unwrap_err();
        assert_eq!(e.var(), Some("RECONCILER_PARTITION_VALUE"), "{e}");
        let none = settings(&[
            ("RECONCILER_PARTITION_COLUMN", ""),
            ("RECONCILER_PARTITION_VALUE", ""),
        ])
        .unwrap();
        assert_eq!(
            none.schema.partition, None,
            "empty values (a chart's unset) are unset"
        );
        let e = settings(&[
            job,
            ("RECONCILER_PARTITION_COLUMN", "entity; DROP TABLE payments"),
            ("RECONCILER_PARTITION_VALUE", "eu"),
        ])
        .unwrap_err();
        assert_eq!(e.var(), Some("RECONCILER_PARTITION_COLUMN"), "{e}");
    }

    #[test]
    fn a_partition_needs_a_job_name_of_its_own() {
        let pair = [
            ("RECONCILER_PARTITION_COLUMN", "entity"),
            ("RECONCILER_PARTITION_VALUE", "eu"),
        ];
        let e = settings(&pair).unwrap_err();
        assert_eq!(e.var(), Some("RECONCILER_JOB"), "{e}");
        let s = settings(&[pair[0], pair[1], ("RECONCILER_JOB", "payments-eu")]).unwrap();
        let p = s.schema.partition.unwrap();
        assert_eq!((p.column.as_str(), p.value.as_str()), ("entity", "eu"));
    }

    #[test]
    fn the_condition_binds_the_value_and_quotes_the_column() {
        let mut p = super::Partition {
            column: super::ColumnName::parse("RECONCILER_PARTITION_COLUMN", "Entity").unwrap(),
            value: "x' OR '1'='1".into(),
            kind: super::PartitionKind::Text,
        };
        assert_eq!(p.condition("p", 7), "p.\"Entity\" = $7::text");
        p.kind = super::PartitionKind::Integer;
        assert_eq!(p.condition("q", 2), "q.\"Entity\" = $2::bigint");
        assert!(!p.condition("p", 1).contains("OR"));
    }
}
