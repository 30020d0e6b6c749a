//! The start-up checks of every command that reads `payments` (exit 78
//! naming what to fix): the user's schema ([`check_schema`]), the partition
//! ([`checked`], [`require_index`]), and what a scheduled job's run relies on
//! ([`check_columns`]). `RECONCILER_PARTITION_COLUMN` is checked against the
//! catalogue: the column exists with a text or integer type, the value fits
//! it, and the reads then cast the bound value to that kind (so the
//! `(column, id)` index is usable).

use sqlx::{PgConnection, PgPool};

use crate::config::{ConfigError, Settings};
use crate::facts::TableFacts;
use crate::store::keys;
use crate::store::outbox_shape::{self, OutboxMismatch, OutboxState};
use crate::store::payment_index::{self, PaymentIntentIndex};
use crate::store::payments::{self, ColumnError, MoneyColumns};
use crate::store::Context;

mod error;
pub mod subscriptions;

pub use error::PreflightError;

/// Checks what `migrate`, `run` and `repair` need of the user's schema before
/// anything is written (docs/schema.md): `payments` is a table on the
/// `search_path` with the required columns (`store::app_table`),
/// `payments.id` has a key type ([`detect_key`]), and
/// the outbox `RECONCILER_OUTBOX_TABLE` names is absent (reconciler shape) or
/// has the configured shape. Only `migrating` accepts an absent outbox.
///
/// # Errors
/// [`PreflightError::Config`] (exit 78) with one sentence naming what does not
/// fit and the ways out; [`PreflightError::Store`] from the database.
pub async fn check_schema(
    conn: &mut sqlx::PgConnection,
    settings: &Settings,
    migrating: bool,
) -> Result<OutboxState, PreflightError> {
    // The table itself first: found where it was named, a table, with the
    // columns every command reads (docs/schema.md).
    crate::store::app_table::check(&mut *conn)
        .await
        .map_err(PreflightError::Store)?
        .map_err(|e| ConfigError::Unusable {
            var: "DATABASE_URL",
            problem: Box::new(e),
        })?;
    detect_key(&mut *conn).await?;
    match outbox_shape::check(conn, &settings.outbox)
        .await
        .map_err(PreflightError::Store)?
    {
        Ok(OutboxState::Absent) if !migrating => Err(ConfigError::Unusable {
            var: "RECONCILER_OUTBOX_TABLE",
            problem: Box::new(OutboxMismatch::NotMigrated {
                table: settings.outbox.table.display(),
            }),
        }
        .into()),
        Ok(state) => Ok(state),
        Err(mismatch) => Err(ConfigError::Unusable {
            var: "RECONCILER_OUTBOX_TABLE",
            problem: Box::new(mismatch),
        }
        .into()),
    }
}

/// `payments.id`'s type (docs/keys.md): one of the key types the
/// reconciler walks, or exit 78 naming it.
///
/// # Errors
/// [`PreflightError::Config`] for an unsupported type; [`PreflightError::Store`].
pub async fn detect_key(conn: &mut PgConnection) -> Result<crate::key::KeyType, PreflightError> {
    keys::detect(conn)
        .await
        .map_err(PreflightError::Store)?
        .map_err(|e| {
            ConfigError::Unusable {
                var: "DATABASE_URL",
                problem: Box::new(e),
            }
            .into()
        })
}

