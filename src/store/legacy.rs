//! What earlier releases added to the application's `payments` and that
//! `migrate` now removes (docs/schema.md, "Upgrades: what `migrate` removes,
//! and under which lock"): the columns
//! `observed_external_status` and `last_reconciled_at` (migration 0001), the
//! indexes `payments_reconciled_or_created` (0005) and
//! `payments_never_reconciled` (0007) over them, and the foreign key
//! `reconciliation_findings.payment_id → payments(id)` (0001). Nothing reads
//! them since the state moved to `reconciliation_payment_state` (0010).
//!
//! # Whose object it is
//!
//! Only what the reconciler's own history shows it created is removed:
//! - a column: migration 1 is recorded in `_sqlx_migrations`, and the
//!   column's catalog row (`pg_attribute`) was written by the same
//!   transaction as the catalog row of `reconciliation_runs.job`, a table only
//!   migration 0001 creates (`xmin` equal). sqlx and this project's runner
//!   apply a migration and record it in one transaction, so a column 0001
//!   added (`ADD COLUMN IF NOT EXISTS`, or `CREATE TABLE payments` on an empty
//!   database) carries that transaction's id; a column the application had
//!   before 0001 ran (the design note's seed has both) was created by an
//!   earlier transaction and is never touched. When the catalog row was
//!   rewritten since (`ALTER COLUMN`, a dump and restore) the origin cannot be
//!   told and the column is kept.
//! - an index: its migration (5 or 7) is recorded, and its catalog row is
//!   younger than that same 0001 anchor (`age(xmin)` smaller): an index of
//!   that name the application had before the reconciler is kept.
//! - the foreign key: it sits on `reconciliation_findings`, the reconciler's
//!   own table, which only migration 0001 creates with it.
//!
//! # Locks
//!
//! No step queues behind the application: the foreign key and the columns
//! are dropped in a transaction that first takes `payments`' lock with
//! `LOCK TABLE … NOWAIT` (granted at once or not at all, a few attempts
//! [`RETRY_PAUSE`] apart, never a place in the lock queue), and holds it for
//! the catalog change only; an index is dropped `CONCURRENTLY` under
//! [`INDEX_LOCK_TIMEOUT`]. A step that cannot get its lock is deferred:
//! reported, and tried again by the next `migrate`.

use std::time::Duration;

use sqlx::PgConnection;

use super::{Context, StoreError, Timeouts};

/// The two columns migration 0001 added to `payments`.
pub const COLUMNS: [&str; 2] = ["observed_external_status", "last_reconciled_at"];

/// The two indexes migrations 0005 and 0007 built on `payments`, with the
/// migration that built each.
pub const INDEXES: [(&str, i64); 2] = [
    ("payments_reconciled_or_created", 5),
    ("payments_never_reconciled", 7),
];

/// Longest a `CREATE`/`DROP INDEX CONCURRENTLY` on `payments` waits for a
/// lock (its `SHARE UPDATE EXCLUSIVE` on the table, then the transactions
/// already running): neither blocks the application's reads or writes, so
/// this only bounds how long `migrate` itself waits before it reports and
/// skips the step.
pub const INDEX_LOCK_TIMEOUT: &str = "5s";

/// Attempts at `LOCK TABLE payments … NOWAIT` before a step is deferred.
pub const LOCK_ATTEMPTS: u32 = 10;

/// Pause between two attempts of [`LOCK_ATTEMPTS`].
pub const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Bounds of a removal transaction: the locks on the reconciler's own table
/// wait at most 2 s; `payments`' lock is never waited for (`NOWAIT`).
const STEP_TIMEOUTS: Timeouts = Timeouts {
    statement: "60s",
    lock: "2s",
};

/// The transaction id that created `reconciliation_runs.job` (migration
/// 0001's transaction): the anchor of the rules above.
const ANCHOR: &str = "(SELECT r.xmin FROM pg_attribute r
                        WHERE r.attrelid = to_regclass('reconciliation_runs')
                          AND r.attname = 'job' AND NOT r.attisdropped)";

/// How a removal step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// Removed.
    Done,
    /// The lock was not available: left for the next `migrate`.
    Deferred,
    /// The database refused (e.g. a view of the application depends on the
    /// column): kept, with the database's message.
    Refused(String),
}

/// Whether `error` is PostgreSQL's `lock_not_available` (55P03): a `NOWAIT`
/// or a `lock_timeout` that gave up.
pub fn is_lock_unavailable(error: &StoreError) -> bool {
    error
        .source
        .as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == "55P03")
}

