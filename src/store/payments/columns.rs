//! The start-up check of the configured `payments` columns: integer ids, and
//! the amount, currency, account and other named columns exist with a usable type
//! (exit 78 naming the variable otherwise).

use super::*;

/// Why a configured column cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ColumnError {
    /// No such column in `payments`.
    #[error("{var}: payments has no column {column:?} (names are matched exactly, case included)")]
    Missing {
        /// The variable naming the column.
        var: &'static str,
        /// The name.
        column: String,
    },
    /// The column's type cannot hold what is compared.
    #[error("{var}: column {column:?} is {found}, expected {expected}")]
    WrongType {
        /// The variable naming the column.
        var: &'static str,
        /// The name.
        column: String,
        /// The column's type.
        found: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// The value cannot be compared with the column (an integer column and a
    /// value that is not a whole number).
    #[error("{var}: {reason}")]
    BadValue {
        /// The variable holding the value.
        var: &'static str,
        /// Why, without the value (the user has it).
        reason: String,
    },
    /// The catalog could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

const INTEGER_TYPES: [&str; 3] = ["smallint", "integer", "bigint"];
const TEXT_TYPES: [&str; 2] = ["text", "character varying"];

/// The type of `payments.<column>` (`format_type` without modifiers); `None`
/// when there is no such column.
async fn column_type(conn: &mut PgConnection, column: &str) -> Result<Option<String>, StoreError> {
    crate::store::query_scalar(
        "SELECT format_type(a.atttypid, NULL) FROM pg_attribute a
          WHERE a.attrelid = 'payments'::regclass AND a.attname = $1
            AND a.attnum > 0 AND NOT a.attisdropped",
    )
    .bind(column)
    .fetch_optional(&mut *conn)
    .await
    .context("reading the columns of payments")
}

/// Checks `RECONCILER_PARTITION_COLUMN` against the catalogue and returns how
/// the value compares with it: a text type (`text`, `character varying`) or
/// an integer type (`smallint`, `integer`, `bigint`, and then
/// `RECONCILER_PARTITION_VALUE` must be a whole number). `character(n)` is
/// refused: its blank-padded comparison would not use the index.
///
/// # Errors
/// [`ColumnError`]: `Missing`/`WrongType` name `RECONCILER_PARTITION_COLUMN`,
/// `BadValue` names `RECONCILER_PARTITION_VALUE` (exit 78).
pub async fn check_partition(
    conn: &mut PgConnection,
    partition: &Partition,
) -> Result<PartitionKind, ColumnError> {
    const VAR: &str = "RECONCILER_PARTITION_COLUMN";
    let column = partition.column.as_str();
    match column_type(conn, column).await? {
        None => Err(ColumnError::Missing {
            var: VAR,
            column: column.to_owned(),
        }),
        Some(t) if TEXT_TYPES.contains(&t.as_str()) => Ok(PartitionKind::Text),
        Some(t) if INTEGER_TYPES.contains(&t.as_str()) => {
            match partition.value.trim().parse::<i64>() {
                Ok(_) => Ok(PartitionKind::Integer),
                Err(_) => Err(ColumnError::BadValue {
                    var: "RECONCILER_PARTITION_VALUE",
                    reason: format!("{column:?} is {t}: the value must be a whole number"),
                }),
            }
        }
        Some(t) => Err(ColumnError::WrongType {
            var: VAR,
            column: column.to_owned(),
            found: t,
            expected: "text, character varying, smallint, integer or bigint",
        }),
    }
}

/// Detects how `payments.created_at` and `updated_at` are read
/// (docs/operations.md, "Rails timestamps"):
/// `timestamp without time zone` is a wall-clock time in `times.zone`
/// (`RECONCILER_TIMESTAMP_ZONE`), any other type is read as it is. The zone
/// is checked by the database first (`pg_timezone_names` and POSIX offsets:
/// whatever `AT TIME ZONE` accepts). Returns `times` with the types set; an
/// absent table (before `migrate` creates the demo's) keeps the defaults.
///
/// # Errors
/// [`ColumnError::BadValue`] naming `RECONCILER_TIMESTAMP_ZONE` when the
/// database does not know the zone; [`ColumnError::Store`] otherwise.
pub async fn time_columns(
    conn: &mut PgConnection,
    times: &PaymentTimes,
) -> Result<PaymentTimes, ColumnError> {
    let mut tx = crate::store::begin(&mut *conn)
        .await
        .context("opening a transaction")?;
    let known = crate::store::query("SELECT now() AT TIME ZONE $1")
        .bind(times.zone.as_str())
        .execute(&mut *tx)
        .await;
    if let Err(e) = known {
        if e.as_database_error()
            .is_some_and(|d| d.code().as_deref() == Some("22023"))
        {
            return Err(ColumnError::BadValue {
                var: "RECONCILER_TIMESTAMP_ZONE",
                reason: format!(
                    "PostgreSQL does not know the time zone {:?} (see pg_timezone_names; e.g. UTC, Europe/Paris)",
                    times.zone.as_str()
                ),
            });
        }
        return Err(StoreError {
            action: "checking RECONCILER_TIMESTAMP_ZONE",
            source: e,
        }
        .into());
    }
    let wall_clock: Vec<String> = crate::store::query_scalar(
        "SELECT a.attname::text FROM pg_attribute a
          WHERE a.attrelid = to_regclass('payments')
            AND a.attname IN ('created_at', 'updated_at')
            AND a.atttypid = 'timestamp'::regtype
            AND a.attnum > 0 AND NOT a.attisdropped",
    )
    .fetch_all(&mut *tx)
    .await
    .context("reading the types of payments.created_at and updated_at")?;
    tx.commit().await.context("closing a transaction")?;
    let kind = |name: &str| {
        if wall_clock.iter().any(|c| c == name) {
            TimeColumn::WallClock
        } else {
            TimeColumn::Instant
        }
    };
    Ok(PaymentTimes {
        zone: times.zone.clone(),
        created_at: kind("created_at"),
        updated_at: kind("updated_at"),
    })
}

/// One column check: the variable that names the column, the column (if
/// set), the types accepted, and what is expected, in words.
type ColumnCheck<'a> = (
    &'static str,
    Option<&'a ColumnName>,
    &'static [&'static str],
    &'static str,
);

