//! Read-only figures for `status` and the metrics. Every query here stays an
//! index lookup or a small aggregate on a 10M-row `payments` table; what the
//! scan confirmed is read from `reconciliation_payment_state`, never `payments`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{payment_state, Context, StoreError};
use crate::config::{OutboxSettings, OutboxShape, Partition, PaymentTimes};
use crate::key::{KeyKind, KeyType, PaymentKey, Walk};

/// Figures about `payments` and the cursor.
#[derive(Debug, Clone, Default, PartialEq, sqlx::FromRow)]
pub struct TableFigures {
    /// Seconds since the least recently confirmed row was confirmed with
    /// Stripe (`created_at` for never-confirmed rows); 0 for an empty table.
    /// See [`lag_since`] for how it stays exact and an index lookup.
    pub lag_seconds: f64,
    /// Planner estimate of the row count (`pg_class.reltuples`), or an exact
    /// count when the table was never analysed.
    pub rows_estimate: f64,
    /// Lowest and highest `payments.id` (primary key lookups).
    pub min_id: Option<i64>,
    /// See `min_id`.
    pub max_id: Option<i64>,
    /// `reconciliation_cursor.last_id`: the cursor's key when it is a whole
    /// number (integer keys); 0 at the cycle's start, when the job never ran,
    /// and for other key types.
    pub cursor_position: i64,
    /// The cursor's key as text (any key type); `None` at the cycle's start
    /// (tells an id 0 from the start).
    pub cursor_key: Option<String>,
    /// Rows the cursor walked in the current cycle
    /// (`reconciliation_cursor.cycle_rows_done`, migration 0021): the
    /// cycle's progress on every walk (docs/keys.md); 0 at its start.
    pub cycle_rows_done: i64,
    /// When the current cycle started.
    pub cycle_started_at: Option<DateTime<Utc>>,
    /// When the previous cycle completed.
    pub last_cycle_completed_at: Option<DateTime<Utc>>,
    /// The database's clock (`now()`), the one clock every age is measured
    /// with, like the lag.
    pub database_now: DateTime<Utc>,
}

/// The SQL of the instant the reconciliation lag counts from: the least of
/// `coalesce(last_reconciled_at, created_at)` over every payment, read from
/// the reconciler's own `reconciliation_payment_state` (one lookup on its
/// expression index `reconciliation_payment_state_lag`), and of `created_at`
/// over the payments beyond its highest id, never seen yet (a primary-key
/// range of the rows inserted since the last batch registered new rows:
/// [`payment_state::register_new`]). Exact per row like the seed's
/// `min(coalesce(last_reconciled_at, created_at))` over `payments`, except for
/// a transaction that commits below the highest seen id after the scan passed
/// it: it counts once a batch reads it (the next batch, or the next cycle), and
/// a deleted payment counts until the cursor passes its id. NULL for an empty
/// table. `head` are the parameters holding [`payment_state::highest_seen`]
/// (key, `created_at`), bound as values so that the planner reads the rows
/// beyond it by index ([`unseen`]). `payments.created_at` is read as
/// `times` says (in `RECONCILER_TIMESTAMP_ZONE` when it has no time zone).
pub fn lag_since(key: &KeyType, head: (u8, u8), seen_any: bool, times: &PaymentTimes) -> String {
    format!(
        "least(
    (SELECT min(coalesce(last_reconciled_at, created_at)) FROM reconciliation_payment_state),
    (SELECT min({}) FROM payments p WHERE {}))",
        times.created("p"),
        unseen(key, times, "p", head, seen_any)
    )
}