/// The schema a run relies on: an index on `payments.stripe_payment_intent_id`
/// (each batch looks duplicates up by it; without one every row would scan
/// the table), `RECONCILER_AMOUNT_COLUMN` / `RECONCILER_CURRENCY_COLUMN` /
/// `RECONCILER_ACCOUNT_COLUMN` naming columns of `payments` with usable
/// types, and the partition's column (with its index). Exit 78 naming what to
/// fix. Returns what the checks learned ([`checked`]). `need_partition_index`: `run` reads
/// every batch by the partition's index; `events` looks rows up by
/// PaymentIntent and does not need it.
pub async fn check_columns(
    pool: &PgPool,
    settings: &Settings,
    need_partition_index: bool,
) -> Result<TableFacts, PreflightError> {
    // One transaction for every read: behind a transaction pooler a
    // statement outside one travels as two pooler transactions (docs/schema.md,
    // "Behind a connection pooler").
    let mut conn = crate::store::begin(pool)
        .await
        .context("opening a transaction")
        .map_err(PreflightError::Store)?;
    check_schema(&mut conn, settings, false).await?;
    let facts = checked(&mut conn, settings).await?;
    let misaligned = keys::misaligned(&mut conn, &facts.key)
        .await
        .map_err(PreflightError::Store)?;
    if !misaligned.is_empty() {
        return Err(ConfigError::Invalid {
            var: "DATABASE_URL",
            reason: format!(
                "payments.id is {} but {} still key payments by another type or collation: run `stripe-reconciler migrate` (it changes the reconciler's own tables only)",
                facts.key.sql(),
                misaligned.join(", ")
            ),
        }
        .into());
    }
    if need_partition_index {
        require_index(&mut conn, settings).await?;
    }
    require_payment_intent_index(&mut conn).await?;
    let columns = MoneyColumns::of(&settings.schema, &facts);
    if columns.amount.is_some() || columns.currency.is_some() || columns.account.is_some() {
        payments::check_columns(&mut conn, columns)
            .await
            .map_err(column_error)?;
    }
    conn.commit()
        .await
        .context("closing a transaction")
        .map_err(PreflightError::Store)?;
    Ok(facts)
}

/// Exit 78 when `payments.stripe_payment_intent_id` has no index, with the
/// statements that build it by hand (per partition on a partitioned table).
///
/// # Errors
/// [`PreflightError::Config`] when the index is missing;
/// [`PreflightError::Store`] from the database.
async fn require_payment_intent_index(conn: &mut PgConnection) -> Result<(), PreflightError> {
    if payment_index::payment_intent_index(&mut *conn)
        .await
        .map_err(PreflightError::Store)?
        == PaymentIntentIndex::Missing
    {
        // Said exactly, so a `migrate` that could not build it (a role's
        // statement timeout, a lock never granted) is never a dead end; on a
        // partitioned table, per partition (docs/schema.md).
        let by_hand = if payment_index::payments_partitioned(&mut *conn)
            .await
            .map_err(PreflightError::Store)?
        {
            payment_index::partitioned_build_by_hand(
                &mut *conn,
                payment_index::PLAIN_INDEX,
                &["stripe_payment_intent_id"],
            )
            .await
            .map_err(PreflightError::Store)?
        } else {
            payment_index::build_by_hand()
        };
        return Err(ConfigError::Invalid {
            var: "DATABASE_URL",
            reason: format!(
                "payments.stripe_payment_intent_id has no index: run `stripe-reconciler migrate` (it adds one) before `run`, or build it yourself in psql as the table's owner (the application keeps writing meanwhile):\n{by_hand}"
            ),
        }
        .into());
    }
    Ok(())
}

/// What a job that does not read `payments` row by row (`repair`) needs:
/// [`check_schema`] (the outbox must exist) and [`checked`] (the time zone
/// is known to the database). Returns what the checks learned.
///
/// # Errors
/// [`PreflightError::Config`] (exit 78) naming what to fix;
/// [`PreflightError::Store`] from the database.
pub async fn check_schema_only(
    pool: &PgPool,
    settings: &Settings,
) -> Result<TableFacts, PreflightError> {
    // In one transaction (pooler-safe: docs/schema.md).
    let mut conn = crate::store::begin(pool)
        .await
        .context("opening a transaction")
        .map_err(PreflightError::Store)?;
    check_schema(&mut conn, settings, false).await?;
    let mut facts = checked(&mut conn, settings).await?;
    // The subscriptions table, when configured: `repair` writes it.
    facts.subscriptions = subscriptions::check(&mut conn, settings).await?;
    conn.commit()
        .await
        .context("closing a transaction")
        .map_err(PreflightError::Store)?;
    Ok(facts)
}

