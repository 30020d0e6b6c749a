//! `migrate`'s subscriptions step (docs/subscriptions.md, "What migrate
//! does"): with `RECONCILER_SUBSCRIPTIONS_TABLE` set, the table checked
//! (exit 78 naming what does not fit) and a plain lookup index on its
//! subscription id column built `CONCURRENTLY` when no index leads with it
//! (per partition on a partitioned table). Nothing else is added to the
//! application's table.

use sqlx::PgConnection;

use super::{lock_timeout, MigrateError};
use crate::config::Settings;
use crate::preflight;
use crate::store::payment_index::IndexBuild;
use crate::store::subscriptions::index;
use crate::store::{self, Context, StoreError};

/// Checks the table and makes sure its subscription id column has a lookup
/// index; says which.
///
/// # Errors
/// [`MigrateError`]: exit 78 for a table or column that does not fit, else
/// a database failure.
pub(super) async fn ensure(
    conn: &mut PgConnection,
    settings: &Settings,
) -> Result<(), MigrateError> {
    let store = |e: StoreError| MigrateError::Store(e);
    let mut tx = store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(store)?;
    let Some(table) = preflight::subscriptions::check(&mut tx, settings).await? else {
        return Ok(());
    };
    let column = table.stripe_id.name.clone();
    let kept = index::leading(&mut tx, &table.table, &column)
        .await
        .map_err(store)?;
    tx.commit()
        .await
        .context("closing a transaction")
        .map_err(store)?;
    let on = format!("{} ({column})", table.display);
    if let Some(name) = kept {
        println!("{on} has the index {name}: kept");
        return Ok(());
    }
    let name = index::index_name(&relation_name(&table.display), &column);
    println!("building the index {name} on {on} CONCURRENTLY (the application keeps writing; on a large table this takes minutes)");
    let built = index::build(
        &mut *conn,
        &table.table,
        (&name, &column),
        table.partitioned,
    )
    .await
    .map_err(store)?;
    if built == IndexBuild::LockTimeout {
        println!("{}", lock_timeout::line(&mut *conn, &name, &on).await?);
        return Ok(());
    }
    println!("added the plain index {name} on {on} so the events job finds a row by its subscription; no constraint was added");
    Ok(())
}

/// The table's own name, without its schema.
fn relation_name(display: &str) -> String {
    display.rsplit('.').next().unwrap_or(display).to_owned()
}
