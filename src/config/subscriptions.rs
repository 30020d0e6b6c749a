//! The subscriptions group (docs/subscriptions.md, docs/configuration.md,
//! "Subscriptions"): the application's subscriptions table, the columns the
//! reconciler reads and writes there, its status words and the dunning
//! policy. Unset `RECONCILER_SUBSCRIPTIONS_TABLE`: no subscription
//! reconciliation, and no other variable of the group may be set.

use serde::Deserialize;

use super::error::{invalid, ConfigError};
use super::outbox::OutboxTable;
use super::rules::ColumnName;
use super::value;
use super::word_map::WordMapSyntax;
use crate::reconcile::subscription::{
    PastDueAccess, SubscriptionPolicy, SubscriptionStatus, SubscriptionWords,
};

const TABLE_VAR: &str = "RECONCILER_SUBSCRIPTIONS_TABLE";
const ID_VAR: &str = "RECONCILER_SUBSCRIPTION_ID_COLUMN";
const STATUS_VAR: &str = "RECONCILER_SUBSCRIPTION_STATUS_COLUMN";
const STATUSES_VAR: &str = "RECONCILER_SUBSCRIPTION_STATUSES";
const PERIOD_END_VAR: &str = "RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN";
const ENDS_AT_VAR: &str = "RECONCILER_SUBSCRIPTION_ENDS_AT_COLUMN";
const PRICE_VAR: &str = "RECONCILER_SUBSCRIPTION_PRICE_COLUMN";
const QUANTITY_VAR: &str = "RECONCILER_SUBSCRIPTION_QUANTITY_COLUMN";
const CREATED_VAR: &str = "RECONCILER_SUBSCRIPTION_CREATED_COLUMN";
const UPDATED_VAR: &str = "RECONCILER_SUBSCRIPTION_UPDATED_COLUMN";
const ACCOUNT_VAR: &str = "RECONCILER_SUBSCRIPTION_ACCOUNT_COLUMN";
const PAST_DUE_VAR: &str = "RECONCILER_PAST_DUE_ACCESS";

/// The value of `RECONCILER_SUBSCRIPTION_STATUS_COLUMN` for a table with no
/// status column.
pub const NO_STATUS_COLUMN: &str = "none";

/// The application's subscriptions table, validated like
/// `RECONCILER_OUTBOX_TABLE` (`table` or `schema.table`, each part an
/// identifier, always double-quoted in SQL).
pub type SubscriptionsTable = OutboxTable;

/// The subscriptions group, validated. Only the configured columns are
/// read, and a repair writes only the status, period end and ends-at
/// columns among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionSettings {
    /// `RECONCILER_SUBSCRIPTIONS_TABLE`.
    pub table: SubscriptionsTable,
    /// `RECONCILER_SUBSCRIPTION_ID_COLUMN` (default `stripe_subscription_id`):
    /// the text column holding `sub_…`.
    pub id_column: ColumnName,
    /// `RECONCILER_SUBSCRIPTION_STATUS_COLUMN` (default `status`); `None`
    /// for `none` (access follows the end columns).
    pub status_column: Option<ColumnName>,
    /// `RECONCILER_SUBSCRIPTION_STATUSES` (default: each of Stripe's eight
    /// statuses is its own word).
    pub statuses: SubscriptionWords,
    /// `RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN`: when the application
    /// believes the paid period ends.
    pub period_end_column: Option<ColumnName>,
    /// `RECONCILER_SUBSCRIPTION_ENDS_AT_COLUMN`: when the application will
    /// end access (NULL: renews).
    pub ends_at_column: Option<ColumnName>,
    /// `RECONCILER_SUBSCRIPTION_PRICE_COLUMN`: the application's price id.
    pub price_column: Option<ColumnName>,
    /// `RECONCILER_SUBSCRIPTION_QUANTITY_COLUMN`: seats.
    pub quantity_column: Option<ColumnName>,
    /// `RECONCILER_SUBSCRIPTION_CREATED_COLUMN` (default `created_at`): list
    /// windows; a table without it is read per row.
    pub created_column: ColumnName,
    /// `RECONCILER_SUBSCRIPTION_UPDATED_COLUMN` (default `updated_at`): the
    /// grace window; a table without it has no grace.
    pub updated_column: ColumnName,
    /// `RECONCILER_SUBSCRIPTION_ACCOUNT_COLUMN`: the connected account per
    /// row (`Stripe-Account`).
    pub account_column: Option<ColumnName>,
    /// `RECONCILER_PAST_DUE_ACCESS` (default `grant`).
    pub past_due: PastDueAccess,
}