/// Whether `error` is a refusal that removing an object must respect
/// (dependent objects, 2BP01): the database's message.
fn refusal(error: &StoreError) -> Option<String> {
    let db = error.source.as_database_error()?;
    (db.code().as_deref() == Some("2BP01")).then(|| db.message().to_owned())
}

/// The columns of [`COLUMNS`] that migration 0001 added to `payments` (see
/// the module's rule), in that order.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn reconciler_columns(conn: &mut PgConnection) -> Result<Vec<String>, StoreError> {
    super::query_scalar(&format!(
        "SELECT a.attname::text FROM pg_attribute a
          WHERE a.attrelid = to_regclass('payments') AND NOT a.attisdropped
            AND a.attname = ANY($1)
            AND EXISTS (SELECT 1 FROM _sqlx_migrations m WHERE m.version = 1 AND m.success)
            AND a.xmin = {ANCHOR}
          ORDER BY array_position($1, a.attname::text)"
    ))
    .bind(&COLUMNS[..])
    .fetch_all(conn)
    .await
    .context("reading which columns of payments the reconciler added")
}

/// Columns of [`COLUMNS`] on `payments` that the reconciler did not add
/// (the application's own): kept, reported once.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn applications_columns(conn: &mut PgConnection) -> Result<Vec<String>, StoreError> {
    let present: Vec<String> = super::query_scalar(
        "SELECT a.attname::text FROM pg_attribute a
          WHERE a.attrelid = to_regclass('payments') AND NOT a.attisdropped
            AND a.attname = ANY($1)
          ORDER BY array_position($1, a.attname::text)",
    )
    .bind(&COLUMNS[..])
    .fetch_all(&mut *conn)
    .await
    .context("reading the columns of payments")?;
    let ours = reconciler_columns(conn).await?;
    Ok(present.into_iter().filter(|c| !ours.contains(c)).collect())
}

/// The indexes of [`INDEXES`] on `payments` that their migration built (see
/// the module's rule).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn reconciler_indexes(conn: &mut PgConnection) -> Result<Vec<String>, StoreError> {
    let (names, versions): (Vec<&str>, Vec<i64>) = INDEXES.iter().copied().unzip();
    super::query_scalar(&format!(
        "SELECT c.relname::text
           FROM unnest($1::text[], $2::bigint[]) AS w(name, version)
           JOIN pg_class c ON c.relname = w.name
           JOIN pg_index i ON i.indexrelid = c.oid
          WHERE i.indrelid = to_regclass('payments')
            AND EXISTS (SELECT 1 FROM _sqlx_migrations m
                         WHERE m.version = w.version AND m.success)
            AND age(c.xmin) < age({ANCHOR})
          ORDER BY w.version"
    ))
    .bind(&names)
    .bind(&versions)
    .fetch_all(conn)
    .await
    .context("reading which indexes of payments the reconciler built")
}

/// Foreign keys from `reconciliation_findings` to `payments`: their names.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn foreign_keys(conn: &mut PgConnection) -> Result<Vec<String>, StoreError> {
    super::query_scalar(
        "SELECT conname::text FROM pg_constraint
          WHERE contype = 'f' AND confrelid = to_regclass('payments')
            AND conrelid = to_regclass('reconciliation_findings')
          ORDER BY conname",
    )
    .fetch_all(conn)
    .await
    .context("reading the foreign keys of reconciliation_findings")
}

/// Drops the foreign key `name` of `reconciliation_findings`: the
/// reconciler's table locked (waiting at most 2 s), `payments` locked
/// `ACCESS EXCLUSIVE NOWAIT`, the constraint dropped, committed.
///
/// # Errors
/// [`StoreError`] from the database, other than a lock not available.
pub async fn drop_foreign_key(conn: &mut PgConnection, name: &str) -> Result<Removal, StoreError> {
    let sql = format!(
        "ALTER TABLE reconciliation_findings DROP CONSTRAINT IF EXISTS {}",
        quote(name)
    );
    with_payments_locked(conn, Some("reconciliation_findings"), &sql).await
}

