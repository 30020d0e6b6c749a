//! `stripe-reconciler migrate`

use super::CommandError;
use crate::config::Settings;
use crate::db;
use crate::store::payment_index::{self as schema, PaymentIntentIndex};
use crate::store::{Context, StoreError};

/// Applies the embedded migrations, then makes sure duplicate PaymentIntent
/// ids are found by an index lookup: a table without a UNIQUE index on
/// `stripe_payment_intent_id` gets one (built `CONCURRENTLY`) when it holds
/// no duplicates, else a plain index, and the duplicates are reported (the
/// scan records them as `duplicate_payment_intent` and repairs none).
pub(super) async fn migrate(settings: &Settings) -> Result<(), CommandError> {
    let pool = db::connect_for_migrations(settings.connect_options()?).await?;
    db::migrate(&pool).await?;
    tracing::info!(
        migrations = crate::MIGRATOR.iter().count(),
        "database schema is up to date"
    );
    let mut conn = pool
        .acquire()
        .await
        .context("connecting")
        .map_err(CommandError::Store)?;
    let store = |e: StoreError| CommandError::Store(e);
    let index = schema::payment_intent_index(&mut conn)
        .await
        .map_err(store)?;
    if index == PaymentIntentIndex::Unique {
        return Ok(());
    }
    let (ids, rows) = schema::count_duplicates(&mut conn).await.map_err(store)?;
    if ids == 0 {
        match schema::create_payment_intent_index(&mut conn, true).await {
            Ok(()) => {
                println!("payments.stripe_payment_intent_id had no UNIQUE index and no duplicates: added {}", schema::UNIQUE_INDEX);
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(error = %e, "the unique index could not be built (a duplicate arrived meanwhile?); adding a plain index");
            }
        }
    } else {
        println!(
            "payments.stripe_payment_intent_id has no UNIQUE constraint and {ids} PaymentIntent id(s) are held by {rows} rows: \
             no unique index added; each such row is reported as duplicate_payment_intent and never repaired"
        );
        tracing::warn!(
            duplicate_ids = ids,
            rows,
            "payments holds duplicate PaymentIntent ids"
        );
    }
    if index == PaymentIntentIndex::Missing {
        schema::create_payment_intent_index(&mut conn, false)
            .await
            .map_err(store)?;
        println!(
            "added {} so duplicates are found by index lookup",
            schema::PLAIN_INDEX
        );
    }
    Ok(())
}
