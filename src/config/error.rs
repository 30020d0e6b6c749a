//! The one error type of the settings.

/// A missing or malformed setting (exit 78, docs/design.md, "Exit codes"). Every
/// variant names the variable in [`ConfigError::var`]; none carries a
/// secret's value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is not set.
    #[error("{var} is required but not set")]
    Missing {
        /// The environment variable's name.
        var: &'static str,
    },
    /// A variable is set but its value is not acceptable.
    #[error("{var} is invalid: {reason}")]
    Invalid {
        /// The environment variable's name.
        var: &'static str,
        /// What is wrong, without the value when the variable is secret.
        reason: String,
    },
    /// What a variable names does not fit the database, e.g. a column
    /// `payments` lacks (`run` checks before its first batch). The message is
    /// `problem`'s own, which starts with the variable's name.
    #[error("{problem}")]
    Unusable {
        /// The environment variable's name.
        var: &'static str,
        /// What the database lacks.
        problem: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The environment could not be read at all (envy rejected it before any
    /// variable was looked at).
    #[error("cannot read the environment")]
    Environment(#[source] envy::Error),
}

impl ConfigError {
    /// The variable to fix; `None` for [`ConfigError::Environment`].
    pub fn var(&self) -> Option<&'static str> {
        match self {
            ConfigError::Missing { var }
            | ConfigError::Invalid { var, .. }
            | ConfigError::Unusable { var, .. } => Some(var),
            ConfigError::Environment(_) => None,
        }
    }
}

/// [`ConfigError::Invalid`] for `var`.
pub(super) fn invalid(var: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        var,
        reason: reason.into(),
    }
}
