//! `payments`: the batch read by id cursor, the rows behind it never
//! confirmed, and the row locks of the lock order. Rows are mapped here, at
//! the database edge, into canonical terms: the application's status words
//! through `RECONCILER_LOCAL_STATUSES`, its amount column by
//! `RECONCILER_AMOUNT_UNIT`. Nothing here writes the application's rows
//! except [`transition_status`], the canonical writer's; what the scan
//! observes goes to `store::payment_state` (DESIGN.md, Turn 3 contract).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{Context, StoreError};
use crate::config::{AmountUnit, ColumnName, JobSettings, StatusMap};
use crate::reconcile::{LocalAmount, LocalStatus};

/// One row of a batch, as phase 1 reads it. Text columns are optional: an
/// application's own `payments` table may hold NULLs, which must become
/// findings, not a batch that fails forever.
#[derive(Debug, Clone)]
pub struct PaymentRow {
    /// `payments.id`
    pub id: i64,
    /// `payments.stripe_payment_intent_id`, untrusted.
    pub stripe_payment_intent_id: Option<String>,
    /// `payments.status` mapped through `RECONCILER_LOCAL_STATUSES`; a word
    /// the map lacks (or NULL, as `""`) is [`LocalStatus::Other`].
    pub status: LocalStatus,
    /// `payments.version` when read; phase 3 writes nothing for a row whose
    /// version or `updated_at` changed meanwhile.
    pub version: i64,
    /// `payments.updated_at` when read.
    pub updated_at: DateTime<Utc>,
    /// `payments.created_at`: list reads look for the row's PaymentIntent in
    /// the batch's `created_at` window.
    pub created_at: DateTime<Utc>,
    /// `updated_at` falls within the grace window.
    pub recently_changed: bool,
    /// The amount column (`RECONCILER_AMOUNT_COLUMN`) in the unit of
    /// `RECONCILER_AMOUNT_UNIT`; `None` when not configured or NULL.
    pub amount: Option<LocalAmount>,
    /// The currency column (`RECONCILER_CURRENCY_COLUMN`); `None` when not
    /// configured or NULL.
    pub currency: Option<String>,
    /// Another row holds the same `stripe_payment_intent_id` (found with an
    /// index lookup per row, never a table scan: `migrate` makes sure an index
    /// on the column exists).
    pub shares_payment_intent: bool,
}

/// A row as the database returns it, before the mapping into canonical terms.
#[derive(sqlx::FromRow)]
struct RawRow {
    id: i64,
    stripe_payment_intent_id: Option<String>,
    status: Option<String>,
    version: i64,
    updated_at: DateTime<Utc>,
    created_at: DateTime<Utc>,
    recently_changed: bool,
    /// Minor units (`RECONCILER_AMOUNT_UNIT=minor`).
    amount: Option<i64>,
    /// The numeric's exact decimal text (`major`).
    amount_major: Option<String>,
    currency: Option<String>,
    shares_payment_intent: bool,
}

impl RawRow {
    fn map(self, statuses: &StatusMap) -> PaymentRow {
        PaymentRow {
            id: self.id,
            stripe_payment_intent_id: self.stripe_payment_intent_id,
            status: statuses.local(self.status.as_deref().unwrap_or("")),
            version: self.version,
            updated_at: self.updated_at,
            created_at: self.created_at,
            recently_changed: self.recently_changed,
            amount: self
                .amount
                .map(LocalAmount::Minor)
                .or(self.amount_major.map(LocalAmount::Major)),
            currency: self.currency,
            shares_payment_intent: self.shares_payment_intent,
        }
    }
}

/// How a batch reads `payments`: the optional columns beside the seed's
/// (validated at start, [`check_columns`]), the amount's unit and the
/// status words.
#[derive(Debug, Clone, Copy)]
pub struct MoneyColumns<'a> {
    /// `RECONCILER_AMOUNT_COLUMN`.
    pub amount: Option<&'a ColumnName>,
    /// `RECONCILER_CURRENCY_COLUMN`.
    pub currency: Option<&'a ColumnName>,
    /// `RECONCILER_AMOUNT_UNIT`.
    pub unit: AmountUnit,
    /// `RECONCILER_LOCAL_STATUSES`.
    pub statuses: &'a StatusMap,
}