/// The payments never seen, `alias`'s rows beyond the last seen one (its key
/// at `$head.0`, its `created_at` at `$head.1`; `seen_any` false: none
/// seen yet, every row) in the
/// walk's order: a primary-key range (integer keys) or a `created_at` range
/// (a `(created_at, id)` walk). A key walk of uuid, text or numeric keys has
/// no "beyond" (random keys): the rows without a state row, an anti-join
/// over the table (docs/keys.md; `status` only). The bound is compared in
/// `created_at`'s own type ([`PaymentTimes::created_bound`]), so an index on
/// the column serves it.
pub fn unseen(
    key: &KeyType,
    times: &PaymentTimes,
    alias: &str,
    (k, c): (u8, u8),
    seen_any: bool,
) -> String {
    let head = key.cast(&format!("${k}"));
    match (key.walk(), key.kind()) {
        // The own copy (docs/keys.md): no index of the application's on
        // `created_at` to read a range beyond the head with.
        _ if key.own_copy() => format!(
            "NOT EXISTS (SELECT 1 FROM reconciliation_payment_state u WHERE u.payment_id = {alias}.id)"
        ),
        (Walk::Key | Walk::CreatedAt, _) if !seen_any && key.kind() == KeyKind::Integer => {
            "TRUE".to_owned()
        }
        (Walk::CreatedAt, _) if !seen_any => "TRUE".to_owned(),
        (Walk::Key, KeyKind::Integer) => format!("{alias}.id > {head}"),
        (Walk::CreatedAt, _) => {
            let bound = times.created_bound(&format!("${c}"));
            format!("({alias}.created_at, {alias}.id) > ({bound}, {head})")
        }
        (Walk::Key, _) => format!(
            "NOT EXISTS (SELECT 1 FROM reconciliation_payment_state u WHERE u.payment_id = {alias}.id)"
        ),
    }
}

/// [`lag_since`] within a partition (its value bound at `$param`): the state
/// rows in `coalesce(last_reconciled_at, created_at)` order on the same
/// expression index, each probed by primary key for its partition until the
/// first of this partition (the state table is shared by every partition: a
/// partition whose job is far behind makes the others' probes walk its rows
/// first), and the never-seen rows beyond `head` of the partition.
fn partition_lag_since(
    key: &KeyType,
    head: (u8, u8, bool),
    partition: &Partition,
    param: u8,
    times: &PaymentTimes,
) -> String {
    let cond = partition.condition("p", param);
    let created = times.created("p");
    format!(
        "least(
    (SELECT coalesce(s.last_reconciled_at, s.created_at) FROM reconciliation_payment_state s
       JOIN payments p ON p.id = s.payment_id
      WHERE {cond}
      ORDER BY coalesce(s.last_reconciled_at, s.created_at) LIMIT 1),
    (SELECT min({created}) FROM payments p WHERE {} AND {cond}))",
        unseen(key, times, "p", (head.0, head.1), head.2)
    )
}

/// The row count of `payments`, or of the partition (value at `$param`):
/// the planner's estimate (`reltuples`, times the value's frequency among
/// the column's most common values in `pg_stats` for a partition) or, when
/// the table was never analysed or the value is not among them, an exact
/// count (an index-only range scan of the partition's `(column, id)` index).
fn rows_sql(partition: Option<(&Partition, u8)>) -> String {
    let Some((partition, param)) = partition else {
        return "coalesce((SELECT CASE WHEN reltuples >= 0 THEN reltuples::float8 END
                            FROM pg_class WHERE oid = 'payments'::regclass),
                         (SELECT count(*)::float8 FROM payments))"
            .to_owned();
    };
    format!(
        "coalesce((SELECT c.reltuples::float8
                          * st.most_common_freqs[array_position(st.most_common_vals::text::text[], ${param}::text)]
                     FROM pg_class c
                     JOIN pg_namespace n ON n.oid = c.relnamespace
                     JOIN pg_stats st ON st.schemaname = n.nspname AND st.tablename = c.relname
                                     AND st.attname = '{column}'
                    WHERE c.oid = 'payments'::regclass AND c.reltuples >= 0),
                  (SELECT count(*)::float8 FROM payments p WHERE {cond}))",
        column = partition.column.as_str(),
        cond = partition.condition("p", param),
    )
}

