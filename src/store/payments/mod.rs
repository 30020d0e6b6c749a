//! `payments`: the batch read by id cursor, the rows behind it never
//! confirmed, and the row locks of the lock order. Rows are mapped here, at
//! the database edge, into canonical terms: the application's status words
//! through `RECONCILER_LOCAL_STATUSES`, its amount column by
//! `RECONCILER_AMOUNT_UNIT`. Nothing here writes the application's rows
//! except [`transition_status`], the canonical writer's; what the scan
//! observes goes to `store::payment_state` (docs/schema.md, "The reconciler's own state").
//!
//! - `columns`: the start-up check of the configured columns (ids, amount,
//!   currency) against the table's catalogue.
//! - `read`: the batch read by id cursor, the lookup by PaymentIntent id
//!   for the events feed.
//! - `behind`: the rows behind the cursor never confirmed, a bounded sweep.
//! - `locks`: the row locks of the one lock order, and the canonical
//!   writer's guarded status UPDATE.

mod behind;
mod columns;
mod locks;
mod read;

pub use behind::{read_behind_cursor, Behind, BehindRows};
pub use columns::{check_columns, check_partition, time_columns, ColumnError};
pub(crate) use locks::{fill_payment_intent, transition_status};
pub use locks::{lock_for_repair, lock_unchanged, PaymentForRepair, TransitionResult};
pub use read::{
    a_verified_payment_intent, a_verified_payment_intent_on, active_accounts, by_checkout_sessions,
    by_payment_intents, held_elsewhere, read_batch, PaymentByIntent,
};

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::text::{bytes_sql, StoredText};
use super::{Context, StoreError};
use crate::config::{
    AmountUnit, ColumnName, Partition, PartitionKind, PartitionSetting, PaymentTimes,
    SchemaSettings, StatusMap, TimeColumn, TimestampZone,
};
use crate::facts::TableFacts;
use crate::key::{KeyType, PaymentKey, Walk};
use crate::reconcile::{LocalAmount, LocalStatus};
use crate::store::keys::{walk_compare, walk_order};

/// One row of a batch, as phase 1 reads it. Text columns are optional: an
/// application's own `payments` table may hold NULLs, which must become
/// findings, not a batch that fails forever.
#[derive(Debug, Clone)]
pub struct PaymentRow {
    /// `payments.id`, as its canonical text (any key type, docs/keys.md).
    pub id: PaymentKey,
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
    /// `payments.id` holds bytes that are not UTF-8 (a `SQL_ASCII`
    /// database): `id` shows them as `\xNN` ([`crate::store::text`]) and
    /// cannot address the row, so it is UNVERIFIABLE, never sent to Stripe.
    pub key_not_utf8: bool,
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
    /// The account column (`RECONCILER_ACCOUNT_COLUMN`), untrusted: the
    /// connected account's `acct_` id; `None` when not configured or NULL
    /// (empty, like NULL, means the platform's own account).
    pub stripe_account: Option<String>,
    /// Read behind the cursor (a late commit, a row in the grace window when
    /// the cursor passed): its `created_at` does not set list mode's window.
    pub behind_cursor: bool,
    /// The Checkout Session column (`RECONCILER_CHECKOUT_SESSION_COLUMN`),
    /// untrusted; `None` when not configured or NULL. Read only when the
    /// PaymentIntent id is NULL or empty (docs/checkout-sessions.md).
    pub checkout_session_id: Option<String>,
}

/// A row as the database returns it, before the mapping into canonical terms.
///
/// The text columns are read as bytes and decoded with
/// [`crate::store::text::decode`]: a stray byte (a `SQL_ASCII` database)
/// becomes `\xNN`, never a failed batch.
#[derive(sqlx::FromRow)]
struct RawRow {
    /// `payments.id::text` as bytes ([`bytes_sql`]).
    id: Vec<u8>,
    #[sqlx(try_from = "StoredText")]
    stripe_payment_intent_id: Option<String>,
    #[sqlx(try_from = "StoredText")]
    status: Option<String>,
    version: i64,
    updated_at: DateTime<Utc>,
    created_at: DateTime<Utc>,
    recently_changed: bool,
    /// Minor units (`RECONCILER_AMOUNT_UNIT=minor`).
    amount: Option<i64>,
    /// The numeric's exact decimal text (`major`).
    amount_major: Option<String>,
    /// The amount column is configured and this row holds NULL there.
    amount_null: bool,
    #[sqlx(try_from = "StoredText")]
    currency: Option<String>,
    shares_payment_intent: bool,
    #[sqlx(try_from = "StoredText")]
    stripe_account: Option<String>,
    #[sqlx(try_from = "StoredText")]
    checkout_session_id: Option<String>,
    /// The row's place in a walk of the reconciler's own copy: its state
    /// row's `created_at` (absent from every other read).
    #[sqlx(default)]
    walk_created_at: Option<DateTime<Utc>>,
}

