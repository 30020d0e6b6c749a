//! `ApplySubscriptionState` in the outbox (`RECONCILER_OUTBOX_TABLE`, every
//! shape; docs/findings.md, "Applying subscription repairs yourself"): one
//! command per row, carrying the values the scan saw and Stripe's values for
//! the configured columns. A row with a command still pending gets no
//! second one; of a relayed shape (`debezium`, `plain`), each finding is
//! handed to the relay once (`reconciliation_relayed_commands`).

use sqlx::PgConnection;

use super::APPLY_SUBSCRIPTION_STATE;
use crate::config::{OutboxSettings, OutboxShape};
use crate::key::PaymentKey;
use crate::store::{Context, StoreError};

/// One command to enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionCommand {
    /// The row's key (`aggregate_id`).
    pub key: PaymentKey,
    /// The open repairable findings it resolves.
    pub finding_ids: Vec<i64>,
    /// The payload (docs/findings.md).
    pub payload: serde_json::Value,
}

/// Of the rows `keys`, those with a command of ours still unprocessed (the
/// reconciler shape only: a relayed shape's delivery is invisible).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn pending(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    keys: &[PaymentKey],
) -> Result<Vec<PaymentKey>, StoreError> {
    if keys.is_empty() || !outbox.shape.drained_by_reconciler() {
        return Ok(Vec::new());
    }
    crate::store::query_scalar(&format!(
        "SELECT DISTINCT aggregate_id FROM {table}
          WHERE processed_at IS NULL AND event_type = $1 AND aggregate_id = ANY($2::text[])",
        table = outbox.table.quoted()
    ))
    .bind(APPLY_SUBSCRIPTION_STATE)
    .bind(keys)
    .fetch_all(conn)
    .await
    .context("looking for pending subscription repairs")
}

/// Enqueues `commands`; returns how many were enqueued (a relayed shape's
/// command whose findings were all handed over before is not).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn enqueue(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    commands: &[SubscriptionCommand],
) -> Result<u64, StoreError> {
    if commands.is_empty() {
        return Ok(0);
    }
    let sql = insert_sql(&mut *conn, outbox).await?;
    let mut enqueued = 0;
    for command in commands {
        if !outbox.shape.drained_by_reconciler() && !hand_over(&mut *conn, command).await? {
            continue;
        }
        crate::store::query(&sql)
            .bind(&command.key)
            .bind(&command.payload)
            .execute(&mut *conn)
            .await
            .context("enqueueing a subscription repair")?;
        enqueued += 1;
    }
    Ok(enqueued)
}

/// Records the command's findings as handed to the relay; `false` when
/// every one of them was handed over before.
async fn hand_over(
    conn: &mut PgConnection,
    command: &SubscriptionCommand,
) -> Result<bool, StoreError> {
    let fresh: Vec<i64> = crate::store::query_scalar(
        "WITH c AS (SELECT gen_random_uuid() AS id)
         INSERT INTO reconciliation_relayed_commands (finding_id, command_id, event_type)
         SELECT f, c.id, $2 FROM unnest($1::bigint[]) AS f, c
         ON CONFLICT (finding_id) DO NOTHING
         RETURNING finding_id",
    )
    .bind(&command.finding_ids)
    .bind(APPLY_SUBSCRIPTION_STATE)
    .fetch_all(conn)
    .await
    .context("recording a relayed subscription repair")?;
    Ok(!fresh.is_empty())
}

/// The INSERT of one command (`$1` the key, `$2` the payload) for the
/// outbox's shape.
async fn insert_sql(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
) -> Result<String, StoreError> {
    let table = outbox.table.quoted();
    Ok(match outbox.shape {
        OutboxShape::Reconciler | OutboxShape::Plain => format!(
            "INSERT INTO {table} (aggregate_type, aggregate_id, event_type, payload)
             VALUES ('Subscription', $1::text, '{APPLY_SUBSCRIPTION_STATE}', $2)"
        ),
        OutboxShape::Debezium => {
            let stamped: bool = crate::store::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_attribute
                                 WHERE attrelid = to_regclass($1) AND attname = 'timestamp'
                                   AND NOT attisdropped)",
            )
            .bind(&table)
            .fetch_one(conn)
            .await
            .context("reading the outbox's columns")?;
            let (col, val) = if stamped {
                (", \"timestamp\"", ", now()")
            } else {
                ("", "")
            };
            format!(
                "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload{col})
                 VALUES (gen_random_uuid(), 'subscription', $1::text, '{APPLY_SUBSCRIPTION_STATE}', $2{val})"
            )
        }
    })
}