/// Reads [`TableFigures`] for a job, within its partition when one is set
/// (`RECONCILER_PARTITION_COLUMN`): lag, row count and id range count only
/// the partition's rows.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn table_figures(
    conn: &mut PgConnection,
    job: &str,
    partition: Option<&Partition>,
    key: &KeyType,
    times: &PaymentTimes,
) -> Result<TableFigures, StoreError> {
    let head = payment_state::highest_seen(&mut *conn, key).await?;
    // Lowest and highest id: integer keys only (the cycle's progress).
    let number = |f: &str, c: &str| match key.kind() {
        KeyKind::Integer => format!("(SELECT {f}(p.id)::bigint FROM payments p WHERE {c})"),
        _ => "NULL::bigint".to_owned(),
    };
    let (lag, rows, ids) = match partition {
        None => (
            lag_since(key, (2, 3), head.is_some(), times),
            rows_sql(None),
            format!(
                "{} AS min_id, {} AS max_id",
                number("min", "TRUE"),
                number("max", "TRUE")
            ),
        ),
        Some(p) => (
            partition_lag_since(key, (2, 3, head.is_some()), p, 4, times),
            rows_sql(Some((p, 4))),
            format!(
                "{} AS min_id, {} AS max_id",
                number("min", &p.condition("p", 4)),
                number("max", &p.condition("p", 4))
            ),
        ),
    };
    let sql = format!(
        "SELECT coalesce(extract(epoch FROM now() - {lag}), 0)::float8 AS lag_seconds,
                {rows} AS rows_estimate,
                {ids},
                coalesce(c.last_id, 0) AS cursor_position,
                {position} AS cursor_key,
                coalesce(c.cycle_rows_done, 0) AS cycle_rows_done,
                c.cycle_started_at,
                c.last_cycle_completed_at,
                now() AS database_now
           FROM (SELECT 1) AS one
           LEFT JOIN reconciliation_cursor c ON c.job = $1",
        position = super::cursor::position_sql("c.")
    );
    let query = super::query_as(&sql)
        .bind(job)
        .bind(head.as_ref().map(|h| &h.key))
        .bind(head.as_ref().and_then(|h| h.created_at));
    match partition {
        Some(p) => query.bind(p.value.as_str()),
        None => query,
    }
    .fetch_one(conn)
    .await
    .context("reading status figures")
}

/// The backlog of the repair commands in an outbox our `repair` worker drains.
#[derive(Debug, Clone, Copy, Default, PartialEq, sqlx::FromRow)]
pub struct OutboxFigures {
    /// Repair commands not yet processed.
    pub pending: i64,
    /// Age in seconds of the oldest unprocessed repair command (measured with
    /// the database's clock); 0 when none.
    pub oldest_pending_seconds: f64,
}

/// Reads [`OutboxFigures`] from `RECONCILER_OUTBOX_TABLE`. `repair_types` are
/// the event types of the repair commands (the outbox may be shared).
/// `None` for a `debezium` or `plain` outbox (docs/schema.md, "Outbox"): the
/// application's relay drains it, deleting or keeping rows as it likes, so no
/// count there tells a pending command from a delivered one.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn outbox_figures(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    repair_types: &[&str],
) -> Result<Option<OutboxFigures>, StoreError> {
    if !outbox.shape.drained_by_reconciler() {
        return Ok(None);
    }
    let table = outbox.table.quoted();
    let sql = format!(
        "SELECT count(*) AS pending,
                coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_pending_seconds
           FROM {table} WHERE processed_at IS NULL AND event_type = ANY($1)"
    );
    super::query_as(&sql)
        .bind(repair_types)
        .fetch_one(conn)
        .await
        .context("reading the outbox backlog")
        .map(Some)
}

/// Open findings per kind; with a partition, those of the partition's
/// payments and those naming no payment (`missing_locally`: no row tells
/// which partition a PaymentIntent without a row belongs to, so every
/// partition's job counts them).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn open_findings_by_kind(
    conn: &mut PgConnection,
    partition: Option<&Partition>,
) -> Result<BTreeMap<String, i64>, StoreError> {
    let rows: Vec<(String, i64)> = match partition {
        None => {
            super::query_as(
                "SELECT kind, count(*) FROM reconciliation_findings WHERE resolved_at IS NULL
                  GROUP BY kind",
            )
            .fetch_all(conn)
            .await
        }
        Some(p) => {
            let sql = format!(
                "SELECT f.kind, count(*) FROM reconciliation_findings f
                   LEFT JOIN payments p ON p.id = f.payment_id
                  WHERE f.resolved_at IS NULL AND (f.payment_id IS NULL OR {})
                  GROUP BY f.kind",
                p.condition("p", 1)
            );
            super::query_as(&sql)
                .bind(p.value.as_str())
                .fetch_all(conn)
                .await
        }
    }
    .context("counting open findings")?;
    Ok(rows.into_iter().collect())
}

