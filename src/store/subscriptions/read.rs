//! Reads of the subscriptions table: the batch after the cursor, in the
//! key's own order, and the rows naming given Stripe subscriptions (the
//! events job). Only the configured columns are read, each as the scan
//! compares it: words as text, instants as epoch seconds.

use std::time::Duration;

use sqlx::PgConnection;

use crate::facts::{SubscriptionTable, TimeColumn};
use crate::key::PaymentKey;
use crate::store::{Context, StoreError};

/// One row of the subscriptions table as the scan reads it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredSubscription {
    /// The row's key, as text.
    pub key: PaymentKey,
    /// The subscription id column (`sub_…`, or anything the application put there).
    pub stripe_id: Option<String>,
    /// The status word; `None` without a status column or for NULL.
    pub status: Option<String>,
    /// The period end, epoch seconds.
    pub period_end: Option<i64>,
    /// The ends-at, epoch seconds.
    pub ends_at: Option<i64>,
    /// The price id.
    pub price: Option<String>,
    /// The seats.
    pub quantity: Option<i64>,
    /// When the row was made, epoch seconds.
    pub created: Option<i64>,
    /// Changed less than the grace window ago.
    pub recently_changed: bool,
    /// The connected account (`acct_…`).
    pub account: Option<String>,
}

fn epoch_or_null(column: Option<&TimeColumn>) -> String {
    column.map_or_else(|| "NULL::bigint".to_owned(), |c| c.epoch("s"))
}

/// The select list of [`StoredSubscription`] over alias `s`; `$2` is the grace
/// window in seconds.
fn select_list(t: &SubscriptionTable) -> String {
    let text = |c: Option<&crate::facts::Column>| {
        c.map_or_else(
            || "NULL::text".to_owned(),
            |c| format!("s.{}::text", c.quoted),
        )
    };
    let recent = t.updated.as_ref().map_or_else(
        || "false".to_owned(),
        |u| {
            format!(
                "coalesce({} > floor(extract(epoch FROM now()))::bigint - $2::bigint, false)",
                u.epoch("s")
            )
        },
    );
    format!(
        "s.{key}::text AS key, {stripe_id} AS stripe_id, {status} AS status,
         {period_end} AS period_end, {ends_at} AS ends_at, {price} AS price,
         {quantity} AS quantity, {created} AS created, {recent} AS recently_changed,
         {account} AS account",
        key = t.key.quoted,
        stripe_id = text(Some(&t.stripe_id)),
        status = text(t.status.as_ref()),
        period_end = epoch_or_null(t.period_end.as_ref()),
        ends_at = epoch_or_null(t.ends_at.as_ref()),
        price = text(t.price.as_ref()),
        quantity = t.quantity.as_ref().map_or_else(
            || "NULL::bigint".to_owned(),
            |c| format!("s.{}::bigint", c.quoted)
        ),
        created = epoch_or_null(t.created.as_ref()),
        account = text(t.account.as_ref()),
    )
}

/// Reads up to `limit` rows after `after` (`None`: the cycle's start) in
/// the key's order, flagging those changed less than `grace` ago.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read_batch(
    conn: &mut PgConnection,
    table: &SubscriptionTable,
    after: Option<&PaymentKey>,
    limit: u32,
    grace: Duration,
) -> Result<Vec<StoredSubscription>, StoreError> {
    let sql = format!(
        "SELECT {list} FROM {table} s
          WHERE $1::text IS NULL OR s.{key} > $1::text::{key_type}
          ORDER BY s.{key}
          LIMIT $3",
        list = select_list(table),
        table = table.table,
        key = table.key.quoted,
        key_type = table.key.sql_type,
    );
    crate::store::query_as(&sql)
        .bind(after)
        .bind(grace_seconds(grace))
        .bind(i64::from(limit))
        .fetch_all(conn)
        .await
        .context("reading a batch of subscriptions")
}

/// The rows whose subscription id column holds one of `stripe_ids` (the
/// events job), flagged as [`read_batch`] does.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn rows_naming(
    conn: &mut PgConnection,
    table: &SubscriptionTable,
    stripe_ids: &[String],
    grace: Duration,
) -> Result<Vec<StoredSubscription>, StoreError> {
    if stripe_ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {list} FROM {table} s
          WHERE s.{col} = ANY($1::text[])
          ORDER BY s.{key}",
        list = select_list(table),
        table = table.table,
        col = table.stripe_id.quoted,
        key = table.key.quoted,
    );
    crate::store::query_as(&sql)
        .bind(stripe_ids)
        .bind(grace_seconds(grace))
        .fetch_all(conn)
        .await
        .context("reading the subscriptions the events name")
}

fn grace_seconds(grace: Duration) -> i64 {
    i64::try_from(grace.as_secs()).unwrap_or(i64::MAX)
}

/// The row `key`, locked `FOR UPDATE` (the canonical writer).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn rows_by_key(
    conn: &mut PgConnection,
    table: &SubscriptionTable,
    key: &PaymentKey,
) -> Result<Vec<StoredSubscription>, StoreError> {
    let sql = format!(
        "SELECT {list} FROM {table} s
          WHERE s.{key} = $1::text::{key_type}
          FOR UPDATE",
        list = select_list(table),
        table = table.table,
        key = table.key.quoted,
        key_type = table.key.sql_type,
    );
    crate::store::query_as(&sql)
        .bind(key)
        .bind(0_i64)
        .fetch_all(conn)
        .await
        .context("locking a subscription row")
}
