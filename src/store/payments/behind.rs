//! The rows behind the cursor never confirmed with Stripe, read beside each
//! batch (docs/keys.md, "No row skipped"). Two bounded reads, neither growing
//! with the cursor's position nor the table: a *sweep step* over the state
//! rows never confirmed (at most [`SWEEP_ENTRIES_PER_ROW`] × the limit
//! entries of a partial index, continuing where the previous batch's step
//! stopped), and a range of rows never seen below the highest seen one (the
//! late-commit window: for an integer key walk, the window's ids without a
//! state row, two index ranges set against each other). Their rows are then
//! read from `payments` by primary key (the sweep's and the integer window's)
//! and, in a `(created_at, id)` walk, by the window's range, each branch with
//! its own limit: no plan joins a union against `payments` (the planner chose a
//! nested-loop semi join over a materialised union that discarded rows in
//! proportion to the cursor's position: docs/scan.md, "Rows behind the
//! cursor").

use super::*;
use crate::key::Position;
use crate::store::payment_state::{earliest_unconfirmed, lower_bound_text};

/// How many ids below the highest seen id [`read_behind_cursor`] looks for
/// rows never seen, per row it may return: with a tenth of a batch behind the
/// cursor, ten batches' worth of ids. A transaction that commits later than
/// that after taking its id is read by the next cycle's cursor.
const LATE_COMMIT_IDS_PER_ROW: i64 = 100;

/// In a `(created_at, id)` walk, how far below the highest seen
/// `created_at` [`read_behind_cursor`] looks for rows never seen: a row
/// committed later than that after its `created_at` (a backfill, an import)
/// is read by the next cycle (docs/keys.md, "No row skipped").
pub const LATE_COMMIT_WINDOW: Duration = Duration::from_secs(3600);

/// How many entries of the unconfirmed state rows one sweep step examines
/// per row [`read_behind_cursor`] may return: with a tenth of a batch behind
/// the cursor, a batch's worth of entries, so the sweep moves at least as
/// fast as the cursor and reaches it again within a few batches, even when
/// another partition's rows (registered, never confirmed by this job) lie
/// between.
pub const SWEEP_ENTRIES_PER_ROW: u32 = 10;

/// Which rows [`read_behind_cursor`] reads: up to `limit` at or before
/// `cursor`, the keys of `excluded` left out.
#[derive(Debug, Clone, Copy)]
pub struct Behind<'a> {
    /// The cursor the rows are at or before.
    pub cursor: &'a Position,
    /// The most rows read.
    pub limit: u32,
    /// Keys left out (a batch still being read or committed).
    pub excluded: &'a [PaymentKey],
    /// Where the previous step of the sweep stopped (a state row's position:
    /// its key and, in a `(created_at, id)` walk, its copied `created_at`);
    /// `None`: start again at the earliest unconfirmed state row.
    pub sweep_from: Option<&'a Position>,
}

/// What [`read_behind_cursor`] read.
#[derive(Debug, Clone, Default)]
pub struct BehindRows {
    /// The rows, in the walk's order.
    pub rows: Vec<PaymentRow>,
    /// Where the next batch's sweep step starts (after this position);
    /// `None`: the sweep reached the cursor and starts again.
    pub sweep_next: Option<Position>,
}