/// The payment that holds the reconciliation lag: the least recently
/// confirmed row (never-confirmed rows count from `created_at`; the same rows
/// as [`lag_since`]), with what a person needs to look into it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct LagHolder {
    /// `payments.id` (its text, any key type).
    #[serde(skip)]
    pub payment_id: PaymentKey,
    /// `payments.id` in JSON (`to_jsonb`): a number for integer and numeric
    /// keys, as earlier releases wrote them, a string for uuid and text keys.
    #[serde(rename = "payment_id")]
    pub payment_id_json: serde_json::Value,
    /// The payment's order (text columns read as bytes: a stray byte shows
    /// as `\xNN`, [`crate::store::text`]).
    #[sqlx(try_from = "super::text::StoredText")]
    pub order_id: Option<String>,
    /// The stored PaymentIntent id (may be malformed).
    #[sqlx(try_from = "super::text::StoredText")]
    pub stripe_payment_intent_id: Option<String>,
    /// `payments.status` (an application's table may hold NULL).
    #[sqlx(try_from = "super::text::StoredText")]
    pub status: Option<String>,
    /// When the row was created.
    pub created_at: DateTime<Utc>,
    /// When the row last changed (a recent change keeps it `in_flight`).
    pub updated_at: DateTime<Utc>,
    /// When Stripe last confirmed it; `None`: never.
    pub last_reconciled_at: Option<DateTime<Utc>>,
    /// Its newest open finding, if any.
    pub open_finding_id: Option<i64>,
    /// That finding's kind.
    pub open_finding_kind: Option<String>,
    /// The last error of its unprocessed repair command, if one failed.
    pub repair_last_error: Option<String>,
    /// Consecutive cycles in which Stripe gave no definitive answer for it
    /// (`reconciliation_unverifiable`: timeouts, 429s, 5xx), the longest
    /// streak of any job; `None`: its last read was answered, or it was
    /// never read.
    pub unverifiable_cycles: Option<i32>,
    /// The last error of that streak.
    pub unverifiable_last_error: Option<String>,
}

/// The last error of the payment `p`'s pending repair command (the repair
/// types at `$3`), from a reconciler-shaped outbox; NULL for `debezium`.
fn repair_last_error(outbox: &OutboxSettings) -> String {
    match outbox.shape {
        OutboxShape::Reconciler => format!(
            "(SELECT o.last_error FROM {} o
                  WHERE o.aggregate_type = 'Payment' AND o.aggregate_id = p.id::text
                    AND o.processed_at IS NULL AND o.last_error IS NOT NULL
                    AND o.event_type = ANY($3)
                  ORDER BY o.id DESC LIMIT 1)",
            outbox.table.quoted()
        ),
        OutboxShape::Debezium | OutboxShape::Plain => "NULL::text".to_owned(),
    }
}

/// The query of the state row longest without a confirmation (within the
/// partition, whose value is bound at `param`: the state rows joined to
/// their payment), and the partition's condition on the unseen payments
/// (`q`; empty without a partition): [`lag_holder`]'s parts.
fn oldest_seen_sql(partition: Option<&Partition>, param: u8) -> (String, String) {
    match partition {
        None => (
            "SELECT payment_id, last_reconciled_at,
                    coalesce(last_reconciled_at, created_at) AS since
               FROM reconciliation_payment_state
              ORDER BY coalesce(last_reconciled_at, created_at) LIMIT 1"
                .to_owned(),
            String::new(),
        ),
        Some(p) => (
            format!(
                "SELECT s.payment_id, s.last_reconciled_at,
                        coalesce(s.last_reconciled_at, s.created_at) AS since
                   FROM reconciliation_payment_state s
                   JOIN payments p ON p.id = s.payment_id
                  WHERE {}
                  ORDER BY coalesce(s.last_reconciled_at, s.created_at) LIMIT 1",
                p.condition("p", param)
            ),
            format!(" AND {}", p.condition("q", param)),
        ),
    }
}

