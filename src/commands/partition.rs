//! The start-up check of `RECONCILER_PARTITION_COLUMN` for every command
//! that reads `payments` (`run`, `events`, `status`, `migrate`): the column
//! exists with a text or integer type, the value fits it, and the reads then
//! cast the bound value to that kind (so the `(column, id)` index is usable).

use sqlx::PgConnection;

use super::CommandError;
use crate::config::{ConfigError, Settings};
use crate::store::payment_index;
use crate::store::payments::{self, ColumnError};

/// `settings` with the partition's kind fixed from the catalogue (a clone;
/// unchanged without a partition).
///
/// # Errors
/// [`CommandError::Config`] (exit 78) naming `RECONCILER_PARTITION_COLUMN`
/// or `RECONCILER_PARTITION_VALUE`; [`CommandError::Store`] from the database.
pub(super) async fn checked(
    conn: &mut PgConnection,
    settings: &Settings,
) -> Result<Settings, CommandError> {
    let mut settings = settings.clone();
    if let Some(partition) = settings.job.partition.as_mut() {
        partition.kind = payments::check_partition(conn, partition)
            .await
            .map_err(column_error)?;
    }
    Ok(settings)
}

/// What `run` needs beyond [`checked`]: an index whose first column is the
/// partition column, so a batch read is an index range scan, not a table
/// scan per batch (`migrate` adds one).
///
/// # Errors
/// [`CommandError::Config`] (exit 78) naming `RECONCILER_PARTITION_COLUMN`.
pub(super) async fn require_index(
    conn: &mut PgConnection,
    settings: &Settings,
) -> Result<(), CommandError> {
    let Some(partition) = &settings.job.partition else {
        return Ok(());
    };
    if payment_index::partition_index(conn, &partition.column)
        .await
        .map_err(CommandError::Store)?
        .is_none()
    {
        return Err(ConfigError::Invalid {
            var: "RECONCILER_PARTITION_COLUMN",
            reason: format!(
                "payments has no index on ({:?}, id), which every batch of a partition reads by: run `stripe-reconciler migrate` with the same RECONCILER_PARTITION_COLUMN and RECONCILER_PARTITION_VALUE (and this RECONCILER_JOB) set, before `run`; it adds the index CONCURRENTLY (the chart's migration hook does this)",
                partition.column.as_str()
            ),
        }
        .into());
    }
    Ok(())
}

/// A [`ColumnError`] as the command's error: exit 78 naming the variable,
/// or the database's failure.
pub(super) fn column_error(e: ColumnError) -> CommandError {
    match e {
        ColumnError::Store(e) => CommandError::Store(e),
        e @ (ColumnError::Missing { var, .. }
        | ColumnError::WrongType { var, .. }
        | ColumnError::BadValue { var, .. }) => ConfigError::Unusable {
            var,
            problem: Box::new(e),
        }
        .into(),
    }
}