/// Reads up to `limit` rows at or before the cursor that were never
/// confirmed with Stripe: seen but in the grace window or UNVERIFIABLE when
/// the cursor passed (one sweep step of at most `limit` ×
/// [`SWEEP_ENTRIES_PER_ROW`] state rows, from `sweep_from`), or never seen
/// (committed after the cursor passed them: sequence order is not commit
/// order; found within a window below the highest seen id, `limit` ×
/// [`LATE_COMMIT_IDS_PER_ROW`] ids, or `created_at`, [`LATE_COMMIT_WINDOW`];
/// a key walk of uuid, text or numeric keys has no such window). Rows in the
/// grace window, rows counted UNVERIFIABLE in `job`'s current cycle, the keys
/// of `excluded` (a batch still being read or committed) and other
/// partitions' rows are left out. A key with a stray byte (a `SQL_ASCII`
/// database) cannot be sent back as text and is left to the next cycle.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read_behind_cursor(
    conn: &mut PgConnection,
    job: &str,
    behind: Behind<'_>,
    grace: Duration,
    columns: MoneyColumns<'_>,
) -> Result<BehindRows, StoreError> {
    let step = behind.limit.saturating_mul(SWEEP_ENTRIES_PER_ROW).max(1);
    let seen = sweep_step(&mut *conn, columns.key, &behind, step).await?;
    let window_from = late_commit_window(&mut *conn, columns.key, behind.limit).await?;
    let late = match (&window_from, columns.key.kind()) {
        (Some(from), crate::key::KeyKind::Integer) if columns.key.walk() == Walk::Key => {
            let pending: std::collections::HashSet<&str> =
                behind.excluded.iter().map(PaymentKey::as_str).collect();
            let mut ids = never_seen_ids(&mut *conn, from, behind.cursor).await?;
            // The batch still being read or committed is left out anyway.
            ids.retain(|id| !pending.contains(id.as_str()));
            ids
        }
        _ => Vec::new(),
    };
    let candidates: Vec<&str> = seen
        .iter()
        .filter_map(|s| std::str::from_utf8(&s.key).ok())
        .chain(late.iter().map(String::as_str))
        .collect();
    let sql = columns.behind_sql(window_from.is_some());
    let query = crate::store::query_as(&sql)
        .bind(&behind.cursor.key)
        .bind(grace.as_secs_f64())
        .bind(i64::from(behind.limit))
        .bind(job)
        .bind(behind.excluded)
        .bind(window_from)
        .bind(behind.cursor.created_at)
        .bind(&candidates);
    let rows: Vec<RawRow> = match columns.partition {
        Some(p) => query.bind(p.value.as_str()),
        None => query,
    }
    .fetch_all(conn)
    .await
    .context("reading rows behind the cursor")?;
    let rows = columns.map(rows);
    let sweep_next = next_sweep(&seen, step, &rows, &behind);
    Ok(BehindRows { rows, sweep_next })
}

/// One state row the sweep examined: its key as bytes and its copied
/// `created_at`.
#[derive(sqlx::FromRow)]
struct Entry {
    key: Vec<u8>,
    created_at: DateTime<Utc>,
}

/// One step of the sweep: up to `step` state rows never confirmed, at or
/// before the cursor by their own position, after `sweep_from` (or from the
/// earliest unconfirmed one), in the walk's order. One range of a partial
/// index (`reconciliation_payment_state_unconfirmed` by key,
/// `..._unconfirmed_created` by `(created_at, id)`), with a limit.
async fn sweep_step(
    conn: &mut PgConnection,
    key: &KeyType,
    behind: &Behind<'_>,
    step: u32,
) -> Result<Vec<Entry>, StoreError> {
    let from = sweep_start(&mut *conn, key, behind).await?;
    let Some(from) = from else {
        return Ok(Vec::new());
    };
    let after = behind.sweep_from.is_some();
    let k = |n: &str| key.cast(n);
    let bounds = match (key.walk(), after) {
        (Walk::Key, true) => format!("s.payment_id > {} AND s.payment_id <= {}", k("$3"), k("$1")),
        (Walk::Key, false) => format!("s.payment_id BETWEEN {} AND {}", k("$3"), k("$1")),
        (Walk::CreatedAt, true) => format!(
            "(s.created_at, s.payment_id) > ($4::timestamptz, {})
             AND (s.created_at, s.payment_id) <= ($2::timestamptz, {})
             AND s.created_at BETWEEN $4::timestamptz AND $2::timestamptz",
            k("$3"),
            k("$1")
        ),
        (Walk::CreatedAt, false) => format!(
            "(s.created_at, s.payment_id) <= ($2::timestamptz, {})
             AND s.created_at BETWEEN $4::timestamptz AND $2::timestamptz",
            k("$1")
        ),
    };
    let order = match key.walk() {
        Walk::Key => "s.payment_id",
        Walk::CreatedAt => "s.created_at, s.payment_id",
    };
    let sql = format!(
        "SELECT convert_to(s.payment_id::text, 'SQL_ASCII') AS key, s.created_at
           FROM reconciliation_payment_state s
          WHERE s.last_reconciled_at IS NULL AND {bounds}
          ORDER BY {order}
          LIMIT $5"
    );
    crate::store::query_as(&sql)
        .bind(&behind.cursor.key)
        .bind(behind.cursor.created_at)
        .bind(&from.key)
        .bind(from.created_at)
        .bind(i64::from(step))
        .fetch_all(conn)
        .await
        .context("sweeping the unconfirmed rows behind the cursor")
}