impl<'a> MoneyColumns<'a> {
    /// The columns, unit and words of `settings`.
    pub fn of(settings: &'a JobSettings) -> Self {
        MoneyColumns {
            amount: settings.amount_column.as_ref(),
            currency: settings.currency_column.as_ref(),
            unit: settings.amount_unit,
            statuses: &settings.statuses,
        }
    }

    fn map(&self, rows: Vec<RawRow>) -> Vec<PaymentRow> {
        rows.into_iter().map(|r| r.map(self.statuses)).collect()
    }
}

impl MoneyColumns<'_> {
    /// The batch query (`$1` after id, `$2` grace seconds, `$3` limit) or,
    /// with `behind`, the query of rows behind the cursor never confirmed
    /// (`$4` job, `$5` ids left out, `$6` late-commit id window). Column names enter the SQL only as validated,
    /// double-quoted identifiers ([`ColumnName::quoted`]).
    fn batch_sql(&self, behind: bool) -> String {
        format!(
            "SELECT {}
               FROM payments p
              WHERE {where_clause}
              ORDER BY p.id
              LIMIT $3",
            self.row_columns(),
            where_clause = if behind { BEHIND_CURSOR } else { "p.id > $1" }
        )
    }

    /// The columns of a [`RawRow`] of `payments p` (`$2` grace seconds):
    /// the seed's, the grace flag, the money columns (NULL when not
    /// configured; a major amount as the numeric's exact text, never a
    /// float) and the shared-PaymentIntent flag (an index probe).
    fn row_columns(&self) -> String {
        let column = |c: Option<&ColumnName>| {
            c.map_or_else(|| "NULL".to_owned(), |c| format!("p.{}", c.quoted()))
        };
        let (minor, major) = match self.unit {
            AmountUnit::Minor => (column(self.amount), "NULL".to_owned()),
            AmountUnit::Major => ("NULL".to_owned(), column(self.amount)),
        };
        format!(
            "p.id, p.stripe_payment_intent_id, p.status, p.version, p.updated_at, p.created_at,
             p.updated_at > now() - make_interval(secs => $2) AS recently_changed,
             ({minor})::bigint AS amount, ({major})::text AS amount_major,
             ({})::text AS currency,
             EXISTS (SELECT 1 FROM payments q
                      WHERE q.stripe_payment_intent_id = p.stripe_payment_intent_id
                        AND q.id <> p.id) AS shares_payment_intent",
            column(self.currency)
        )
    }
}

/// Rows behind the cursor (`id <= $1`) never confirmed with Stripe, out of
/// the grace window, and not already counted UNVERIFIABLE in this cycle (a
/// row that keeps failing waits for the next cycle, governed by
/// `persistently_unverifiable`, instead of being retried every batch). Two
/// sources, both bounded: rows seen but never confirmed (one range lookup on
/// the partial index `reconciliation_payment_state_unconfirmed`), and rows
/// never seen at all with ids above `$6`, a window below the highest seen id (late
/// commits near the head of the table: an anti-join on primary keys over a
/// bounded id range).
const BEHIND_CURSOR: &str = "p.id <= $1
                AND p.id IN (SELECT s.payment_id FROM reconciliation_payment_state s
                              WHERE s.last_reconciled_at IS NULL AND s.payment_id <= $1
                             UNION ALL
                             SELECT q.id FROM payments q
                              WHERE q.id <= $1
                                AND q.id > $6
                                AND NOT EXISTS (SELECT 1 FROM reconciliation_payment_state s
                                                 WHERE s.payment_id = q.id))
                AND p.updated_at <= now() - make_interval(secs => $2)
                AND NOT EXISTS (SELECT 1 FROM reconciliation_unverifiable u
                                  JOIN reconciliation_cursor c ON c.job = u.job
                                 WHERE u.job = $4 AND u.payment_id = p.id
                                   AND u.last_cycle = c.cycle_started_at)
                AND NOT (p.id = ANY($5))";

