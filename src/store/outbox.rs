//! The outbox (`RECONCILER_OUTBOX_TABLE`): repair commands for the canonical
//! writer. The table may be shared with the application, so every query
//! filters on `event_type`. Of a `debezium`-shaped outbox the reconciler only
//! inserts (the application's relay delivers and may delete the rows), so the
//! guards that read our bookkeeping columns read
//! `reconciliation_relayed_commands` instead or do nothing.

use sqlx::PgConnection;

use super::outbox_shape::DEBEZIUM_TIMESTAMP;
use super::{Context, StoreError};
use crate::config::{OutboxSettings, OutboxShape};
use crate::key::{KeyType, PaymentKey};

/// A repair command to enqueue for a newly created finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairRow {
    /// `payments.id` (the aggregate).
    pub payment_id: PaymentKey,
    /// The finding the command resolves.
    pub finding_id: i64,
    /// `ApplyPaymentSucceeded` or `ApplyPaymentCanceled`.
    pub command: &'static str,
    /// The local status the classification saw.
    pub expected_local_status: String,
    /// The PaymentIntent id the decision was made on: the writer applies the
    /// command only while the payment still holds it (or, for a payment
    /// judged by its Checkout Session, fills it in while the payment's
    /// column is empty). `None`: a session without a PaymentIntent.
    pub stripe_payment_intent_id: Option<String>,
    /// The connected account the PaymentIntent lives on (`acct_…`); `None`:
    /// the platform's own account (docs/connect.md).
    pub stripe_account_id: Option<String>,
    /// The Checkout Session the decision was made on, for a payment judged
    /// by its session (docs/checkout-sessions.md); `None` for a PaymentIntent row.
    pub checkout_session_id: Option<String>,
}

/// Enqueues repair commands in one statement, with the design note's payload
/// `{"payment_id", "finding_id", "expected_local_status"}` plus
/// `"stripe_payment_intent_id"`, and `"stripe_account_id"` when the payment
/// is a connected account's (absent for the platform's own). Reconciler
/// shape: `aggregate_type = 'Payment'`, `event_type` the command. Debezium
/// shape: `id` a fresh uuid,
/// `aggregatetype = 'payment'`, `aggregateid` the payment id, `type` the
/// command, the same `payload`, `timestamp = now()` when the column exists;
/// each finding's command is remembered in `reconciliation_relayed_commands`
/// and never enqueued twice. Returns how many were enqueued.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn enqueue_repairs(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    key: &KeyType,
    rows: &[RepairRow],
) -> Result<u64, StoreError> {
    if rows.is_empty() {
        return Ok(0);
    }
    let payment_ids: Vec<&PaymentKey> = rows.iter().map(|r| &r.payment_id).collect();
    let finding_ids: Vec<i64> = rows.iter().map(|r| r.finding_id).collect();
    let commands: Vec<&str> = rows.iter().map(|r| r.command).collect();
    let expected: Vec<&str> = rows
        .iter()
        .map(|r| r.expected_local_status.as_str())
        .collect();
    let intents: Vec<Option<&str>> = rows
        .iter()
        .map(|r| r.stripe_payment_intent_id.as_deref())
        .collect();
    let sessions: Vec<Option<&str>> = rows
        .iter()
        .map(|r| r.checkout_session_id.as_deref())
        .collect();
    let accounts: Vec<Option<&str>> = rows
        .iter()
        .map(|r| r.stripe_account_id.as_deref())
        .collect();
    let sql = enqueue_sql(conn, outbox, key).await?;
    let done = super::query(&sql)
        .bind(payment_ids)
        .bind(finding_ids)
        .bind(commands)
        .bind(expected)
        .bind(intents)
        .bind(accounts)
        .bind(sessions)
        .execute(conn)
        .await
        .context("enqueueing repair commands")?;
    Ok(done.rows_affected())
}

/// The INSERT of [`enqueue_repairs`] for `outbox`'s shape (the Debezium
/// shape's `timestamp` column only when the table has it), its seven arrays
/// bound at `$1..$7`.
///
/// # Errors
/// [`StoreError`] from the catalog look-up.
async fn enqueue_sql(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    key: &KeyType,
) -> Result<String, StoreError> {
    let table = outbox.table.quoted();
    let payload = payload(key);
    Ok(match outbox.shape {
        OutboxShape::Reconciler => format!(
            "INSERT INTO {table} (aggregate_type, aggregate_id, event_type, payload)
             SELECT 'Payment', v.payment_id::text, v.command, {payload}
               FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
                    AS v(payment_id, finding_id, command, expected, intent, account, session)"
        ),
        OutboxShape::Debezium => {
            let (ts_col, ts_val) = if has_column(conn, &table, DEBEZIUM_TIMESTAMP).await? {
                (format!(", \"{DEBEZIUM_TIMESTAMP}\""), ", now()")
            } else {
                (String::new(), "")
            };
            // The relayed record first: a finding that already has one gets
            // no second row in the application's outbox.
            format!(
                "WITH v AS (SELECT gen_random_uuid() AS command_id, u.*
                              FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
                                   AS u(payment_id, finding_id, command, expected, intent, account, session)),
                      r AS (INSERT INTO reconciliation_relayed_commands (finding_id, command_id, event_type)
                            SELECT finding_id, command_id, command FROM v
                            ON CONFLICT (finding_id) DO NOTHING
                            RETURNING finding_id)
                 INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload{ts_col})
                 SELECT v.command_id, 'payment', v.payment_id::text, v.command, {payload}{ts_val}
                   FROM v JOIN r USING (finding_id)"
            )
        }
    })
}