/// Where a sweep step starts: after `sweep_from`, or at the earliest
/// unconfirmed state row (its key, or in a `(created_at, id)` walk its
/// `created_at`); `None`: no state row is unconfirmed.
async fn sweep_start(
    conn: &mut PgConnection,
    key: &KeyType,
    behind: &Behind<'_>,
) -> Result<Option<Position>, StoreError> {
    Ok(match behind.sweep_from {
        Some(from) => Some(from.clone()),
        None => earliest_unconfirmed(&mut *conn, key)
            .await?
            .map(|at| match key.walk() {
                Walk::Key => Position {
                    key: PaymentKey::new(at),
                    created_at: None,
                },
                Walk::CreatedAt => Position {
                    key: PaymentKey::new(String::new()),
                    created_at: DateTime::parse_from_rfc3339(&at)
                        .ok()
                        .map(|t| t.with_timezone(&Utc)),
                },
            }),
    })
}

/// Where the next sweep step starts: after the last entry this step
/// examined when it examined a full `step`, `None` (start again) when it
/// reached the cursor. When the read returned its full limit, the entries
/// after the last one it returned were not read: the next step starts there.
fn next_sweep(
    seen: &[Entry],
    step: u32,
    rows: &[PaymentRow],
    behind: &Behind<'_>,
) -> Option<Position> {
    if rows.len() >= behind.limit as usize {
        let returned: std::collections::HashSet<&str> =
            rows.iter().map(|r| r.id.as_str()).collect();
        let last_read = seen
            .iter()
            .rposition(|e| returned.contains(crate::store::text::decode(&e.key).as_str()));
        return last_read.map_or_else(
            || behind.sweep_from.cloned(),
            |i| Some(seen_position(seen, i, behind)),
        );
    }
    (seen.len() >= step as usize).then(|| seen_position(seen, seen.len() - 1, behind))
}

/// The position of the sweep's entry `i` (its key's valid prefix for a key
/// with a stray byte, which sorts at or before it: the next step examines a
/// few entries again rather than skip one).
fn seen_position(seen: &[Entry], i: usize, behind: &Behind<'_>) -> Position {
    let e = &seen[i];
    Position {
        key: PaymentKey::new(lower_bound_text(&e.key)),
        created_at: behind.cursor.created_at.map(|_| e.created_at),
    }
}

/// The ids of an integer key walk in the late-commit window `(from, cursor]`
/// that have no state row (rows committed after the walk passed them), in id
/// order: an anti-join of two index ranges of at most the window's width,
/// each side bounded, so whatever join the planner picks reads the window
/// and no more (it picks a merge of two index-only scans, ~150 buffers for
/// 17,000 ids; the per-row probe of the state table it replaces read
/// 51,000).
/// Other partitions' rows are among them only when their job never
/// registered them; the read of their rows keeps to the partition.
async fn never_seen_ids(
    conn: &mut PgConnection,
    from: &str,
    cursor: &Position,
) -> Result<Vec<String>, StoreError> {
    crate::store::query_scalar(
        "SELECT p.id::text FROM payments p
          WHERE p.id > ($1)::bigint AND p.id <= ($2)::bigint
            AND NOT EXISTS (SELECT 1 FROM reconciliation_payment_state s
                             WHERE s.payment_id = p.id
                               AND s.payment_id > ($1)::bigint AND s.payment_id <= ($2)::bigint)
          ORDER BY p.id",
    )
    .bind(from)
    .bind(&cursor.key)
    .fetch_all(conn)
    .await
    .context("looking for rows committed behind the cursor")
}

