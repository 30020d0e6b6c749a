//! Reads of `payments`: the batch after the cursor's position, the rows behind the cursor
//! never confirmed, and the rows of PaymentIntents the events feed names.

use super::*;
use crate::key::Position;
use crate::store::text::decode;

/// Reads up to `limit` rows after `after` (`None`: from the start of the
/// cycle) in the walk's order (docs/keys.md), flagging those updated less
/// than `grace` ago and those sharing their PaymentIntent id, with the
/// configured money columns. With each row, its `created_at` in the walk's
/// order: the row's own, or in a walk of the reconciler's own copy its state
/// row's ([`KeyType::own_copy`]).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read_batch(
    conn: &mut PgConnection,
    after: Option<&Position>,
    limit: u32,
    grace: Duration,
    columns: MoneyColumns<'_>,
) -> Result<Vec<(PaymentRow, DateTime<Utc>)>, StoreError> {
    // A position left by the other walk (a `created_at` only in a
    // `(created_at, id)` walk: the read mode or the index changed, or an
    // older release walked by key) is no place in this walk's order: the
    // walk starts again from the cycle's start rather than read nothing and
    // end the cycle (docs/keys.md, "The walk").
    let by_created = columns.key.walk() == crate::key::Walk::CreatedAt;
    let after = after.filter(|p| p.created_at.is_some() == by_created);
    let sql = columns.batch_sql(after.is_none());
    let query = crate::store::query_as(&sql)
        .bind(after.map(|p| &p.key))
        .bind(grace.as_secs_f64())
        .bind(i64::from(limit))
        .bind(after.and_then(|p| p.created_at));
    let rows: Vec<RawRow> = match columns.partition {
        Some(p) => query.bind(p.value.as_str()),
        None => query,
    }
    .fetch_all(conn)
    .await
    .context("reading the batch")?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let walked = r.walk_created_at.unwrap_or(r.created_at);
            (r.map(columns.statuses), walked)
        })
        .collect())
}

/// A PaymentIntent id this job (its partition, when one is set) once verified with Stripe (its state row has
/// an observed status; a row judged by its Checkout Session without a
/// PaymentIntent id yet is not one), used to tell a wrong key from genuinely missing
/// PaymentIntents. `None` on a new install.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn a_verified_payment_intent(
    pool: &sqlx::PgPool,
    partition: Option<&Partition>,
) -> Result<Option<String>, StoreError> {
    // Within the partition: another partition's PaymentIntent belongs to
    // another Stripe account, which this job's key cannot see.
    let sql = format!(
        "SELECT p.stripe_payment_intent_id FROM reconciliation_payment_state s
           JOIN payments p ON p.id = s.payment_id
          WHERE s.observed_external_status IS NOT NULL
            AND p.stripe_payment_intent_id LIKE 'pi\\_%'{} LIMIT 1",
        partition_condition(partition, "p", 1)
    );
    // In a transaction (pooler-safe: docs/schema.md); a read, rolled back on drop.
    let mut tx = crate::store::begin(pool)
        .await
        .context("opening a transaction")?;
    let query = crate::store::query_scalar(&sql);
    match partition {
        Some(p) => query.bind(p.value.as_str()),
        None => query,
    }
    .fetch_optional(&mut *tx)
    .await
    .context("looking up a verified PaymentIntent")
}

/// A PaymentIntent of the connected account `account` (the rows whose
/// `account_column` holds it; `None`: the platform's rows, NULL or empty)
/// (within the job's partition, when one is set) that this job once
/// verified with Stripe: the per-account form of [`a_verified_payment_intent`], telling a connected
/// account the platform cannot read from genuinely missing PaymentIntents.
/// The column name enters the SQL only quoted ([`ColumnName::quoted`]); the
/// account is a bound parameter.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn a_verified_payment_intent_on(
    pool: &sqlx::PgPool,
    account_column: &ColumnName,
    account: Option<&str>,
    partition: Option<&Partition>,
) -> Result<Option<String>, StoreError> {
    let sql = format!(
        "SELECT p.stripe_payment_intent_id FROM reconciliation_payment_state s
           JOIN payments p ON p.id = s.payment_id
          WHERE s.observed_external_status IS NOT NULL
            AND p.stripe_payment_intent_id LIKE 'pi\\_%'
            AND coalesce((p.{})::text, '') = coalesce($1, ''){} LIMIT 1",
        account_column.quoted(),
        partition_condition(partition, "p", 2)
    );
    let mut tx = crate::store::begin(pool)
        .await
        .context("opening a transaction")?;
    let query = crate::store::query_scalar(&sql).bind(account);
    match partition {
        Some(p) => query.bind(p.value.as_str()),
        None => query,
    }
    .fetch_optional(&mut *tx)
    .await
    .context("looking up a verified PaymentIntent of a connected account")
}

/// A row the events feed found by its PaymentIntent id, with what the job
/// last confirmed about it.
#[derive(Debug, Clone)]
pub struct PaymentByIntent {
    /// The row as a batch reads it.
    pub row: PaymentRow,
    /// When Stripe last confirmed this row (a retrieve by the scan or the
    /// events job); `None`: never.
    pub last_reconciled_at: Option<DateTime<Utc>>,
    /// The status Stripe gave then.
    pub observed_external_status: Option<String>,
}

#[derive(sqlx::FromRow)]
struct RawByIntent {
    #[sqlx(flatten)]
    row: RawRow,
    last_reconciled_at: Option<DateTime<Utc>>,
    observed_external_status: Option<String>,
}

