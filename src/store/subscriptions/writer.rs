//! The canonical writer's statements for a subscription row
//! (docs/findings.md, "Subscription repairs"): the row locked, then one
//! compare-and-set UPDATE of the configured columns only, guarded by the
//! values the scan saw.

use sqlx::PgConnection;

use super::read::StoredSubscription;
use crate::facts::{SubscriptionTable, TimeColumn};
use crate::key::PaymentKey;
use crate::store::{Context, StoreError};

/// The values of the writable columns: the status word, the period end and
/// the ends-at (epoch seconds). A column not configured is ignored; a
/// field that is `None` in [`Written::columns`] is not written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Values {
    /// The status word.
    pub status: Option<String>,
    /// The period end.
    pub period_end: Option<i64>,
    /// The ends-at (`None`: NULL, the subscription renews).
    pub ends_at: Option<i64>,
}

/// Which of [`Values`]' fields a command carries (and so compares and writes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Carried {
    /// The status.
    pub status: bool,
    /// The period end.
    pub period_end: bool,
    /// The ends-at.
    pub ends_at: bool,
}

/// A compare-and-set: the row `key` still holds `expected`, and gets `apply`.
#[derive(Debug, Clone, Copy)]
pub struct Written<'a> {
    /// The row.
    pub key: &'a PaymentKey,
    /// The fields carried.
    pub columns: Carried,
    /// What the scan saw.
    pub expected: &'a Values,
    /// Stripe's values.
    pub apply: &'a Values,
}

/// Locks the row `key` (`FOR UPDATE`) and reads it as the scan does;
/// `None` when the application deleted it.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn lock(
    conn: &mut PgConnection,
    table: &SubscriptionTable,
    key: &PaymentKey,
) -> Result<Option<StoredSubscription>, StoreError> {
    let rows = super::read::rows_by_key(&mut *conn, table, key).await?;
    Ok(rows.into_iter().next())
}

/// Applies `w` as one compare-and-set UPDATE of the configured, carried
/// columns (and the updated column, now, when configured). `true` when the
/// row changed; `false` when it no longer holds the expected values.
///
/// # Errors
/// [`StoreError`] from the database (a refused write included).
pub async fn apply(
    conn: &mut PgConnection,
    table: &SubscriptionTable,
    w: Written<'_>,
) -> Result<bool, StoreError> {
    let mut set = Vec::new();
    let mut guard = vec![format!(
        "s.{} = $1::text::{}",
        table.key.quoted, table.key.sql_type
    )];
    if let (Some(c), true) = (&table.status, w.columns.status) {
        set.push(format!("{} = $2::text::{}", c.quoted, c.sql_type));
        guard.push(format!(
            "s.{}::text IS NOT DISTINCT FROM $5::text",
            c.quoted
        ));
    }
    let times = [
        (table.period_end.as_ref(), w.columns.period_end, "$3", "$6"),
        (table.ends_at.as_ref(), w.columns.ends_at, "$4", "$7"),
    ];
    for (column, carried, new, old) in times {
        if let (Some(c), true) = (column, carried) {
            set.push(format!("{} = {}", c.column.quoted, c.from_epoch(new)));
            guard.push(format!(
                "{} IS NOT DISTINCT FROM {old}::bigint",
                c.epoch("s")
            ));
        }
    }
    if set.is_empty() {
        return Ok(false);
    }
    if let Some(u) = &table.updated {
        set.push(touch(u));
    }
    let sql = format!(
        "UPDATE {table} s SET {set} WHERE {guard}",
        table = table.table,
        set = set.join(", "),
        guard = guard.join(" AND "),
    );
    let done = crate::store::query(&sql)
        .bind(w.key)
        .bind(w.apply.status.as_deref())
        .bind(w.apply.period_end)
        .bind(w.apply.ends_at)
        .bind(w.expected.status.as_deref())
        .bind(w.expected.period_end)
        .bind(w.expected.ends_at)
        .execute(conn)
        .await
        .context("applying a subscription's state")?;
    Ok(done.rows_affected() == 1)
}

fn touch(updated: &TimeColumn) -> String {
    format!(
        "{} = {}",
        updated.column.quoted,
        updated.from_epoch("floor(extract(epoch FROM now()))")
    )
}

/// One of a command's findings, locked.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CommandFinding {
    /// `reconciliation_findings.id`.
    pub id: i64,
    /// The row it names.
    pub key: Option<PaymentKey>,
    /// Its kind.
    pub kind: String,
    /// Not resolved yet.
    pub open: bool,
}

/// Locks the findings `ids` (`FOR UPDATE`, after the row: the one lock
/// order, row then findings).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn lock_findings(
    conn: &mut PgConnection,
    ids: &[i64],
) -> Result<Vec<CommandFinding>, StoreError> {
    crate::store::query_as(
        "SELECT id, subscription_id AS key, kind, resolved_at IS NULL AS open
           FROM reconciliation_findings WHERE id = ANY($1) ORDER BY id FOR UPDATE",
    )
    .bind(ids)
    .fetch_all(conn)
    .await
    .context("locking a subscription repair's findings")
}

/// Resolves the open findings `ids` with `resolution`.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn resolve(
    conn: &mut PgConnection,
    ids: &[i64],
    resolution: crate::reconcile::Resolution,
) -> Result<u64, StoreError> {
    let done = crate::store::query(
        "UPDATE reconciliation_findings SET resolved_at = now(), resolution = $2
          WHERE id = ANY($1) AND resolved_at IS NULL",
    )
    .bind(ids)
    .bind(resolution.as_str())
    .execute(conn)
    .await
    .context("resolving a subscription repair's findings")?;
    Ok(done.rows_affected())
}