impl SubscriptionSettings {
    /// What classification reads of the group.
    pub fn policy(&self) -> SubscriptionPolicy<'_> {
        SubscriptionPolicy {
            words: &self.statuses,
            past_due: self.past_due,
        }
    }

    /// Every configured column with its variable, the id column first (for
    /// `migrate`'s and `run`'s checks of the table).
    pub fn columns(&self) -> Vec<(&'static str, &ColumnName)> {
        let optional = [
            (STATUS_VAR, self.status_column.as_ref()),
            (PERIOD_END_VAR, self.period_end_column.as_ref()),
            (ENDS_AT_VAR, self.ends_at_column.as_ref()),
            (PRICE_VAR, self.price_column.as_ref()),
            (QUANTITY_VAR, self.quantity_column.as_ref()),
            (ACCOUNT_VAR, self.account_column.as_ref()),
        ];
        std::iter::once((ID_VAR, &self.id_column))
            .chain(optional.into_iter().filter_map(|(v, c)| c.map(|c| (v, c))))
            .collect()
    }
}

/// Parses `RECONCILER_SUBSCRIPTION_STATUSES`: `stripe_status=word,word;…`,
/// the form of `RECONCILER_LOCAL_STATUSES`, keys among Stripe's eight
/// subscription statuses, `active` required (a table has a word for access).
///
/// # Errors
/// [`ConfigError::Invalid`] naming the variable and the fault.
pub fn parse_statuses(raw: &str) -> Result<SubscriptionWords, ConfigError> {
    let syntax = WordMapSyntax {
        var: STATUSES_VAR,
        key: "status",
        parse_key: |name| match SubscriptionStatus::parse(name) {
            SubscriptionStatus::Unknown(_) => Err(format!(
                "{name:?} is not a Stripe subscription status ({})",
                SubscriptionStatus::ALL
                    .map(|s| s.as_str().to_owned())
                    .join(", ")
            )),
            status => Ok(status),
        },
    };
    let given = syntax.parse(raw)?;
    if !given.iter().any(|(s, _)| *s == SubscriptionStatus::Active) {
        return Err(invalid(
            STATUSES_VAR,
            "active is missing (the word the table uses for a subscription in good standing)",
        ));
    }
    Ok(SubscriptionWords::new(given))
}

#[derive(Deserialize)]
struct SubscriptionVars {
    subscriptions_table: Option<String>,
    subscription_id_column: Option<String>,
    subscription_status_column: Option<String>,
    subscription_statuses: Option<String>,
    subscription_period_end_column: Option<String>,
    subscription_ends_at_column: Option<String>,
    subscription_price_column: Option<String>,
    subscription_quantity_column: Option<String>,
    subscription_created_column: Option<String>,
    subscription_updated_column: Option<String>,
    subscription_account_column: Option<String>,
    past_due_access: Option<String>,
}

