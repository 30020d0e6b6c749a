//! The prologue `migrate`'s index steps share: in one transaction, the
//! settings checked against the table, the column a step is about, and the
//! index of `payments` a lookup finds on it.

use sqlx::PgConnection;

use super::MigrateError;
use crate::config::{ColumnName, Settings};
use crate::preflight;
use crate::store::{self, Context, StoreError};

/// Checks `settings` against the table ([`preflight::checked`]), takes the
/// column `pick` names in the settings and runs `look` on it, in one
/// transaction committed before returning. `None` when `pick` names no
/// column (the step has nothing to do); else the column and the name of the
/// index `look` found, if any.
///
/// # Errors
/// [`MigrateError`]: the settings' checks (exit 78 naming the variable), or
/// a database failure.
pub(super) async fn look_up<L>(
    conn: &mut PgConnection,
    settings: &Settings,
    pick: fn(&Settings) -> Option<&ColumnName>,
    look: L,
) -> Result<Option<(ColumnName, Option<String>)>, MigrateError>
where
    L: AsyncFn(&mut PgConnection, &ColumnName) -> Result<Option<String>, StoreError>,
{
    let store = |e: StoreError| MigrateError::Store(e);
    let mut tx = store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(store)?;
    // The settings fit the table (exit 78 naming the variable otherwise).
    preflight::checked(&mut tx, settings).await?;
    let Some(column) = pick(settings) else {
        return Ok(None);
    };
    let found = look(&mut tx, column).await.map_err(store)?;
    tx.commit()
        .await
        .context("closing a transaction")
        .map_err(store)?;
    Ok(Some((column.clone(), found)))
}