/// How many ids below the highest seen id [`read_behind_cursor`] looks for
/// rows never seen, per row it may return: with a tenth of a batch behind the
/// cursor, ten batches' worth of ids. A transaction that commits later than
/// that after taking its id is read by the next cycle's cursor.
const LATE_COMMIT_IDS_PER_ROW: i64 = 100;

/// Why a configured column cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ColumnError {
    /// No such column in `payments`.
    #[error("{var}: payments has no column {column:?} (names are matched exactly, case included)")]
    Missing {
        /// The variable naming the column.
        var: &'static str,
        /// The name.
        column: String,
    },
    /// The column's type cannot hold what is compared.
    #[error("{var}: column {column:?} is {found}, expected {expected}")]
    WrongType {
        /// The variable naming the column.
        var: &'static str,
        /// The name.
        column: String,
        /// The column's type.
        found: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// The catalog could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

const INTEGER_TYPES: [&str; 3] = ["smallint", "integer", "bigint"];

/// Checks that the configured columns exist in `payments` with usable types:
/// the amount an integer type (`smallint`, `integer`, `bigint`) in `minor`
/// units, `numeric` in `major` units (`RECONCILER_AMOUNT_UNIT`), the
/// currency a text type (`text`, `character varying`, `character`). An
/// integer column with `major` is refused under `RECONCILER_AMOUNT_UNIT`: an
/// integer holds minor units, and reading it as major would multiply every
/// amount by 100.
///
/// # Errors
/// [`ColumnError`]: `Missing` and `WrongType` name the variable (exit 78).
pub async fn check_columns(
    conn: &mut PgConnection,
    columns: MoneyColumns<'_>,
) -> Result<(), ColumnError> {
    let amount = match columns.unit {
        AmountUnit::Minor => (
            "RECONCILER_AMOUNT_COLUMN",
            &INTEGER_TYPES[..],
            "an integer type (minor units, 1200 for 12.00); for a numeric column of major units set RECONCILER_AMOUNT_UNIT=major",
        ),
        AmountUnit::Major => (
            "RECONCILER_AMOUNT_COLUMN",
            &["numeric"][..],
            "numeric (RECONCILER_AMOUNT_UNIT=major: major units, 12.00 for 1200 cents; floating point cannot hold money exactly)",
        ),
    };
    let checks = [
        (amount.0, columns.amount, amount.1, amount.2),
        (
            "RECONCILER_CURRENCY_COLUMN",
            columns.currency,
            &["text", "character varying", "character"][..],
            "a text type (ISO currency code)",
        ),
    ];
    for (var, column, accepted, expected) in checks {
        let Some(column) = column else { continue };
        let found: Option<String> = super::query_scalar(
            "SELECT format_type(a.atttypid, NULL) FROM pg_attribute a
              WHERE a.attrelid = 'payments'::regclass AND a.attname = $1
                AND a.attnum > 0 AND NOT a.attisdropped",
        )
        .bind(column.as_str())
        .fetch_optional(&mut *conn)
        .await
        .context("reading the columns of payments")?;
        match found {
            None => {
                return Err(ColumnError::Missing {
                    var,
                    column: column.as_str().to_owned(),
                })
            }
            Some(t)
                if columns.unit == AmountUnit::Major
                    && var == "RECONCILER_AMOUNT_COLUMN"
                    && INTEGER_TYPES.contains(&t.as_str()) =>
            {
                return Err(ColumnError::WrongType {
                    var: "RECONCILER_AMOUNT_UNIT",
                    column: column.as_str().to_owned(),
                    found: t,
                    expected: "numeric for major: an integer column holds minor units (1200 for 12.00), so leave RECONCILER_AMOUNT_UNIT at minor",
                })
            }
            Some(t) if !accepted.contains(&t.as_str()) => {
                return Err(ColumnError::WrongType {
                    var,
                    column: column.as_str().to_owned(),
                    found: t,
                    expected,
                })
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Reads up to `limit` rows with `id > after_id` in id order, flagging those
/// updated less than `grace` ago and those sharing their PaymentIntent id,
/// with the configured money columns.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read_batch(
    conn: &mut PgConnection,
    after_id: i64,
    limit: u32,
    grace: Duration,
    columns: MoneyColumns<'_>,
) -> Result<Vec<PaymentRow>, StoreError> {
    let rows: Vec<RawRow> = super::query_as(&columns.batch_sql(false))
        .bind(after_id)
        .bind(grace.as_secs_f64())
        .bind(i64::from(limit))
        .fetch_all(conn)
        .await
        .context("reading the batch")?;
    Ok(columns.map(rows))
}

/// Reads up to `limit` rows behind the cursor (`id <= cursor`) that were
/// never confirmed with Stripe: committed after the cursor passed their id
/// (sequence order is not commit order; found within
/// `limit` × [`LATE_COMMIT_IDS_PER_ROW`] ids of the highest seen id), or in
/// the grace window or UNVERIFIABLE when it passed. Rows counted UNVERIFIABLE in `job`'s current cycle are left out,
/// and so are the ids of `excluded` (the rows of a batch still being read or
/// committed, whose cursor move is not yet visible).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read_behind_cursor(
    conn: &mut PgConnection,
    job: &str,
    cursor: i64,
    limit: u32,
    grace: Duration,
    columns: MoneyColumns<'_>,
    excluded: &[i64],
) -> Result<Vec<PaymentRow>, StoreError> {
    let window_from = super::payment_state::highest_seen(&mut *conn).await?
        - i64::from(limit) * LATE_COMMIT_IDS_PER_ROW;
    let rows: Vec<RawRow> = super::query_as(&columns.batch_sql(true))
        .bind(cursor)
        .bind(grace.as_secs_f64())
        .bind(i64::from(limit))
        .bind(job)
        .bind(excluded)
        .bind(window_from)
        .fetch_all(conn)
        .await
        .context("reading rows behind the cursor")?;
    Ok(columns.map(rows))
}

/// Locks, in id order, the rows of `(ids[i], versions[i], updated_ats[i])`
/// that are unchanged since phase 1 and returns their ids. Rows that changed
/// (a webhook moved them while Stripe was being asked) are neither locked nor
/// returned: the caller writes nothing for them. Locking in id order, and
/// payments before findings everywhere, keeps concurrent batches and the
/// repair worker from deadlocking. `FOR NO KEY UPDATE`, so the application
/// can still insert rows that reference `payments` meanwhile.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn lock_unchanged(
    conn: &mut PgConnection,
    ids: &[i64],
    versions: &[i64],
    updated_ats: &[DateTime<Utc>],
) -> Result<Vec<i64>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    super::query_scalar(
        "SELECT p.id FROM payments AS p
           JOIN unnest($1::bigint[], $2::bigint[], $3::timestamptz[]) AS v(id, version, updated_at)
             ON p.id = v.id
          WHERE p.version = v.version AND p.updated_at = v.updated_at
          ORDER BY p.id
          FOR NO KEY UPDATE OF p",
    )
    .bind(ids)
    .bind(versions)
    .bind(updated_ats)
    .fetch_all(conn)
    .await
    .context("locking the batch's payments")
}

/// What a guarded status transition found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransitionResult {
    /// The row held a word of `from` and now holds `to`; `version` is the new version.
    Changed {
        /// `payments.version` after the update.
        version: i64,
    },
    /// The row exists but held no word of `from` (e.g. the webhook got there
    /// first): nothing was changed.
    AlreadyMoved {
        /// The status word it has (NULL as `""`).
        status: String,
    },
    /// No payment has this id.
    Missing,
}

