//! Whether a failed write is about the rows it touched or about the whole
//! database (docs/design.md, "Invariants": no single row fails a batch).
//! Phase 3 retries, bisects or gives up on that answer alone.

use super::StoreError;

/// What a failed statement says about the rows it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// Something in the rows refused the write: a trigger's `RAISE`, a
    /// constraint, a row lock held past `lock_timeout`, a statement cut off
    /// by `statement_timeout`. The same write fails again for the same row,
    /// so the batch isolates that row and commits the others.
    PerRow,
    /// A serialization failure (40001) or a deadlock (40P01): PostgreSQL
    /// chose this transaction as the victim of a race, and the same write
    /// usually succeeds when retried.
    Transient,
    /// The connection, the server, the schema or our own SQL failed: no
    /// subset of the rows would fare better, so the run fails (exit 1).
    WholeDatabase,
}

impl FailureClass {
    /// Classifies the driver's error by its SQLSTATE (PostgreSQL, Appendix A
    /// "Error Codes"). Errors without one (I/O, TLS, pool timeouts, protocol,
    /// decoding) are [`FailureClass::WholeDatabase`].
    pub fn of(error: &sqlx::Error) -> Self {
        match error {
            sqlx::Error::Database(db) => db
                .code()
                .map_or(Self::WholeDatabase, |c| Self::of_sqlstate(&c)),
            _ => Self::WholeDatabase,
        }
    }

    /// [`FailureClass::of`] for a [`StoreError`].
    pub fn of_store(error: &StoreError) -> Self {
        Self::of(&error.source)
    }

    /// Whether the statement failed after waiting out a timeout (55P03
    /// `lock_timeout`, 57014 `statement_timeout`): such a refusal costs the
    /// whole timeout, so the caller bounds how many it isolates.
    pub fn after_a_wait(error: &sqlx::Error) -> bool {
        matches!(sqlstate_and_message(error), Some((code, _)) if code == "55P03" || code == "57014")
    }

    /// Classifies a five-character SQLSTATE.
    pub fn of_sqlstate(code: &str) -> Self {
        match code {
            // serialization_failure, deadlock_detected
            "40001" | "40P01" => Self::Transient,
            // lock_not_available (lock_timeout, NOWAIT), query_canceled
            // (statement_timeout): waits on rows someone else holds.
            "55P03" | "57014" => Self::PerRow,
            // Insufficient privilege is a grant on a table: every row fails.
            "42501" => Self::WholeDatabase,
            _ => match code.get(..2) {
                // 22 data exception (a value a column or trigger rejects),
                // 23 integrity constraint violation, P0 PL/pgSQL (`RAISE`),
                // 27 triggered data change violation, 44 WITH CHECK OPTION.
                Some("22" | "23" | "27" | "44" | "P0") => Self::PerRow,
                // 08 connection, 25 transaction state, 42 syntax or missing
                // object, 53 resources, 57 operator intervention (shutdown),
                // 58 system, XX internal, and anything else.
                _ => Self::WholeDatabase,
            },
        }
    }
}

/// The SQLSTATE and message of a refused write, for a `write_refused`
/// finding; `None` for errors without a SQLSTATE.
pub fn sqlstate_and_message(error: &sqlx::Error) -> Option<(String, String)> {
    match error {
        sqlx::Error::Database(db) => Some((db.code()?.into_owned(), db.message().to_owned())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::FailureClass::{self, PerRow, Transient, WholeDatabase};

    #[test]
    fn sqlstates_split_into_row_transient_and_database_failures() {
        let table = [
            ("P0001", PerRow),        // RAISE EXCEPTION in a trigger
            ("P0004", PerRow),        // assert_failure
            ("23505", PerRow),        // unique_violation
            ("23514", PerRow),        // check_violation
            ("23503", PerRow),        // foreign_key_violation
            ("22001", PerRow),        // string_data_right_truncation
            ("27000", PerRow),        // triggered_data_change_violation
            ("44000", PerRow),        // with_check_option_violation
            ("55P03", PerRow),        // lock_not_available (lock_timeout)
            ("57014", PerRow),        // query_canceled (statement_timeout)
            ("40001", Transient),     // serialization_failure
            ("40P01", Transient),     // deadlock_detected
            ("40002", WholeDatabase), // transaction_integrity_constraint_violation
            ("08006", WholeDatabase), // connection_failure
            ("25P02", WholeDatabase), // in_failed_sql_transaction
            ("42501", WholeDatabase), // insufficient_privilege
            ("42P01", WholeDatabase), // undefined_table
            ("42703", WholeDatabase), // undefined_column
            ("53100", WholeDatabase), // disk_full
            ("57P01", WholeDatabase), // admin_shutdown
            ("58030", WholeDatabase), // io_error
            ("XX000", WholeDatabase), // internal_error
            ("", WholeDatabase),
        ];
        for (code, class) in table {
            assert_eq!(FailureClass::of_sqlstate(code), class, "{code}");
        }
    }

    #[test]
    fn errors_without_a_sqlstate_are_the_database_s() {
        assert_eq!(FailureClass::of(&sqlx::Error::PoolTimedOut), WholeDatabase);
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert_eq!(FailureClass::of(&sqlx::Error::Io(io)), WholeDatabase);
        assert_eq!(
            super::sqlstate_and_message(&sqlx::Error::PoolTimedOut),
            None
        );
    }
}