/// The payload of a repair command (the design note's, plus the PaymentIntent
/// and, for a connected account's payment only, its `stripe_account_id`: a
/// platform payment's payload is as earlier releases wrote it; for a payment judged by
/// its Checkout Session, `checkout_session_id`, and `stripe_payment_intent_id`
/// the session's PaymentIntent or null: docs/checkout-sessions.md). `payment_id` is the
/// key's JSON form in the application's type (`to_jsonb`): a number for
/// integer and numeric keys, as earlier releases wrote them, a string for uuid and text
/// keys (docs/keys.md).
fn payload(key: &KeyType) -> String {
    format!(
        "jsonb_build_object('payment_id', to_jsonb(({})::{}), 'finding_id', v.finding_id,
                                   'expected_local_status', v.expected,
                                   'stripe_payment_intent_id', v.intent)
             || CASE WHEN v.account IS NULL THEN '{{}}'::jsonb
                     ELSE jsonb_build_object('stripe_account_id', v.account) END
             || CASE WHEN v.session IS NULL THEN '{{}}'::jsonb
                     ELSE jsonb_build_object('checkout_session_id', v.session) END",
        "v.payment_id",
        key.stored()
    )
}

async fn has_column(
    conn: &mut PgConnection,
    table: &str,
    column: &str,
) -> Result<bool, StoreError> {
    super::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_attribute
                         WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped)",
    )
    .bind(table)
    .bind(column)
    .fetch_one(conn)
    .await
    .context("reading the outbox's columns")
}

/// A repair command claimed by the worker (row-locked until its transaction ends).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedCommand {
    /// `outbox.id`
    pub id: i64,
    /// `outbox.event_type`
    pub event_type: String,
    /// `outbox.payload`
    pub payload: serde_json::Value,
    /// Failed attempts so far.
    pub attempts: i32,
}

/// Claims up to `limit` unprocessed commands of `event_types` with fewer than
/// `max_attempts` failed attempts, oldest first, skipping the ids in `exclude`,
/// with `FOR UPDATE SKIP LOCKED` so concurrent workers never claim the same
/// command.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn claim(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    event_types: &[&str],
    max_attempts: i32,
    exclude: &[i64],
    limit: i64,
) -> Result<Vec<ClaimedCommand>, StoreError> {
    super::query_as(&format!(
        "SELECT id, event_type, payload, attempts FROM {table}
          WHERE processed_at IS NULL AND event_type = ANY($1) AND attempts < $2
            AND id <> ALL($3)
          ORDER BY id
          LIMIT $4
          FOR UPDATE SKIP LOCKED",
        table = outbox.table.quoted()
    ))
    .bind(event_types)
    .bind(max_attempts)
    .bind(exclude)
    .bind(limit)
    .fetch_all(conn)
    .await
    .context("claiming repair commands")
}

/// Marks a command processed.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn mark_processed(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    id: i64,
) -> Result<(), StoreError> {
    super::query(&format!(
        "UPDATE {table} SET processed_at = now(), last_error = NULL WHERE id = $1",
        table = outbox.table.quoted()
    ))
    .bind(id)
    .execute(conn)
    .await
    .context("marking a command processed")?;
    Ok(())
}

/// Closes a command without applying it (`processed_at` set, `last_error`
/// says why: e.g. its payment has a refund under review).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn mark_skipped(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    id: i64,
    reason: &str,
) -> Result<(), StoreError> {
    super::query(&format!(
        "UPDATE {table} SET processed_at = now(), last_error = $2 WHERE id = $1",
        table = outbox.table.quoted()
    ))
    .bind(id)
    .bind(reason)
    .execute(conn)
    .await
    .context("closing a skipped command")?;
    Ok(())
}