/// The payment holding the lag (see [`LagHolder`]), of the partition when
/// one is set; `None` for an empty table (or partition). One lookup on the expression index
/// `reconciliation_payment_state_lag`, and a primary-key range of the
/// payments never seen (see [`lag_since`]). Its repair's last error comes
/// from `RECONCILER_OUTBOX_TABLE`; a `debezium` outbox records none (the
/// application's relay handles failures), so it is `None` there.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn lag_holder(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    repair_types: &[&str],
    partition: Option<&Partition>,
    times: &PaymentTimes,
    key: &KeyType,
) -> Result<Option<LagHolder>, StoreError> {
    let head = payment_state::highest_seen(&mut *conn, key).await?;
    let text_key = key.kind() == crate::key::KeyKind::Text;
    let sql = lag_holder_sql(outbox, partition, times, key, head.is_some());
    let query = super::query_as(&sql)
        .bind(head.as_ref().map(|h| &h.key))
        .bind(head.as_ref().and_then(|h| h.created_at));
    let query = match outbox.shape {
        OutboxShape::Reconciler => query.bind(repair_types),
        OutboxShape::Debezium | OutboxShape::Plain => query,
    };
    match partition {
        Some(p) => query.bind(p.value.as_str()),
        None => query,
    }
    .fetch_optional(conn)
    .await
    .context("finding the payment that holds the lag")
    .map(|holder: Option<LagHolder>| {
        holder.map(|mut h| {
            if text_key {
                h.payment_id_json = serde_json::Value::from(h.payment_id.as_str());
            }
            h
        })
    })
}

/// The statement of [`lag_holder`]: binds the highest seen key and its
/// `created_at` ($1, $2), the repair types for a `reconciler` outbox, then
/// the partition's value. `head_seen`: a highest seen row exists.
fn lag_holder_sql(
    outbox: &OutboxSettings,
    partition: Option<&Partition>,
    times: &PaymentTimes,
    key: &KeyType,
    head_seen: bool,
) -> String {
    let repair_last_error = repair_last_error(outbox);
    // Within a partition (its value after the repair types): the state rows
    // joined to their payment, as [`partition_lag_since`] reads them.
    let param = match outbox.shape {
        OutboxShape::Reconciler => 4,
        OutboxShape::Debezium | OutboxShape::Plain => 3,
    };
    let (seen, in_partition) = oldest_seen_sql(partition, param);
    let (created, updated) = (times.created("p"), times.updated("p"));
    let created_q = times.created("q");
    let beyond = unseen(key, times, "q", (1, 2), head_seen);
    // A text key is read as bytes (a stray byte shows as \xNN,
    // [`super::text`]) and given its JSON form here.
    let text_key = key.kind() == crate::key::KeyKind::Text;
    let id_json = if text_key {
        "'null'::jsonb"
    } else {
        "to_jsonb(p.id)"
    };
    format!(
        "SELECT convert_to(p.id::text, 'SQL_ASCII') AS payment_id, {id_json} AS payment_id_json,
                convert_to(to_jsonb(p) ->> 'order_id', 'SQL_ASCII') AS order_id,
                convert_to((p.stripe_payment_intent_id)::text, 'SQL_ASCII') AS stripe_payment_intent_id,
                convert_to((p.status)::text, 'SQL_ASCII') AS status,
                {created} AS created_at, {updated} AS updated_at, h.last_reconciled_at,
                f.id AS open_finding_id, f.kind AS open_finding_kind,
                {repair_last_error} AS repair_last_error,
                u.cycles AS unverifiable_cycles, u.last_error AS unverifiable_last_error
           FROM (SELECT * FROM
                   (({seen})
                    UNION ALL
                    (SELECT q.id, NULL::timestamptz, {created_q} FROM payments q
                      WHERE {beyond}{in_partition}
                      ORDER BY q.created_at LIMIT 1)) AS candidates
                  ORDER BY since LIMIT 1) AS h
           JOIN payments p ON p.id = h.payment_id
           LEFT JOIN LATERAL (SELECT id, kind FROM reconciliation_findings
                               WHERE payment_id = p.id AND resolved_at IS NULL
                               ORDER BY id DESC LIMIT 1) AS f ON true
           LEFT JOIN LATERAL (SELECT cycles, last_error FROM reconciliation_unverifiable
                               WHERE payment_id = p.id
                               ORDER BY cycles DESC LIMIT 1) AS u ON true"
    )
}
