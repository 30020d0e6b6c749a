//! Why a finding was resolved, stored in `reconciliation_findings.resolution`
//! (docs/findings.md, "Finding kinds").

use std::fmt;

/// Why a finding was resolved. The store binds [`Resolution::as_str`]; the
/// column may also hold values written by hand or by other versions, so the
/// review queue reads it back as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resolution {
    /// The canonical writer applied the repair, or found the payment already
    /// at the command's target (the webhook got there first).
    Repaired,
    /// A later read found the payment in sync: no finding any more.
    Cleared,
    /// A later read decided another kind (the PaymentIntent moved on), or the
    /// payment moved somewhere else than the repair's target.
    Superseded,
    /// A person resolved it with `findings resolve` (who and why are kept).
    /// A manual resolution of the same drift keeps it from reopening.
    Manual,
    /// The application deleted (or archived away) the payment: the scan
    /// that passed its id found no row, or the repair worker found none for
    /// its command (docs/schema.md, "A payment the application deletes"). Its commands are
    /// skipped.
    PaymentDeleted,
}

/// `last_error` of a repair command closed because the application deleted
/// its payment (the scan that passed its id, or the repair worker, found no
/// row): starts with the resolution's value, `payment_deleted`.
pub const PAYMENT_DELETED_NOTE: &str =
    "payment_deleted: the application deleted the payment; nothing to repair";

impl Resolution {
    /// Every resolution the reconciler writes.
    pub const ALL: [Resolution; 5] = [
        Resolution::Repaired,
        Resolution::Cleared,
        Resolution::Superseded,
        Resolution::Manual,
        Resolution::PaymentDeleted,
    ];

    /// The database value (`repaired`, `cleared`, `superseded`, `manual`,
    /// `payment_deleted`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Repaired => "repaired",
            Self::Cleared => "cleared",
            Self::Superseded => "superseded",
            Self::Manual => "manual",
            Self::PaymentDeleted => "payment_deleted",
        }
    }
}

impl fmt::Display for Resolution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_values_are_the_documented_ones() {
        let values: Vec<&str> = Resolution::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            values,
            [
                "repaired",
                "cleared",
                "superseded",
                "manual",
                "payment_deleted"
            ]
        );
        assert_eq!(Resolution::Manual.to_string(), "manual");
    }
}
