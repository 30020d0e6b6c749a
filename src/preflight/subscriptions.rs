//! The subscriptions table checked against its settings
//! (docs/subscriptions.md, "What migrate and run check"), before `migrate`
//! builds anything and before `run --object subscriptions` reads a row:
//! the table exists, has an `id` key and every configured column with a
//! type the reconciler can read; an enum status column holds every word of
//! the map. What does not fit is an exit 78 naming the variable and what
//! to fix. Returns the [`SubscriptionTable`] the job reads by.

use sqlx::PgConnection;

use super::PreflightError;
use crate::config::{ColumnName, ConfigError, Settings, SubscriptionSettings, TimestampZone};
use crate::facts::{Column, SubscriptionTable, TimeColumn, TimeStorage};
use crate::store::subscriptions::catalog::{self, CatalogColumn};

/// Why the table does not fit (the message starts with the variable).
#[derive(Debug, thiserror::Error)]
#[error("{var}: {problem}")]
pub struct TableUnfit {
    /// The variable to fix.
    pub var: &'static str,
    /// What does not fit.
    pub problem: String,
}

fn unfit(var: &'static str, problem: String) -> PreflightError {
    ConfigError::Unusable {
        var,
        problem: Box::new(TableUnfit { var, problem }),
    }
    .into()
}

/// The subscriptions table of `settings`, checked; `None` when
/// `RECONCILER_SUBSCRIPTIONS_TABLE` is not set.
///
/// # Errors
/// [`PreflightError::Config`] (exit 78) naming what does not fit;
/// [`PreflightError::Store`] from the database.
pub async fn check(
    conn: &mut PgConnection,
    settings: &Settings,
) -> Result<Option<SubscriptionTable>, PreflightError> {
    let Some(s) = settings.subscriptions.as_ref() else {
        return Ok(None);
    };
    let store = PreflightError::Store;
    let shown = s.table.display();
    let relation = relation(conn, s).await?;
    let columns = catalog::columns(&mut *conn, &relation.qualified)
        .await
        .map_err(store)?;
    let table = Checked {
        shown: &shown,
        columns: &columns,
        zone: &settings.schema.timestamp_zone,
    };
    let status = status_column(conn, &table, s).await?;
    let facts = SubscriptionTable {
        table: relation.qualified.clone(),
        display: shown.clone(),
        key: table.key()?,
        stripe_id: table.text("RECONCILER_SUBSCRIPTION_ID_COLUMN", &s.id_column)?,
        status,
        period_end: table.time_opt(
            "RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN",
            s.period_end_column.as_ref(),
        )?,
        ends_at: table.time_opt(
            "RECONCILER_SUBSCRIPTION_ENDS_AT_COLUMN",
            s.ends_at_column.as_ref(),
        )?,
        price: table.text_opt(
            "RECONCILER_SUBSCRIPTION_PRICE_COLUMN",
            s.price_column.as_ref(),
        )?,
        quantity: table.integer_opt(
            "RECONCILER_SUBSCRIPTION_QUANTITY_COLUMN",
            s.quantity_column.as_ref(),
        )?,
        created: table
            .time_if_present("RECONCILER_SUBSCRIPTION_CREATED_COLUMN", &s.created_column)?,
        updated: table
            .time_if_present("RECONCILER_SUBSCRIPTION_UPDATED_COLUMN", &s.updated_column)?,
        account: table.text_opt(
            "RECONCILER_SUBSCRIPTION_ACCOUNT_COLUMN",
            s.account_column.as_ref(),
        )?,
        partitioned: relation.kind == "p",
    };
    if facts.status.is_none() && facts.period_end.is_none() && facts.ends_at.is_none() {
        return Err(unfit(
            "RECONCILER_SUBSCRIPTION_STATUS_COLUMN",
            "is none and neither RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN nor RECONCILER_SUBSCRIPTION_ENDS_AT_COLUMN is set: nothing says whether a row grants access".to_owned(),
        ));
    }
    Ok(Some(facts))
}

/// The relation the settings name: a table or a partitioned table.
async fn relation(
    conn: &mut PgConnection,
    s: &SubscriptionSettings,
) -> Result<catalog::Relation, PreflightError> {
    const VAR: &str = "RECONCILER_SUBSCRIPTIONS_TABLE";
    let shown = s.table.display();
    let found = catalog::relation(&mut *conn, &s.table.quoted())
        .await
        .map_err(PreflightError::Store)?;
    match found {
        None => Err(unfit(
            VAR,
            format!("no table {shown:?} on the search_path (give schema.table, or check the role's search_path)"),
        )),
        Some(r) if r.kind != "r" && r.kind != "p" => Err(unfit(
            VAR,
            format!("{shown:?} is not a table (a view or another relation); name the table itself"),
        )),
        Some(r) => Ok(r),
    }
}

