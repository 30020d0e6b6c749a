//! `migrate`'s Checkout Session step (docs/checkout-sessions.md): with
//! `RECONCILER_CHECKOUT_SESSION_COLUMN` set, says whether an index of the
//! application's serves the events job's lookups by session id, and which one
//! would when none does. `migrate` never adds it (docs/checkout-sessions.md).

use super::column_index;
use super::MigrateError;
use crate::config::{ColumnName, Settings};
use crate::store::payment_index;

/// With `RECONCILER_CHECKOUT_SESSION_COLUMN` set: prints the index of
/// `payments` leading with that column (kept), or the statement that would
/// build one, and warns. Changes nothing.
///
/// # Errors
/// [`MigrateError`]: the column's checks (exit 78 naming the variable), or
/// a database failure.
pub(super) async fn report(
    conn: &mut sqlx::PgConnection,
    settings: &Settings,
) -> Result<(), MigrateError> {
    let pick: fn(&Settings) -> Option<&ColumnName> = |s| s.schema.checkout_session_column.as_ref();
    let Some((column, found)) =
        column_index::look_up(conn, settings, pick, payment_index::leading_index).await?
    else {
        return Ok(());
    };
    let name = column.as_str();
    match found {
        Some(index) => println!("payments ({name}) has the index {index}: the events job looks Checkout Session rows up by it"),
        None => {
            println!(
                "payments ({name}) has no index leading with it: the events job's lookups of Checkout Session rows read the whole table. \
                 An index of yours would serve them, e.g. CREATE INDEX CONCURRENTLY {lower} ON payments ({quoted}); migrate does not add it",
                lower = index_name(name),
                quoted = column.quoted()
            );
            tracing::warn!(column = name, "payments has no index leading with the Checkout Session column");
        }
    }
    Ok(())
}

/// `payments_<column>` lower-cased, cut to PostgreSQL's 63 bytes (a column
/// name is a plain identifier: ASCII only).
fn index_name(column: &str) -> String {
    let mut name = format!("payments_{}", column.to_ascii_lowercase());
    name.truncate(63);
    name
}
