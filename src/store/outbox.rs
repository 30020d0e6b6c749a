//! `outbox`: repair commands for the canonical writer. The table may be shared
//! with the application, so every query filters on `event_type`.

use sqlx::PgConnection;

use super::{Context, StoreError};

/// A repair command to enqueue for a newly created finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairRow {
    /// `payments.id` (the aggregate).
    pub payment_id: i64,
    /// The finding the command resolves.
    pub finding_id: i64,
    /// `ApplyPaymentSucceeded` or `ApplyPaymentCanceled`.
    pub command: &'static str,
    /// The local status the classification saw.
    pub expected_local_status: String,
}

/// Enqueues repair commands in one statement, with the design note's payload
/// `{"payment_id", "finding_id", "expected_local_status"}` and
/// `aggregate_type = 'Payment'`. Returns how many were enqueued.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn enqueue_repairs(
    conn: &mut PgConnection,
    rows: &[RepairRow],
) -> Result<u64, StoreError> {
    if rows.is_empty() {
        return Ok(0);
    }
    let payment_ids: Vec<i64> = rows.iter().map(|r| r.payment_id).collect();
    let finding_ids: Vec<i64> = rows.iter().map(|r| r.finding_id).collect();
    let commands: Vec<&str> = rows.iter().map(|r| r.command).collect();
    let expected: Vec<&str> = rows
        .iter()
        .map(|r| r.expected_local_status.as_str())
        .collect();
    let done = sqlx::query(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
         SELECT 'Payment', v.payment_id::text, v.command,
                jsonb_build_object('payment_id', v.payment_id, 'finding_id', v.finding_id,
                                   'expected_local_status', v.expected)
           FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[])
                AS v(payment_id, finding_id, command, expected)",
    )
    .bind(payment_ids)
    .bind(finding_ids)
    .bind(commands)
    .bind(expected)
    .execute(conn)
    .await
    .context("enqueueing repair commands")?;
    Ok(done.rows_affected())
}