/// Of these open findings, those with no repair command the worker will still
/// process (none unprocessed, stuck ones included): a command was lost, or
/// skipped while the payment was blocked. The scan enqueues one for them.
/// Debezium shape: those never handed to the relay (one command per finding,
/// whether or not the relay has deleted its row since).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn findings_without_command(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    event_types: &[&str],
    finding_ids: &[i64],
) -> Result<Vec<i64>, StoreError> {
    if finding_ids.is_empty() {
        return Ok(Vec::new());
    }
    if outbox.shape == OutboxShape::Debezium {
        return super::query_scalar(
            "SELECT f.id FROM unnest($1::bigint[]) AS f(id)
              WHERE NOT EXISTS (SELECT 1 FROM reconciliation_relayed_commands r
                                 WHERE r.finding_id = f.id)",
        )
        .bind(finding_ids)
        .fetch_all(conn)
        .await
        .context("looking for findings without a relayed command");
    }
    super::query_scalar(&format!(
        "SELECT f.id FROM unnest($2::bigint[]) AS f(id)
          WHERE NOT EXISTS (SELECT 1 FROM {table} o
                             WHERE o.processed_at IS NULL AND o.event_type = ANY($1)
                               AND o.payload->>'finding_id' = f.id::text)",
        table = outbox.table.quoted()
    ))
    .bind(event_types)
    .bind(finding_ids)
    .fetch_all(conn)
    .await
    .context("looking for findings without a repair command")
}

/// Records a failed attempt; the command stays unprocessed for a later run.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn record_failure(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    id: i64,
    error: &str,
) -> Result<(), StoreError> {
    super::query(&format!(
        "UPDATE {table} SET attempts = attempts + 1, last_error = $2 WHERE id = $1",
        table = outbox.table.quoted()
    ))
    .bind(id)
    .bind(error)
    .execute(conn)
    .await
    .context("recording a failed command")?;
    Ok(())
}

/// Appends a domain event (e.g. `PaymentStatusChanged`) for downstream consumers.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn append_event(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    aggregate_id: &PaymentKey,
    event_type: &str,
    payload: &serde_json::Value,
) -> Result<(), StoreError> {
    super::query(&format!(
        "INSERT INTO {table} (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('Payment', $1::text, $2, $3)",
        table = outbox.table.quoted()
    ))
    .bind(aggregate_id)
    .bind(event_type)
    .bind(payload)
    .execute(conn)
    .await
    .context("appending an outbox event")?;
    Ok(())
}

/// Commands of `event_types` that reached `max_attempts` without succeeding:
/// left for a person.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn count_stuck(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    event_types: &[&str],
    max_attempts: i32,
) -> Result<i64, StoreError> {
    super::query_scalar(&format!("SELECT count(*) FROM {table} WHERE processed_at IS NULL AND event_type = ANY($1) AND attempts >= $2", table = outbox.table.quoted()))
    .bind(event_types)
    .bind(max_attempts)
    .fetch_one(conn)
    .await
    .context("counting stuck commands")
}

/// Whether a repair command the worker will still apply (unprocessed, fewer
/// than `max_attempts` failures) refers to this finding. Debezium shape:
/// always `false`: no worker of ours will apply it (the relay's delivery is
/// invisible to us, and the application's writer is guarded by status).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn has_pending_repair(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    event_types: &[&str],
    finding_id: i64,
    max_attempts: i32,
) -> Result<bool, StoreError> {
    if outbox.shape == OutboxShape::Debezium {
        return Ok(false);
    }
    super::query_scalar(&format!(
        "SELECT EXISTS (SELECT 1 FROM {table}
                         WHERE processed_at IS NULL AND event_type = ANY($1) AND attempts < $3
                           AND payload->>'finding_id' = $2::text)",
        table = outbox.table.quoted()
    ))
    .bind(event_types)
    .bind(finding_id)
    .bind(max_attempts)
    .fetch_one(conn)
    .await
    .context("looking for a pending repair")
}

/// Closes the unprocessed repair commands of resolved findings, stuck ones
/// included (`processed_at` set, `last_error` says why), so no command
/// outlives its finding. A command a repair worker holds right now is
/// skipped (`SKIP LOCKED`, never a wait): that worker finds the finding
/// resolved and closes it as skipped itself. Debezium shape: nothing (the
/// relay may have delivered the command already; the application's writer
/// applies it only while the payment is still `pending`).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn close_for_findings(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    event_types: &[&str],
    finding_ids: &[i64],
    note: &str,
) -> Result<u64, StoreError> {
    if finding_ids.is_empty() || outbox.shape == OutboxShape::Debezium {
        return Ok(0);
    }
    let done = super::query(&format!(
        "UPDATE {table} SET processed_at = now(), last_error = $3
          WHERE id IN (SELECT id FROM {table}
                        WHERE processed_at IS NULL AND event_type = ANY($1)
                          AND payload->>'finding_id' = ANY($2::bigint[]::text[])
                        FOR UPDATE SKIP LOCKED)",
        table = outbox.table.quoted()
    ))
    .bind(event_types)
    .bind(finding_ids)
    .bind(note)
    .execute(conn)
    .await
    .context("closing the commands of resolved findings")?;
    Ok(done.rows_affected())
}
