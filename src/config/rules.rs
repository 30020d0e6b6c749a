//! What classification compares beyond status: the money columns
//! (`RECONCILER_AMOUNT_COLUMN`, `RECONCILER_CURRENCY_COLUMN`), the Connect
//! account column (`RECONCILER_ACCOUNT_COLUMN`), the Checkout Session column
//! (`RECONCILER_CHECKOUT_SESSION_COLUMN`, docs/checkout-sessions.md) and the
//! aging thresholds (docs/findings.md, "Finding kinds").

use serde::Deserialize;

use super::error::{invalid, ConfigError};
use super::value;
use crate::reconcile::Rules;

/// A validated column name of `payments` (`RECONCILER_AMOUNT_COLUMN`,
/// `RECONCILER_CURRENCY_COLUMN`): 1 to 63 ASCII letters, digits and `_`, not
/// starting with a digit. Only such a name is ever put into SQL, and always
/// double-quoted (so it is matched exactly, case included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnName(String);

impl ColumnName {
    /// Validates `name` for the variable `var`.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `var`.
    pub fn parse(var: &'static str, name: &str) -> Result<Self, ConfigError> {
        let name = name.trim();
        let ok = !name.is_empty()
            && name.len() <= 63
            && !name.as_bytes()[0].is_ascii_digit()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if ok {
            Ok(ColumnName(name.to_owned()))
        } else {
            Err(invalid(
                var,
                format!("{name:?} is not a column name (1-63 letters, digits or _, not starting with a digit)"),
            ))
        }
    }

    /// The name as given (as `information_schema.columns` spells it).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name double-quoted for SQL (safe: it holds no quote).
    pub fn quoted(&self) -> String {
        format!("\"{}\"", self.0)
    }
}

#[derive(Deserialize)]
struct RulesVars {
    amount_column: Option<String>,
    currency_column: Option<String>,
    account_column: Option<String>,
    checkout_session_column: Option<String>,
    auth_expiry_warn_seconds: Option<String>,
    processing_max_seconds: Option<String>,
    abandoned_after_seconds: Option<String>,
}

/// The rules group, validated.
pub(super) struct Checks {
    pub(super) amount_column: Option<ColumnName>,
    pub(super) currency_column: Option<ColumnName>,
    pub(super) account_column: Option<ColumnName>,
    pub(super) checkout_session_column: Option<ColumnName>,
    pub(super) rules: Rules,
}

/// Parses the rules group; defaults from [`Rules::default`].
///
/// # Errors
/// [`ConfigError`] naming the first malformed variable.
pub(super) fn parse<I>(vars: I) -> Result<Checks, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: RulesVars = value::read(Some("RECONCILER_"), vars)?;
    let d = Rules::default();
    Ok(Checks {
        amount_column: column("RECONCILER_AMOUNT_COLUMN", raw.amount_column)?,
        currency_column: column("RECONCILER_CURRENCY_COLUMN", raw.currency_column)?,
        account_column: column("RECONCILER_ACCOUNT_COLUMN", raw.account_column)?,
        checkout_session_column: column(
            "RECONCILER_CHECKOUT_SESSION_COLUMN",
            raw.checkout_session_column,
        )?,
        rules: Rules {
            auth_expiry_warn_seconds: value::number(
                "RECONCILER_AUTH_EXPIRY_WARN_SECONDS",
                raw.auth_expiry_warn_seconds,
                d.auth_expiry_warn_seconds,
                0,
                // Below the ~7 days after which Stripe cancels an
                // uncaptured authorisation: a later warning comes too late.
                7 * 24 * 3600 - 1,
            )?,
            processing_max_seconds: value::number(
                "RECONCILER_PROCESSING_MAX_SECONDS",
                raw.processing_max_seconds,
                d.processing_max_seconds,
                1,
                365 * 24 * 3600,
            )?,
            abandoned_after_seconds: match value::number(
                "RECONCILER_ABANDONED_AFTER_SECONDS",
                raw.abandoned_after_seconds,
                0,
                0,
                365 * 24 * 3600,
            )? {
                0 => None,
                secs => Some(secs),
            },
        },
    })
}

fn column(var: &'static str, raw: Option<String>) -> Result<Option<ColumnName>, ConfigError> {
    raw.filter(|s| !s.trim().is_empty())
        .map(|s| ColumnName::parse(var, &s))
        .transpose()
}
