//! `migrate`'s steps, in order ([`migrate`]): the schema checked first, the
//! embedded migrations, the key columns, the outbox, the PaymentIntent
//! lookup index and the partition's index. Each step says on stdout what it
//! did or kept; nothing is added to `payments` but plain lookup indexes
//! (and the UNIQUE one only when asked for).
//!
//! - `keys`: the reconciler's key columns aligned with `payments.id`'s type.
//! - `outbox`: the outbox created when absent.
//! - `payment_intent_index`: the lookup index on `stripe_payment_intent_id`.
//! - `duplicates`: the count of PaymentIntent ids several rows hold.
//! - `partition_index`: the index on `payments (<partition column>, id)`.
//! - `session_index`: which index would serve lookups by Checkout Session id.
//! - `subscription_index`: the subscriptions table checked and its lookup index.
//! - `error`: [`MigrateError`], why `migrate` stopped, and its exit code.
//! - `lock_timeout`: what to say when an index build did not get its lock.

mod column_index;
mod duplicates;
mod error;
mod keys;
mod lock_timeout;
mod outbox;
mod partition_index;
mod payment_intent_index;
mod session_index;
mod subscription_index;

use sqlx::{PgConnection, PgPool};

use crate::config::Settings;
use crate::preflight::{self, check_schema};
use crate::store::outbox_shape::OutboxState;
use crate::store::{self, Context, StoreError};

pub use error::MigrateError;

/// Checks the schema, applies the embedded migrations, creates the outbox
/// when it is absent, then makes sure duplicate PaymentIntent ids are found
/// by an index lookup: a plain index built `CONCURRENTLY` when none covers
/// `stripe_payment_intent_id` (UNIQUE only with `unique`, and only without
/// duplicates); an existing index of either kind is kept. Duplicates and the
/// absence of a UNIQUE index are reported. `pool` is the migrations' pool
/// (one connection).
///
/// # Errors
/// [`MigrateError`]: exit 78 naming what to fix in the schema or settings,
/// else a database failure.
pub async fn migrate(pool: &PgPool, settings: &Settings, unique: bool) -> Result<(), MigrateError> {
    let store = |e: StoreError| MigrateError::Store(e);
    let mut conn = pool.acquire().await.context("connecting").map_err(store)?;
    // 1. Nothing is created for a schema the reconciler cannot work with.
    let outbox = check_first(&mut conn, settings).await?;
    drop(conn);
    // 2. The embedded migrations (0001 without its outbox section), in the
    //    zone `payments`' wall-clock timestamps are read in.
    let upgrade = crate::db::migrate_in(pool, &settings.schema.timestamp_zone).await?;
    for line in upgrade.lines() {
        println!("{line}");
    }
    tracing::info!(
        migrations = crate::MIGRATOR.iter().count(),
        "database schema is up to date"
    );
    let mut conn = pool.acquire().await.context("connecting").map_err(store)?;
    // 2b. The reconciler's key columns hold payments.id's type (docs/keys.md).
    keys::align(&mut conn, settings).await?;
    // 3. The outbox: created only when absent; an existing one is left as it is.
    outbox::create_if_absent(&mut conn, &settings.outbox, outbox).await?;
    // 4. The PaymentIntent id lookup index.
    payment_intent_index::ensure(&mut conn, unique).await?;
    // 5. The partition's `(column, id)` index, when a partition is set.
    partition_index::ensure(&mut conn, settings).await?;
    // 6. With a Checkout Session column: which index of yours serves the
    //    events job's lookups by session id (never added here).
    session_index::report(&mut conn, settings).await?;
    // 7. With a subscriptions table: its lookup index on the subscription id.
    subscription_index::ensure(&mut conn, settings).await
}

/// Checks the schema before anything is created (the table `payments` and
/// its required columns, the key, the outbox, the partition's column);
/// returns the outbox's state. Every
/// step runs under migrate's own timeouts, never the role's defaults.
async fn check_first(
    conn: &mut PgConnection,
    settings: &Settings,
) -> Result<OutboxState, MigrateError> {
    let store = |e: StoreError| MigrateError::Store(e);
    let mut tx = store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(store)?;
    // `payments` is the application's table, found on the search_path with
    // the columns every command reads; `migrate` never creates it.
    let outbox = check_schema(&mut tx, settings, true).await?;
    preflight::checked(&mut tx, settings).await?;
    preflight::subscriptions::check(&mut tx, settings).await?;
    tx.commit()
        .await
        .context("closing a transaction")
        .map_err(store)?;
    Ok(outbox)
}