/// The guarded status UPDATE of the canonical writer: to the word `to`
/// with `version + 1` and `updated_at = now()`, only when the row holds one
/// of the words `from` (every word of the source state,
/// `RECONCILER_LOCAL_STATUSES`). Only `repair::writer` may call this: it is
/// the one path that changes `payments.status`.
///
/// # Errors
/// [`StoreError`] from the database.
pub(crate) async fn transition_status(
    conn: &mut PgConnection,
    payment_id: i64,
    from: &[String],
    to: &str,
) -> Result<TransitionResult, StoreError> {
    let version: Option<i64> = super::query_scalar(
        "UPDATE payments SET status = $3, version = version + 1, updated_at = now()
          WHERE id = $1 AND status = ANY($2)
          RETURNING version",
    )
    .bind(payment_id)
    .bind(from)
    .bind(to)
    .fetch_optional(&mut *conn)
    .await
    .context("changing the payment status")?;
    if let Some(version) = version {
        return Ok(TransitionResult::Changed { version });
    }
    let status: Option<String> =
        super::query_scalar("SELECT coalesce(status, '') FROM payments WHERE id = $1")
            .bind(payment_id)
            .fetch_optional(conn)
            .await
            .context("reading the payment status")?;
    Ok(status.map_or(TransitionResult::Missing, |status| {
        TransitionResult::AlreadyMoved { status }
    }))
}