/// The start-up checks of `run --object subscriptions`: those of
/// [`check_schema_only`], the subscriptions table required
/// (docs/subscriptions.md).
///
/// # Errors
/// [`PreflightError::Config`] (exit 78) naming what to fix, also when
/// `RECONCILER_SUBSCRIPTIONS_TABLE` is not set;
/// [`PreflightError::Store`] from the database.
pub async fn check_subscriptions(
    pool: &PgPool,
    settings: &Settings,
) -> Result<TableFacts, PreflightError> {
    let facts = check_schema_only(pool, settings).await?;
    if facts.subscriptions.is_none() {
        return Err(ConfigError::Missing {
            var: "RECONCILER_SUBSCRIPTIONS_TABLE",
        }
        .into());
    }
    Ok(facts)
}

/// What the database says about `payments` for `settings` (the detection
/// every command that reads `payments` runs, and the tests with it):
/// `payments.id`'s key type, the partition's kind from the catalogue, and
/// the types of `payments.created_at` / `updated_at` (a `timestamp without
/// time zone` is read in `RECONCILER_TIMESTAMP_ZONE`, which the database
/// must know).
///
/// # Errors
/// [`PreflightError::Config`] (exit 78) naming `RECONCILER_PARTITION_COLUMN`,
/// `RECONCILER_PARTITION_VALUE` or `RECONCILER_TIMESTAMP_ZONE`;
/// [`PreflightError::Store`] from the database.
pub async fn checked(
    conn: &mut PgConnection,
    settings: &Settings,
) -> Result<TableFacts, PreflightError> {
    let mut key = detect_key(&mut *conn).await?;
    if settings.scan.read_mode == crate::config::ReadMode::List {
        // List mode walks a uuid/text table without a `created_at` index on
        // the reconciler's own ordered copy (docs/keys.md, "The walk").
        key = key.walking_own_copy();
    }
    let partition = match &settings.schema.partition {
        Some(partition) => Some(
            partition.with_kind(
                payments::check_partition(conn, partition)
                    .await
                    .map_err(column_error)?,
            ),
        ),
        None => None,
    };
    let times = payments::time_columns(conn, &settings.schema.timestamp_zone)
        .await
        .map_err(column_error)?;
    Ok(TableFacts::new(key, times, partition))
}

/// What `run` needs beyond [`checked`]: an index whose first column is the
/// partition column, so a batch read is an index range scan, not a table
/// scan per batch (`migrate` adds one).
///
/// # Errors
/// [`PreflightError::Config`] (exit 78) naming `RECONCILER_PARTITION_COLUMN`.
pub async fn require_index(
    conn: &mut PgConnection,
    settings: &Settings,
) -> Result<(), PreflightError> {
    let Some(partition) = &settings.schema.partition else {
        return Ok(());
    };
    if payment_index::partition_index(conn, &partition.column)
        .await
        .map_err(PreflightError::Store)?
        .is_none()
    {
        return Err(ConfigError::Invalid {
            var: "RECONCILER_PARTITION_COLUMN",
            reason: format!(
                "payments has no index on ({:?}, id), which every batch of a partition reads by: run `stripe-reconciler migrate` with the same RECONCILER_PARTITION_COLUMN and RECONCILER_PARTITION_VALUE (and this RECONCILER_JOB) set, before `run`; it adds the index CONCURRENTLY (the chart's migration hook does this); or build it yourself in psql as the table's owner:\n{}",
                partition.column.as_str(),
                payment_index::partition_build_by_hand(&partition.column)
            ),
        }
        .into());
    }
    Ok(())
}

/// A [`ColumnError`] as the command's error: exit 78 naming the variable,
/// or the database's failure.
pub fn column_error(e: ColumnError) -> PreflightError {
    match e {
        ColumnError::Store(e) => PreflightError::Store(e),
        e @ (ColumnError::Missing { var, .. }
        | ColumnError::WrongType { var, .. }
        | ColumnError::BadValue { var, .. }) => ConfigError::Unusable {
            var,
            problem: Box::new(e),
        }
        .into(),
    }
}
