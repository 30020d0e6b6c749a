//! `migrate`'s partition step: with `RECONCILER_PARTITION_COLUMN` set, an
//! index on `payments (<column>, id)`, so the partition's batches are index
//! range scans.

use super::lock_timeout;
use crate::config::Settings;
use crate::lifecycle::preflight;
use crate::lifecycle::CommandError;
use crate::store::payment_index::{self as schema, IndexBuild};
use crate::store::{self, Context, StoreError};

/// With `RECONCILER_PARTITION_COLUMN` set: checks the column (exit 78 naming
/// the variable) and makes sure an index on `payments (<column>, id)` exists,
/// a plain one built `CONCURRENTLY` when none does; reports which.
pub(super) async fn ensure(
    conn: &mut sqlx::PgConnection,
    settings: &Settings,
) -> Result<(), CommandError> {
    let store = |e: StoreError| CommandError::Store(e);
    let mut tx = store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(store)?;
    let settings = preflight::checked(&mut tx, settings).await?;
    let Some(partition) = &settings.schema.partition else {
        return Ok(());
    };
    let column = partition.column.as_str();
    let kept = schema::partition_index(&mut tx, &partition.column)
        .await
        .map_err(store)?;
    tx.commit()
        .await
        .context("closing a transaction")
        .map_err(store)?;
    if let Some(name) = kept {
        println!("payments ({column}, id) has the index {name}: kept");
        return Ok(());
    }
    println!(
        "building the index {} on payments ({column}, id) CONCURRENTLY (the application keeps writing; on a large table this takes minutes)",
        schema::partition_index_name(&partition.column)
    );
    let (built, name) = schema::create_partition_index(&mut *conn, &partition.column)
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
