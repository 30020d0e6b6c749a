//! `migrate`'s outbox step: the outbox is created only when absent (and
//! only in the reconciler's shape); an existing one is left as it is.

use sqlx::PgConnection;

use super::MigrateError;
use crate::config::{OutboxSettings, OutboxShape};
use crate::store::outbox_shape::{self, OutboxState};
use crate::store::{self, Context, StoreError};

/// Creates the outbox `settings` name when `state` says it is absent and
/// the shape is `reconciler`; says on stdout what was done or kept.
///
/// # Errors
/// [`MigrateError::Store`] when the outbox cannot be created.
pub(super) async fn create_if_absent(
    conn: &mut PgConnection,
    settings: &OutboxSettings,
    state: OutboxState,
) -> Result<(), MigrateError> {
    let store = |e: StoreError| MigrateError::Store(e);
    let table = settings.table.display();
    if state == OutboxState::Absent && settings.shape == OutboxShape::Reconciler {
        let mut tx = store::begin(&mut *conn)
            .await
            .context("opening a transaction")
            .map_err(store)?;
        store::lock_migrations(&mut tx).await.map_err(store)?;
        outbox_shape::create(&mut tx, settings)
            .await
            .map_err(store)?;
        tx.commit()
            .await
            .context("creating the outbox")
            .map_err(store)?;
        println!(
            "created the outbox {table} (reconciler shape, drained by `stripe-reconciler repair`)"
        );
    } else {
        println!(
            "outbox {table} ({} shape) is {}: not altered",
            settings.shape.as_str(),
            state
        );
    }
    Ok(())
}
