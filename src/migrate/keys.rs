//! `migrate`'s key step (docs/keys.md): the reconciler's key columns hold
//! `payments.id`'s type, and the walk the cycle will take is said.

use super::MigrateError;
use crate::config::Settings;
use crate::key::{KeyKind, Walk};
use crate::preflight;
use crate::store::{self, Context, StoreError};

/// Aligns the reconciler's key columns with `payments.id`'s type and says
/// how the cycle walks the table, naming the index of the application's
/// that would keep list mode's batches dense when it is missing
/// (docs/keys.md; `migrate` never adds it: the table is the application's).
/// When the state table's key column changes type (the first `migrate` on a
/// uuid, text or numeric table), the existing payments are registered in it,
/// as migration 0010 does for integer keys.
pub(super) async fn align(
    conn: &mut sqlx::PgConnection,
    settings: &Settings,
) -> Result<(), MigrateError> {
    let store = |e: StoreError| MigrateError::Store(e);
    // Reads in transactions (pooler-safe: docs/schema.md).
    let mut tx = store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(store)?;
    let key = preflight::detect_key(&mut tx).await?;
    tx.commit()
        .await
        .context("closing a transaction")
        .map_err(store)?;
    let changed = crate::store::keys::align(&mut *conn, &key)
        .await
        .map_err(MigrateError::Store)?;
    if !changed.is_empty() {
        println!(
            "payments.id is {}: the key column of {} now holds that type",
            key.sql(),
            changed.join(", ")
        );
    }
    // Registered when the state table's key column has just changed type,
    // or when an earlier migrate changed it and its registration (one
    // statement: all or nothing) did not finish: the state table is empty
    // beside a non-empty `payments`.
    let mut tx = store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(store)?;
    let unregistered = key.kind() != KeyKind::Integer
        && crate::store::payment_state::empty_beside_payments(&mut tx)
            .await
            .map_err(MigrateError::Store)?;
    let times = crate::store::payments::time_columns(&mut tx, &settings.schema.timestamp_zone)
        .await
        .map_err(preflight::column_error)?;
    tx.commit()
        .await
        .context("closing a transaction")
        .map_err(store)?;
    if unregistered || changed.iter().any(|t| t == "reconciliation_payment_state") {
        let registered = crate::store::payment_state::register_existing(&mut *conn, &times)
            .await
            .map_err(MigrateError::Store)?;
        tracing::info!(
            registered,
            "existing payments registered in the reconciler's state"
        );
    }
    say_walk(&key);
    Ok(())
}

/// Says how each cycle walks `payments` for `key`, and which index of the
/// application's would keep list mode's batches dense (docs/keys.md).
fn say_walk(key: &crate::key::KeyType) {
    match (key.kind(), key.walk()) {
        (_, Walk::CreatedAt) => println!(
            "payments.id is {}: each cycle walks payments in (created_at, id) order on your index leading with created_at",
            key.sql()
        ),
        (KeyKind::Uuid | KeyKind::Text, Walk::Key) => {
            println!(
                "payments.id is {}: list mode walks the reconciler's own ordered copy of payments in (created_at, id) order \
                 (every run first registers the rows inserted since the last one; retrieve mode walks in key order). \
                 An index of yours on a NOT NULL created_at lets the cycle walk payments itself instead, e.g. \
                 CREATE INDEX CONCURRENTLY payments_created_at_id ON payments (created_at, id); migrate does not add it",
                key.sql()
            );
            tracing::warn!(key = key.sql(), "payments has no index leading with a NOT NULL created_at: list mode walks the reconciler's own ordered copy");
        }
        _ => {}
    }
}