/// The start of the window [`read_behind_cursor`] looks for rows never seen
/// in, as text: an id (integer keys walked by key) or a `created_at`
/// (`(created_at, id)` walk); `None` when nothing was seen yet or the walk
/// has no window.
async fn late_commit_window(
    conn: &mut PgConnection,
    key: &KeyType,
    limit: u32,
) -> Result<Option<String>, StoreError> {
    let head = crate::store::payment_state::highest_seen(&mut *conn, key).await?;
    Ok(match (key.walk(), head) {
        (Walk::CreatedAt, Some(head)) => head.created_at.map(|at| {
            let window = chrono::Duration::from_std(LATE_COMMIT_WINDOW).unwrap_or_default();
            (at - window).to_rfc3339()
        }),
        (Walk::Key, Some(head)) if key.kind() == crate::key::KeyKind::Integer => head
            .key
            .as_i64()
            .map(|id| id.saturating_sub(i64::from(limit).saturating_mul(LATE_COMMIT_IDS_PER_ROW)))
            .map(|id| id.to_string()),
        _ => None,
    })
}

impl MoneyColumns<'_> {
    /// The read of rows behind the cursor (`$1` the cursor's key, `$2` grace
    /// seconds, `$3` limit, `$4` job, `$5` keys left out, `$6` the
    /// late-commit window's start as text, `$7` the cursor's `created_at`,
    /// `$8` the sweep step's keys, `$9` the partition's value): the sweep's
    /// rows by primary key, and (`window`) the rows never seen in the window,
    /// each branch with its own limit, merged in the walk's order.
    fn behind_sql(&self, window: bool) -> String {
        let (key, times) = (self.key, self.times);
        let at_or_before = walk_compare(key, times, "p", "<=", (1, 7));
        let filters = format!(
            "{at_or_before}
                AND {updated} <= now() - make_interval(secs => $2)
                AND NOT EXISTS (SELECT 1 FROM reconciliation_unverifiable u
                                  JOIN reconciliation_cursor c ON c.job = u.job
                                 WHERE u.job = $4 AND u.payment_id = p.id
                                   AND u.last_cycle = c.cycle_started_at)
                AND NOT (p.id = ANY({excluded})){partition}",
            updated = times.updated("p"),
            excluded = key.cast_array("$5"),
            partition = self.partition_sql(9),
        );
        let (sort, order) = match key.walk() {
            Walk::Key => ("p.id AS sort_key", "sort_key"),
            Walk::CreatedAt => (
                "p.created_at AS sort_created, p.id AS sort_key",
                "sort_created, sort_key",
            ),
        };
        let columns = self.row_columns();
        // One primary-key probe per key of the sweep step, driven by the
        // array: `p.id = ANY(...)` alone let the planner read a partition's
        // index range from the table's start to the cursor instead.
        let seen = format!(
            "(SELECT {columns}, {sort} FROM unnest({}) AS c(id)
               CROSS JOIN LATERAL (SELECT * FROM payments p WHERE p.id = c.id OFFSET 0) p
               WHERE {filters})",
            key.cast_array("$8")
        );
        let never_seen = never_seen(key, times)
            .filter(|_| window)
            .map(|range| {
                format!(
                    " UNION ALL
                     (SELECT {columns}, {sort} FROM payments p
                       WHERE {range}
                         AND NOT EXISTS (SELECT 1 FROM reconciliation_payment_state s
                                          WHERE s.payment_id = p.id OFFSET 0)
                         AND {filters}
                       ORDER BY {walk}
                       LIMIT $3)",
                    walk = walk_order(key, "p"),
                )
            })
            .unwrap_or_default();
        format!("{seen}{never_seen} ORDER BY {order} LIMIT $3")
    }
}

/// The range of rows never seen: late commits within the window below the
/// highest seen id (`$6`) or `created_at`, up to the cursor; `None` for a
/// key walk of uuid, text or numeric keys and a walk of the own copy (no
/// window).
fn never_seen(key: &KeyType, times: &PaymentTimes) -> Option<String> {
    match (key.walk(), key.kind()) {
        // A walk of the own copy registers every row at the run's start:
        // a row never seen was inserted since, and the next run registers it.
        _ if key.own_copy() => None,
        (Walk::CreatedAt, _) => Some(format!("p.created_at > {}", times.created_bound("($6)"))),
        // An integer key walk's rows never seen are among the probed keys
        // ([`never_seen_ids`]).
        (Walk::Key, _) => None,
    }
}
