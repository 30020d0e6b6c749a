//! `migrate`'s PaymentIntent step: duplicate PaymentIntent ids are found by
//! an index lookup on `payments (stripe_payment_intent_id)`; a plain index is
//! built when none exists, the UNIQUE one only when asked for and possible.

use sqlx::PgConnection;

use super::MigrateError;
use super::{duplicates, lock_timeout};
use crate::store::payment_index::{self as schema, IndexBuild, PaymentIntentIndex};
use crate::store::{self, Context, StoreError};

/// The PaymentIntent lookup index: the plain one built first when none
/// exists (unless a UNIQUE one is asked for), so the duplicate count reads
/// the column in index order, in bounded steps; then the count; then the
/// UNIQUE index when asked for (`unique`) and possible.
///
/// # Errors
/// [`MigrateError::Store`] when the index cannot be read or built.
pub(super) async fn ensure(conn: &mut PgConnection, unique: bool) -> Result<(), MigrateError> {
    let store = |e: StoreError| MigrateError::Store(e);
    let mut tx = store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(store)?;
    let mut index = schema::payment_intent_index(&mut tx).await.map_err(store)?;
    tx.commit()
        .await
        .context("closing a transaction")
        .map_err(store)?;
    let added = index == PaymentIntentIndex::Missing && !unique;
    if added {
        if !build(&mut *conn, false).await? {
            return Ok(());
        }
        index = PaymentIntentIndex::Plain;
    }
    let ids = duplicates::report(&mut *conn, index != PaymentIntentIndex::Missing).await?;
    match index {
        PaymentIntentIndex::Unique => {
            println!("payments.stripe_payment_intent_id has a UNIQUE index: kept");
            return Ok(());
        }
        PaymentIntentIndex::Plain if !unique => {
            if !added {
                println!("payments.stripe_payment_intent_id has a plain index and no UNIQUE constraint: kept (the reconciler adds no constraint)");
            }
            return Ok(());
        }
        _ => {}
    }
    if unique
        && schema::payments_partitioned(&mut *conn)
            .await
            .map_err(store)?
    {
        println!(
            "--unique-payment-intent-index: not built, payments is partitioned and a UNIQUE index there must include the partition key"
        );
    } else if unique {
        if ids > 0 {
            println!(
                "--unique-payment-intent-index: not built, the duplicates above would violate it"
            );
        } else {
            build(&mut *conn, true).await?;
            return Ok(());
        }
    }
    if index == PaymentIntentIndex::Missing {
        build(&mut *conn, false).await?;
    }
    Ok(())
}

/// Builds the lookup index `CONCURRENTLY` (UNIQUE with `unique`: only on a
/// column without duplicates), free of the role's statement timeout, its
/// lock wait bounded, saying so first and what was added after; `false`
/// when its lock was not granted (reported, with what to run).
async fn build(conn: &mut PgConnection, unique: bool) -> Result<bool, MigrateError> {
    let name = if unique {
        schema::UNIQUE_INDEX
    } else {
        schema::PLAIN_INDEX
    };
    println!(
        "building the index {name} on payments (stripe_payment_intent_id) CONCURRENTLY (the application keeps writing; on a large table this takes minutes)"
    );
    let built = schema::create_payment_intent_index(&mut *conn, unique)
        .await
        .map_err(MigrateError::Store)?;
    if built == IndexBuild::LockTimeout {
        let on = "payments (stripe_payment_intent_id)";
        println!("{}", lock_timeout::line(&mut *conn, name, on).await?);
        if !unique {
            println!(
                "until it is built, `run` stops with exit 78; to build it by hand instead (psql, as the table's owner):\n{}",
                schema::build_by_hand()
            );
        }
        return Ok(false);
    }
    if unique {
        println!(
            "--unique-payment-intent-index: added {name}; the application can no longer insert a second row for one PaymentIntent"
        );
    } else {
        println!(
            "added the plain index {name} so duplicates are found by index lookup; no UNIQUE constraint exists or was added"
        );
    }
    Ok(true)
}