/// The checks of [`check_columns`]: the amount (by its unit), the currency,
/// the Connect account and the Checkout Session columns.
fn column_checks(columns: MoneyColumns<'_>) -> [ColumnCheck<'_>; 4] {
    let amount = match columns.unit {
        AmountUnit::Minor => (
            "RECONCILER_AMOUNT_COLUMN",
            &INTEGER_TYPES[..],
            "an integer type (minor units, 1200 for 12.00); for a numeric column of major units set RECONCILER_AMOUNT_UNIT=major",
        ),
        AmountUnit::Major => (
            "RECONCILER_AMOUNT_COLUMN",
            &["numeric"][..],
            "numeric (RECONCILER_AMOUNT_UNIT=major: major units, 12.00 for 1200 cents; floating point cannot hold money exactly)",
        ),
    };
    [
        (amount.0, columns.amount, amount.1, amount.2),
        (
            "RECONCILER_CURRENCY_COLUMN",
            columns.currency,
            &["text", "character varying", "character"][..],
            "a text type (ISO currency code)",
        ),
        (
            "RECONCILER_ACCOUNT_COLUMN",
            columns.account,
            &["text", "character varying", "character"][..],
            "a text type (the connected account id, acct_...; NULL or empty for the platform)",
        ),
        (
            "RECONCILER_CHECKOUT_SESSION_COLUMN",
            columns.checkout_session,
            &["text", "character varying", "character"][..],
            "a text type (the Checkout Session id, cs_...; NULL or empty when the row has none)",
        ),
    ]
}

/// Checks that the configured columns exist in `payments` with usable types:
/// the amount an integer type (`smallint`, `integer`, `bigint`) in `minor`
/// units, `numeric` in `major` units (`RECONCILER_AMOUNT_UNIT`), the
/// currency and the Connect account column a text type (`text`,
/// `character varying`, `character`). An
/// integer column with `major` is refused under `RECONCILER_AMOUNT_UNIT`: an
/// integer holds minor units, and reading it as major would multiply every
/// amount by 100.
///
/// # Errors
/// [`ColumnError`]: `Missing` and `WrongType` name the variable (exit 78).
pub async fn check_columns(
    conn: &mut PgConnection,
    columns: MoneyColumns<'_>,
) -> Result<(), ColumnError> {
    for (var, column, accepted, expected) in column_checks(columns) {
        let Some(column) = column else { continue };
        let found = column_type(conn, column.as_str()).await?;
        match found {
            None => {
                return Err(ColumnError::Missing {
                    var,
                    column: column.as_str().to_owned(),
                })
            }
            Some(t)
                if columns.unit == AmountUnit::Major
                    && var == "RECONCILER_AMOUNT_COLUMN"
                    && INTEGER_TYPES.contains(&t.as_str()) =>
            {
                return Err(ColumnError::WrongType {
                    var: "RECONCILER_AMOUNT_UNIT",
                    column: column.as_str().to_owned(),
                    found: t,
                    expected: "numeric for major: an integer column holds minor units (1200 for 12.00), so leave RECONCILER_AMOUNT_UNIT at minor",
                })
            }
            Some(t) if !accepted.contains(&t.as_str()) => {
                return Err(ColumnError::WrongType {
                    var,
                    column: column.as_str().to_owned(),
                    found: t,
                    expected,
                })
            }
            Some(_) => {}
        }
    }
    Ok(())
}