impl MoneyColumns<'_> {
    /// The lookup of rows by PaymentIntent id (`$1` ids, `$2` grace seconds,
    /// `$3` the partition's value): one index probe per id on `payments
    /// (stripe_payment_intent_id)`, and one primary-key probe for the row's
    /// state.
    fn by_intent_sql(&self) -> String {
        format!(
            "SELECT {}, s.last_reconciled_at, s.observed_external_status
               FROM payments p
               LEFT JOIN reconciliation_payment_state s ON s.payment_id = p.id
              WHERE p.stripe_payment_intent_id = ANY($1){}
              ORDER BY p.id",
            self.row_columns(),
            self.partition_sql(3)
        )
    }
}

/// The rows holding any of these PaymentIntent ids (several per id when the
/// id is shared), in id order, flagged like a batch's rows; with a partition,
/// only the partition's rows (see [`held_elsewhere`] for the others).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn by_payment_intents(
    conn: &mut PgConnection,
    intents: &[&str],
    grace: Duration,
    columns: MoneyColumns<'_>,
) -> Result<Vec<PaymentByIntent>, StoreError> {
    if intents.is_empty() {
        return Ok(Vec::new());
    }
    let sql = columns.by_intent_sql();
    let query = crate::store::query_as(&sql)
        .bind(intents)
        .bind(grace.as_secs_f64());
    let rows: Vec<RawByIntent> = match columns.partition {
        Some(p) => query.bind(p.value.as_str()),
        None => query,
    }
    .fetch_all(conn)
    .await
    .context("looking up payments by PaymentIntent id")?;
    Ok(rows
        .into_iter()
        .map(|r| PaymentByIntent {
            row: r.row.map(columns.statuses),
            last_reconciled_at: r.last_reconciled_at,
            observed_external_status: r.observed_external_status,
        })
        .collect())
}

/// The rows whose Checkout Session column (`columns.checkout_session`,
/// `RECONCILER_CHECKOUT_SESSION_COLUMN`) holds any of `sessions`, in id
/// order, flagged like a batch's rows (`$2` grace); with a partition, only
/// the partition's rows. Empty without the column. One probe per id when
/// the application indexes the column (docs/checkout-sessions.md), else a
/// scan of `payments`.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn by_checkout_sessions(
    conn: &mut PgConnection,
    sessions: &[&str],
    grace: Duration,
    columns: MoneyColumns<'_>,
) -> Result<Vec<PaymentRow>, StoreError> {
    let Some(column) = columns.checkout_session.filter(|_| !sessions.is_empty()) else {
        return Ok(Vec::new());
    };
    let sql = format!(
        "SELECT {} FROM payments p
          WHERE (p.{})::text = ANY($1){}
          ORDER BY p.id",
        columns.row_columns(),
        column.quoted(),
        columns.partition_sql(3)
    );
    let query = crate::store::query_as(&sql)
        .bind(sessions)
        .bind(grace.as_secs_f64());
    let rows: Vec<RawRow> = match columns.partition {
        Some(p) => query.bind(p.value.as_str()),
        None => query,
    }
    .fetch_all(conn)
    .await
    .context("looking up payments by Checkout Session id")?;
    Ok(columns.map(rows))
}

/// Of these PaymentIntent ids, those held by a row outside `partition` (a
/// row whose partition column is another value, or NULL): another job's
/// rows, neither this job's to re-read nor orphans (`missing_locally`). Empty
/// without a partition. One index probe per id on `payments
/// (stripe_payment_intent_id)`.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn held_elsewhere(
    conn: &mut PgConnection,
    intents: &[&str],
    partition: Option<&Partition>,
) -> Result<Vec<String>, StoreError> {
    let Some(partition) = partition.filter(|_| !intents.is_empty()) else {
        return Ok(Vec::new());
    };
    let sql = format!(
        "SELECT DISTINCT p.stripe_payment_intent_id FROM payments p
          WHERE p.stripe_payment_intent_id = ANY($1)
            AND ({}) IS NOT TRUE",
        partition.condition("p", 2)
    );
    crate::store::query_scalar(&sql)
        .bind(intents)
        .bind(partition.value.as_str())
        .fetch_all(conn)
        .await
        .context("looking up PaymentIntents of other partitions")
}

/// The distinct non-empty values of the account column (`column`,
/// `RECONCILER_ACCOUNT_COLUMN`) among rows created or updated within
/// `active` (`RECONCILER_EVENTS_ACCOUNT_ACTIVE_SECONDS`): the connected
/// accounts whose events feeds the events job reads; with a partition, among
/// the partition's rows only. At most `limit` values, untrusted (the caller
/// parses them as `acct_` ids; a stray byte reads as `\xNN`, which no id
/// holds, [`crate::store::text`]).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn active_accounts(
    conn: &mut PgConnection,
    column: &ColumnName,
    active: Duration,
    limit: usize,
    partition: Option<&Partition>,
    times: &PaymentTimes,
) -> Result<Vec<String>, StoreError> {
    let c = format!("p.{}", column.quoted());
    let (updated, created) = (times.updated("p"), times.created("p"));
    let sql = format!(
        "SELECT DISTINCT {} FROM payments p
          WHERE ({c}) IS NOT NULL AND ({c})::text <> ''
            AND ({updated} > now() - make_interval(secs => $1)
                 OR {created} > now() - make_interval(secs => $1)){}
          ORDER BY 1 LIMIT $2",
        bytes_sql(&c),
        partition_condition(partition, "p", 3)
    );
    let query = crate::store::query_scalar::<Vec<u8>>(&sql)
        .bind(active.as_secs_f64())
        .bind(i64::try_from(limit).unwrap_or(i64::MAX));
    match partition {
        Some(p) => query.bind(p.value.as_str()),
        None => query,
    }
    .fetch_all(conn)
    .await
    .context("listing the connected accounts with recent rows")
    .map(|accounts| accounts.iter().map(|a| decode(a)).collect())
}