/// Locks the payment a finding is about (`FOR NO KEY UPDATE`), before the
/// finding itself is touched: payment before finding, the one lock order of
/// every writer. Returns the payment's id; `None` when the finding or its
/// payment does not exist.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn lock_for_finding(
    conn: &mut PgConnection,
    finding_id: i64,
) -> Result<Option<i64>, StoreError> {
    super::query_scalar(
        "SELECT p.id FROM payments p
           JOIN reconciliation_findings f ON f.payment_id = p.id
          WHERE f.id = $1
            FOR NO KEY UPDATE OF p",
    )
    .bind(finding_id)
    .fetch_optional(conn)
    .await
    .context("locking the payment of a finding")
}

/// The payment as the repair worker checks it, locked (`FOR NO KEY UPDATE`)
/// until the worker's transaction ends.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PaymentForRepair {
    /// `payments.status`
    pub status: Option<String>,
    /// `payments.stripe_payment_intent_id`
    pub stripe_payment_intent_id: Option<String>,
}

/// Locks one payment for the repair worker, before its finding; `None` when
/// it does not exist.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn lock_for_repair(
    conn: &mut PgConnection,
    payment_id: i64,
) -> Result<Option<PaymentForRepair>, StoreError> {
    super::query_as(
        "SELECT status, stripe_payment_intent_id FROM payments WHERE id = $1 FOR NO KEY UPDATE",
    )
    .bind(payment_id)
    .fetch_optional(conn)
    .await
    .context("locking a payment for repair")
}

/// A PaymentIntent id this job once verified with Stripe (its state row has
/// an observed status), used to tell a wrong key from genuinely missing
/// PaymentIntents. `None` on a new install.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn a_verified_payment_intent(pool: &sqlx::PgPool) -> Result<Option<String>, StoreError> {
    super::query_scalar(
        "SELECT p.stripe_payment_intent_id FROM reconciliation_payment_state s
           JOIN payments p ON p.id = s.payment_id
          WHERE s.observed_external_status IS NOT NULL LIMIT 1",
    )
    .fetch_optional(pool)
    .await
    .context("looking up a verified PaymentIntent")
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
    /// The lookup of rows by PaymentIntent id (`$1` ids, `$2` grace seconds):
    /// one index probe per id on `payments (stripe_payment_intent_id)`, and
    /// one primary-key probe for the row's state.
    fn by_intent_sql(&self) -> String {
        format!(
            "SELECT {}, s.last_reconciled_at, s.observed_external_status
               FROM payments p
               LEFT JOIN reconciliation_payment_state s ON s.payment_id = p.id
              WHERE p.stripe_payment_intent_id = ANY($1)
              ORDER BY p.id",
            self.row_columns()
        )
    }
}

/// The rows holding any of these PaymentIntent ids (several per id when the
/// id is shared), in id order, flagged like a batch's rows.
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
    let rows: Vec<RawByIntent> = super::query_as(&columns.by_intent_sql())
        .bind(intents)
        .bind(grace.as_secs_f64())
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