/// The status column (`None` for `none`): text or an enum holding every
/// word of the map.
async fn status_column(
    conn: &mut PgConnection,
    table: &Checked<'_>,
    s: &SubscriptionSettings,
) -> Result<Option<Column>, PreflightError> {
    const VAR: &str = "RECONCILER_SUBSCRIPTION_STATUS_COLUMN";
    let Some(name) = s.status_column.as_ref() else {
        return Ok(None);
    };
    let found = table.find(VAR, name)?;
    if found.category == "E" {
        let labels = catalog::enum_labels(conn, &found.sql_type)
            .await
            .map_err(PreflightError::Store)?;
        let missing: Vec<&str> = s
            .statuses
            .words()
            .filter(|w| !labels.iter().any(|l| l == w))
            .collect();
        if !missing.is_empty() {
            return Err(unfit(
                "RECONCILER_SUBSCRIPTION_STATUSES",
                format!(
                    "names {missing:?}, which the enum {} of {}.{} does not hold ({labels:?})",
                    found.sql_type,
                    table.shown,
                    name.as_str()
                ),
            ));
        }
        return Ok(Some(column(name, found)));
    }
    table.text(VAR, name).map(Some)
}

fn column(name: &ColumnName, found: &CatalogColumn) -> Column {
    Column {
        quoted: name.quoted(),
        name: name.as_str().to_owned(),
        sql_type: found.sql_type.clone(),
    }
}

/// The table's columns, for the checks.
struct Checked<'a> {
    shown: &'a str,
    columns: &'a [CatalogColumn],
    zone: &'a TimestampZone,
}

impl Checked<'_> {
    fn get(&self, name: &str) -> Option<&CatalogColumn> {
        self.columns.iter().find(|c| c.name == name)
    }

    fn find(&self, var: &'static str, name: &ColumnName) -> Result<&CatalogColumn, PreflightError> {
        self.get(name.as_str()).ok_or_else(|| {
            unfit(
                var,
                format!("{} has no column {:?}", self.shown, name.as_str()),
            )
        })
    }

    fn wrong(&self, var: &'static str, c: &CatalogColumn, wanted: &str) -> PreflightError {
        unfit(
            var,
            format!("{}.{} is {}, not {wanted}", self.shown, c.name, c.sql_type),
        )
    }

    fn key(&self) -> Result<Column, PreflightError> {
        let id = ColumnName::parse("RECONCILER_SUBSCRIPTIONS_TABLE", "id")
            .map_err(PreflightError::Config)?;
        let found = self.find("RECONCILER_SUBSCRIPTIONS_TABLE", &id)?;
        Ok(column(&id, found))
    }

    fn text(&self, var: &'static str, name: &ColumnName) -> Result<Column, PreflightError> {
        let found = self.find(var, name)?;
        if found.category != "S" && found.base != "citext" {
            return Err(self.wrong(var, found, "a text column"));
        }
        Ok(column(name, found))
    }

    fn text_opt(
        &self,
        var: &'static str,
        name: Option<&ColumnName>,
    ) -> Result<Option<Column>, PreflightError> {
        name.map(|n| self.text(var, n)).transpose()
    }

    fn integer_opt(
        &self,
        var: &'static str,
        name: Option<&ColumnName>,
    ) -> Result<Option<Column>, PreflightError> {
        name.map(|n| self.integer(var, n)).transpose()
    }

    fn integer(&self, var: &'static str, name: &ColumnName) -> Result<Column, PreflightError> {
        let found = self.find(var, name)?;
        if !matches!(found.base.as_str(), "int2" | "int4" | "int8" | "numeric") {
            return Err(self.wrong(var, found, "an integer column"));
        }
        Ok(column(name, found))
    }

    fn time(
        &self,
        var: &'static str,
        name: &ColumnName,
        found: &CatalogColumn,
    ) -> Result<TimeColumn, PreflightError> {
        let storage = match found.base.as_str() {
            "timestamptz" => TimeStorage::Instant,
            "timestamp" => TimeStorage::WallClock(self.zone.literal()),
            "int4" | "int8" | "numeric" => TimeStorage::Epoch,
            _ => {
                return Err(self.wrong(
                    var,
                    found,
                    "a timestamp, timestamptz or integer (epoch seconds) column",
                ))
            }
        };
        Ok(TimeColumn {
            column: column(name, found),
            storage,
        })
    }

    fn time_opt(
        &self,
        var: &'static str,
        name: Option<&ColumnName>,
    ) -> Result<Option<TimeColumn>, PreflightError> {
        name.map(|n| self.time(var, n, self.find(var, n)?))
            .transpose()
    }

    /// A column with a default name: absent means not used.
    fn time_if_present(
        &self,
        var: &'static str,
        name: &ColumnName,
    ) -> Result<Option<TimeColumn>, PreflightError> {
        self.get(name.as_str())
            .map(|found| self.time(var, name, found))
            .transpose()
    }
}