/// Drops `columns` of `payments` in one statement, with `payments` locked
/// `ACCESS EXCLUSIVE NOWAIT` (a catalog change: the rows are not rewritten).
///
/// # Errors
/// [`StoreError`] from the database, other than a lock not available or a
/// dependent object.
pub async fn drop_columns(
    conn: &mut PgConnection,
    columns: &[String],
) -> Result<Removal, StoreError> {
    if columns.is_empty() {
        return Ok(Removal::Done);
    }
    let drops: Vec<String> = columns
        .iter()
        .map(|c| format!("DROP COLUMN IF EXISTS {}", quote(c)))
        .collect();
    let sql = format!("ALTER TABLE payments {}", drops.join(", "));
    with_payments_locked(conn, None, &sql).await
}

/// Runs `sql` in a transaction holding `payments` in `ACCESS EXCLUSIVE`
/// mode, taken `NOWAIT` (after `first`, a reconciler table, locked the same
/// way with the 2 s timeout), up to [`LOCK_ATTEMPTS`] times.
async fn with_payments_locked(
    conn: &mut PgConnection,
    first: Option<&str>,
    sql: &str,
) -> Result<Removal, StoreError> {
    for attempt in 1..=LOCK_ATTEMPTS {
        if attempt > 1 {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        let mut tx = super::begin_with(&mut *conn, STEP_TIMEOUTS)
            .await
            .context("opening a transaction")?;
        let mut steps = Vec::new();
        if let Some(table) = first {
            steps.push(format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"));
        }
        steps.push("LOCK TABLE payments IN ACCESS EXCLUSIVE MODE NOWAIT".to_owned());
        steps.push(sql.to_owned());
        let mut failed = None;
        for step in &steps {
            if let Err(e) = super::query(step)
                .execute(&mut *tx)
                .await
                .context("removing what an earlier release added to payments")
            {
                failed = Some(e);
                break;
            }
        }
        match failed {
            None => {
                tx.commit()
                    .await
                    .context("removing what an earlier release added to payments")?;
                return Ok(Removal::Done);
            }
            Some(e) => {
                tx.rollback().await.context("rolling back")?;
                if is_lock_unavailable(&e) {
                    continue;
                }
                if let Some(message) = refusal(&e) {
                    return Ok(Removal::Refused(message));
                }
                return Err(e);
            }
        }
    }
    Ok(Removal::Deferred)
}

/// Drops the index `name` with `DROP INDEX CONCURRENTLY IF EXISTS` under
/// [`INDEX_LOCK_TIMEOUT`] (`conn` outside any transaction). An attempt that
/// times out may leave the index invalid; the next `migrate` finishes it.
///
/// # Errors
/// [`StoreError`] from the database, other than a lock not available.
pub async fn drop_index_concurrently(
    conn: &mut PgConnection,
    name: &str,
) -> Result<Removal, StoreError> {
    let dropped = concurrently(
        conn,
        &format!("DROP INDEX CONCURRENTLY IF EXISTS {}", quote(name)),
    )
    .await;
    match dropped {
        Ok(()) => Ok(Removal::Done),
        Err(e) if is_lock_unavailable(&e) => Ok(Removal::Deferred),
        Err(e) => match refusal(&e) {
            Some(message) => Ok(Removal::Refused(message)),
            None => Err(e),
        },
    }
}

/// Runs a `CREATE`/`DROP INDEX CONCURRENTLY` statement (which cannot run in a
/// transaction) under [`INDEX_LOCK_TIMEOUT`] and without a statement timeout
/// (building an index on a large table takes as long as it takes, whatever
/// `statement_timeout` the role has by default): a session
/// `SET` of both before it and `RESET` after (back to the role's defaults),
/// on the same connection (`migrate`'s pool has one connection).
///
/// # Errors
/// [`StoreError`] from the database; [`is_lock_unavailable`] tells a lock
/// that was not granted in time.
pub async fn concurrently(conn: &mut PgConnection, sql: &str) -> Result<(), StoreError> {
    sqlx::raw_sql(&format!(
        "SET lock_timeout = '{INDEX_LOCK_TIMEOUT}'; SET statement_timeout = 0"
    ))
    .execute(&mut *conn)
    .await
    .context("bounding the index build's lock wait")?;
    let done = sqlx::raw_sql(sql)
        .execute(&mut *conn)
        .await
        .context("building or dropping an index on payments");
    sqlx::raw_sql("RESET lock_timeout; RESET statement_timeout")
        .execute(&mut *conn)
        .await
        .context("resetting lock_timeout and statement_timeout")?;
    done.map(|_| ())
}

/// `name` as a quoted identifier.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