impl SubscriptionVars {
    /// Every variable but the table's, with its value when set and not blank.
    fn others(&self) -> [(&'static str, Option<&str>); 11] {
        fn set(v: &Option<String>) -> Option<&str> {
            v.as_deref().filter(|s| !s.trim().is_empty())
        }
        [
            (ID_VAR, set(&self.subscription_id_column)),
            (STATUS_VAR, set(&self.subscription_status_column)),
            (STATUSES_VAR, set(&self.subscription_statuses)),
            (PERIOD_END_VAR, set(&self.subscription_period_end_column)),
            (ENDS_AT_VAR, set(&self.subscription_ends_at_column)),
            (PRICE_VAR, set(&self.subscription_price_column)),
            (QUANTITY_VAR, set(&self.subscription_quantity_column)),
            (CREATED_VAR, set(&self.subscription_created_column)),
            (UPDATED_VAR, set(&self.subscription_updated_column)),
            (ACCOUNT_VAR, set(&self.subscription_account_column)),
            (PAST_DUE_VAR, set(&self.past_due_access)),
        ]
    }
}

fn optional_column(
    var: &'static str,
    raw: Option<&str>,
) -> Result<Option<ColumnName>, ConfigError> {
    raw.map(|name| ColumnName::parse(var, name)).transpose()
}

/// Parses the group; `None` when `RECONCILER_SUBSCRIPTIONS_TABLE` is unset
/// or blank.
///
/// # Errors
/// [`ConfigError`] naming the first malformed variable, a variable of the
/// group set without the table, a status map without a status column, a
/// status-less table without an end column, or one column named twice.
pub(super) fn parse<I>(vars: I) -> Result<Option<SubscriptionSettings>, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: SubscriptionVars = value::read(Some("RECONCILER_"), vars)?;
    let others = raw.others();
    let Some(table) = raw
        .subscriptions_table
        .as_deref()
        .filter(|t| !t.trim().is_empty())
    else {
        return match others.iter().find(|(_, v)| v.is_some()) {
            Some((var, _)) => Err(invalid(
                var,
                format!("is set but {TABLE_VAR} is not (without the table no subscription is reconciled)"),
            )),
            None => Ok(None),
        };
    };
    let get = |var: &str| others.iter().find(|(v, _)| *v == var).and_then(|(_, x)| *x);
    let status_column = match get(STATUS_VAR).map(str::trim) {
        Some(NO_STATUS_COLUMN) => None,
        other => Some(ColumnName::parse(STATUS_VAR, other.unwrap_or("status"))?),
    };
    let statuses = match get(STATUSES_VAR) {
        None => SubscriptionWords::default(),
        Some(_) if status_column.is_none() => return Err(words_without_column()),
        Some(text) => parse_statuses(text)?,
    };
    let past_due = match get(PAST_DUE_VAR) {
        None => PastDueAccess::default(),
        Some(text) => PastDueAccess::parse(text)
            .ok_or_else(|| invalid(PAST_DUE_VAR, format!("{text:?} is not grant or revoke")))?,
    };
    let settings = SubscriptionSettings {
        table: SubscriptionsTable::parse_as(TABLE_VAR, table)?,
        id_column: ColumnName::parse(ID_VAR, get(ID_VAR).unwrap_or("stripe_subscription_id"))?,
        status_column,
        statuses,
        period_end_column: optional_column(PERIOD_END_VAR, get(PERIOD_END_VAR))?,
        ends_at_column: optional_column(ENDS_AT_VAR, get(ENDS_AT_VAR))?,
        price_column: optional_column(PRICE_VAR, get(PRICE_VAR))?,
        quantity_column: optional_column(QUANTITY_VAR, get(QUANTITY_VAR))?,
        created_column: ColumnName::parse(CREATED_VAR, get(CREATED_VAR).unwrap_or("created_at"))?,
        updated_column: ColumnName::parse(UPDATED_VAR, get(UPDATED_VAR).unwrap_or("updated_at"))?,
        account_column: optional_column(ACCOUNT_VAR, get(ACCOUNT_VAR))?,
        past_due,
    };
    check_shape(&settings)?;
    Ok(Some(settings))
}

fn words_without_column() -> ConfigError {
    invalid(
        STATUSES_VAR,
        format!("is set but {STATUS_VAR} is none (a table without a status column has no words)"),
    )
}

/// A status-less table needs an end column; no column is named twice
/// among those the reconciler reads per row.
fn check_shape(s: &SubscriptionSettings) -> Result<(), ConfigError> {
    if s.status_column.is_none() && s.period_end_column.is_none() && s.ends_at_column.is_none() {
        return Err(invalid(
            STATUS_VAR,
            format!("none needs {ENDS_AT_VAR} or {PERIOD_END_VAR}: without a status column access follows the end columns"),
        ));
    }
    let columns = s.columns();
    for (i, (var, column)) in columns.iter().enumerate() {
        if let Some((first, _)) = columns[..i].iter().find(|(_, c)| c == column) {
            return Err(invalid(
                var,
                format!(
                    "{:?} is already {first}: each column holds one value",
                    column.as_str()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
