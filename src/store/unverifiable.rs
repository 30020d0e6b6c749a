//! `reconciliation_unverifiable`: rows Stripe could not answer for, counted
//! once per cycle, so a row that keeps failing gets a
//! `persistently_unverifiable` finding instead of failing silently forever.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{Context, StoreError};
use crate::key::{KeyType, PaymentKey};

/// A row that has failed in `cycles` consecutive cycles.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Unverifiable {
    /// `payments.id`
    pub payment_id: PaymentKey,
    /// Consecutive cycles in which Stripe could not answer for it.
    pub cycles: i32,
    /// The last error.
    pub last_error: Option<String>,
    /// When it first failed in this streak.
    pub first_failed_at: DateTime<Utc>,
}

/// Forgets the rows Stripe answered for (`answered`), and counts a failure
/// for each `failed[i]` with `errors[i]`: at most one per cycle of `job`'s
/// cursor (`cycle_started_at`), so retries within a cycle do not add up.
/// Returns the failed rows with their counts.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn record(
    conn: &mut PgConnection,
    (job, key): (&str, &KeyType),
    answered: &[PaymentKey],
    failed: &[PaymentKey],
    errors: &[Option<String>],
) -> Result<Vec<Unverifiable>, StoreError> {
    if !answered.is_empty() {
        let sql = format!(
            "DELETE FROM reconciliation_unverifiable WHERE job = $1 AND payment_id = ANY({})",
            key.cast_array("$2")
        );
        super::query(&sql)
            .bind(job)
            .bind(answered)
            .execute(&mut *conn)
            .await
            .context("forgetting answered rows")?;
    }
    if failed.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "INSERT INTO reconciliation_unverifiable AS u (job, payment_id, last_cycle, last_error)
         SELECT $1, v.payment_id, c.cycle_started_at, v.error
           FROM unnest({}, $3::text[]) AS v(payment_id, error)
           JOIN reconciliation_cursor c ON c.job = $1
          ORDER BY v.payment_id
         ON CONFLICT (job, payment_id) DO UPDATE
            SET cycles = u.cycles + CASE WHEN u.last_cycle < EXCLUDED.last_cycle THEN 1 ELSE 0 END,
                last_cycle = EXCLUDED.last_cycle,
                last_failed_at = now(),
                last_error = EXCLUDED.last_error
         RETURNING payment_id::text AS payment_id, cycles, last_error, first_failed_at",
        key.cast_array("$2")
    );
    super::query_as(&sql)
        .bind(job)
        .bind(failed)
        .bind(errors)
        .fetch_all(conn)
        .await
        .context("counting unverifiable rows")
}
