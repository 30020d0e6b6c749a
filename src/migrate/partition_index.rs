//! `migrate`'s partition step: with `RECONCILER_PARTITION_COLUMN` set, an
//! index on `payments (<column>, id)`, so the partition's batches are index
//! range scans.

use super::MigrateError;
use super::{column_index, lock_timeout};
use crate::config::{ColumnName, Settings};
use crate::store::payment_index::{self as schema, IndexBuild};
use crate::store::StoreError;

/// With `RECONCILER_PARTITION_COLUMN` set: checks the column (exit 78 naming
/// the variable) and makes sure an index on `payments (<column>, id)` exists,
/// a plain one built `CONCURRENTLY` when none does; reports which.
pub(super) async fn ensure(
    conn: &mut sqlx::PgConnection,
    settings: &Settings,
) -> Result<(), MigrateError> {
    let store = |e: StoreError| MigrateError::Store(e);
    let pick: fn(&Settings) -> Option<&ColumnName> =
        |s| s.schema.partition.as_ref().map(|p| &p.column);
    let Some((partition_column, kept)) =
        column_index::look_up(conn, settings, pick, schema::partition_index).await?
    else {
        return Ok(());
    };
    let column = partition_column.as_str();
    if let Some(name) = kept {
        println!("payments ({column}, id) has the index {name}: kept");
        return Ok(());
    }
    println!(
        "building the index {} on payments ({column}, id) CONCURRENTLY (the application keeps writing; on a large table this takes minutes)",
        schema::partition_index_name(&partition_column)
    );
    let (built, name) = schema::create_partition_index(&mut *conn, &partition_column)
        .await
        .map_err(store)?;
    if built == IndexBuild::LockTimeout {
        println!(
            "{}",
            lock_timeout::line(&mut *conn, &name, &format!("payments ({column}, id)")).await?
        );
        return Ok(());
    }
    println!(
        "added the plain index {name} on payments ({column}, id) so the partition's batches are index range scans (RECONCILER_PARTITION_COLUMN); no constraint was added"
    );
    Ok(())
}