impl RawRow {
    fn map(self, statuses: &StatusMap) -> PaymentRow {
        PaymentRow {
            key_not_utf8: std::str::from_utf8(&self.id).is_err(),
            id: PaymentKey::new(super::text::decode(&self.id)),
            stripe_payment_intent_id: self.stripe_payment_intent_id,
            status: statuses.local(self.status.as_deref().unwrap_or("")),
            version: self.version,
            updated_at: self.updated_at,
            created_at: self.created_at,
            recently_changed: self.recently_changed,
            amount: self
                .amount
                .map(LocalAmount::Minor)
                .or(self.amount_major.map(LocalAmount::Major))
                .or(self.amount_null.then_some(LocalAmount::Null)),
            currency: self.currency,
            shares_payment_intent: self.shares_payment_intent,
            stripe_account: self.stripe_account,
            behind_cursor: false,
            checkout_session_id: self.checkout_session_id,
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
    /// `RECONCILER_ACCOUNT_COLUMN` (Connect: the row's connected account).
    pub account: Option<&'a ColumnName>,
    /// `RECONCILER_CHECKOUT_SESSION_COLUMN` (the row's Checkout Session id).
    pub checkout_session: Option<&'a ColumnName>,
    /// `RECONCILER_AMOUNT_UNIT`.
    pub unit: AmountUnit,
    /// `RECONCILER_LOCAL_STATUSES`.
    pub statuses: &'a StatusMap,
    /// `RECONCILER_PARTITION_COLUMN` / `RECONCILER_PARTITION_VALUE`: every
    /// read keeps to the partition's rows (the value bound last).
    pub partition: Option<&'a Partition>,
    /// How `created_at` and `updated_at` are read (`RECONCILER_TIMESTAMP_ZONE`
    /// for `timestamp without time zone` columns).
    pub times: &'a PaymentTimes,
    /// `payments.id`'s type and walk (detected at start, docs/keys.md).
    pub key: &'a KeyType,
}

impl<'a> MoneyColumns<'a> {
    /// The columns, unit and words of the schema group, with the partition,
    /// the time columns and the key type the start-up checks found.
    pub fn of(settings: &'a SchemaSettings, facts: &'a TableFacts) -> Self {
        MoneyColumns {
            amount: settings.amount_column.as_ref(),
            currency: settings.currency_column.as_ref(),
            account: settings.account_column.as_ref(),
            checkout_session: settings.checkout_session_column.as_ref(),
            unit: settings.amount_unit,
            statuses: &settings.statuses,
            partition: facts.partition.as_ref(),
            times: &facts.times,
            key: &facts.key,
        }
    }

    /// ` AND <the partition's condition on p>` with the value at `$param`;
    /// empty without a partition.
    fn partition_sql(&self, param: u8) -> String {
        partition_condition(self.partition, "p", param)
    }

    fn map(&self, rows: Vec<RawRow>) -> Vec<PaymentRow> {
        rows.into_iter().map(|r| r.map(self.statuses)).collect()
    }
}

impl MoneyColumns<'_> {
    /// The batch query: rows after the position (`$1` its key as text,
    /// `$4` its `created_at`; `None`: from the cycle's start), `$2` grace
    /// seconds, `$3` limit, `$5` the partition's value; in the walk's order
    /// (`payments.id`, or `(created_at, id)`: docs/keys.md). Column names
    /// enter the SQL only as validated, double-quoted identifiers
    /// ([`ColumnName::quoted`]); the partition's value only as a parameter.
    fn batch_sql(&self, from_start: bool) -> String {
        if self.key.own_copy() {
            return self.copy_batch_sql(from_start);
        }
        let after = if from_start {
            "TRUE".to_owned()
        } else {
            walk_compare(self.key, self.times, "p", ">", (1, 4))
        };
        format!(
            "SELECT {}
               FROM payments p
              WHERE {after}{partition}
              ORDER BY {order}
              LIMIT $3",
            self.row_columns(),
            partition = self.partition_sql(5),
            order = walk_order(self.key, "p"),
        )
    }

    /// [`Self::batch_sql`] over the reconciler's own ordered copy
    /// (docs/keys.md, "The walk"): the state rows after the position in
    /// `(created_at, payment_id)` order, on `reconciliation_payment_state_walk`
    /// (migration 0021), each probed in `payments` by primary key; the
    /// position is the state row's (`walk_created_at`). The probe is a
    /// lateral subquery the planner cannot flatten into a join: as a join,
    /// near the copy's end it hashed the whole of `payments` (a parallel
    /// sequential scan) for a batch's rows.
    fn copy_batch_sql(&self, from_start: bool) -> String {
        let after = if from_start {
            "TRUE".to_owned()
        } else {
            format!(
                "(s.created_at, s.payment_id) > ($4::timestamptz, {})",
                self.key.cast("$1")
            )
        };
        format!(
            "SELECT {}, s.created_at AS walk_created_at
               FROM reconciliation_payment_state s
              CROSS JOIN LATERAL (SELECT * FROM payments p WHERE p.id = s.payment_id OFFSET 0) p
              WHERE {after}{partition}
              ORDER BY s.created_at, s.payment_id
              LIMIT $3",
            self.row_columns(),
            partition = self.partition_sql(5),
        )
    }

    /// The columns of a [`RawRow`] of `payments p` (`$2` grace seconds):
    /// the seed's, the grace flag, the money columns (NULL when not
    /// configured; a major amount as the numeric's exact text, never a
    /// float; whether the configured amount is NULL), the account column
    /// (NULL when not configured) and the shared-PaymentIntent flag (an index
    /// probe). Text columns are selected as bytes ([`bytes_sql`]).
    fn row_columns(&self) -> String {
        let column = |c: Option<&ColumnName>| {
            c.map_or_else(|| "NULL".to_owned(), |c| format!("p.{}", c.quoted()))
        };
        let (minor, major) = match self.unit {
            AmountUnit::Minor => (column(self.amount), "NULL".to_owned()),
            AmountUnit::Major => ("NULL".to_owned(), column(self.amount)),
        };
        let amount_null = self.amount.map_or_else(
            || "false".to_owned(),
            |c| format!("p.{} IS NULL", c.quoted()),
        );
        let (updated, created) = (self.times.updated("p"), self.times.created("p"));
        format!(
            "{} AS id, {} AS stripe_payment_intent_id, {} AS status,
             (p.version)::bigint AS version, {updated} AS updated_at, {created} AS created_at,
             {updated} > now() - make_interval(secs => $2) AS recently_changed,
             ({minor})::bigint AS amount, ({major})::text AS amount_major,
             {amount_null} AS amount_null,
             {} AS currency,
             {} AS stripe_account,
             {} AS checkout_session_id,
             coalesce((p.stripe_payment_intent_id)::text, '') <> ''
             AND EXISTS (SELECT 1 FROM payments q
                          WHERE q.stripe_payment_intent_id = p.stripe_payment_intent_id
                            AND q.id <> p.id) AS shares_payment_intent",
            bytes_sql("p.id"),
            bytes_sql("p.stripe_payment_intent_id"),
            bytes_sql("p.status"),
            bytes_sql(&column(self.currency)),
            bytes_sql(&column(self.account)),
            bytes_sql(&column(self.checkout_session))
        )
    }
}

/// ` AND <alias>."column" = $param` for `partition` (the value bound as
/// text at `param`, cast to the column's kind: [`Partition::condition`]);
/// empty for `None`.
pub(crate) fn partition_condition(partition: Option<&Partition>, alias: &str, param: u8) -> String {
    partition.map_or_else(String::new, |p| {
        format!(" AND {}", p.condition(alias, param))
    })
}
