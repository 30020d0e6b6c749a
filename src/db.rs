//! The PostgreSQL pool and the embedded migrations.
//!
//! Both work behind a transaction pooler (PgBouncer with `pool_mode =
//! transaction`): no session state is relied on. Timeouts are set per
//! transaction by [`crate::store::begin`], not with the startup `options`
//! parameter (a pooler refuses or drops it), and `migrate` serialises itself
//! with a transaction-scoped lock instead of sqlx's session advisory lock.

use std::time::{Duration, Instant};

use sqlx::migrate::{MigrateError, Migration};
use sqlx::{PgConnection, PgPool};

use crate::config::{ConnectError, TimestampZone};
use crate::store::{self, payment_index, schema, Context, StoreError, Timeouts};
use crate::upgrade::UpgradeReport;
use crate::MIGRATOR;

/// Could not reach or migrate the database.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// Connecting failed (host, credentials, TLS).
    #[error("cannot connect to PostgreSQL (DATABASE_URL)")]
    Connect(#[source] sqlx::Error),
    /// The pool could not be opened ([`crate::config::DatabaseSettings::connect`]).
    #[error(transparent)]
    Open(#[from] ConnectError),
    /// A migration failed.
    #[error("migration failed")]
    Migrate(#[source] MigrateError),
    /// A statement of `migrate` failed (a migration's own error included).
    #[error("migration failed")]
    Store(#[from] StoreError),
    /// The embedded 0001 no longer holds the outbox section this runner
    /// leaves out (a build defect, caught by a unit test).
    #[error("migration 1 does not hold the expected outbox section")]
    OutboxSectionMissing,
    /// The embedded 0001 no longer holds, exactly once, a statement this
    /// runner leaves out (a build defect, caught by a unit test).
    #[error("migration 1 does not hold the expected text {0:?}")]
    EditMissing(&'static str),
    /// A `CREATE INDEX CONCURRENTLY` ended with an invalid index (it was
    /// interrupted or failed half-way); the migration is not recorded, and the
    /// next `migrate` drops the invalid index and builds it again.
    #[error("migration {version} left the index {index} invalid; run migrate again")]
    InvalidIndex {
        /// The migration's version.
        version: i64,
        /// The invalid index.
        index: String,
    },
}

/// Applies the embedded migrations that are not applied yet, in order, with
/// sqlx's checks (no dirty migration, no unknown applied version, unchanged
/// checksums) and its bookkeeping table.
///
/// Behind a transaction pooler sqlx's own migrator fails twice: it names its
/// prepared statements, and it holds a session advisory lock across several
/// transactions, which the pooler can strand on a server connection (every
/// later `migrate` then waits for it forever). So each transactional migration
/// runs in its own transaction that first takes [`store::lock_migrations`]
/// (released at commit or rollback) and then re-reads what is applied: two
/// `migrate` runs at once apply each migration once. A `-- no-transaction`
/// migration (`CREATE INDEX CONCURRENTLY IF NOT EXISTS`) cannot hold a
/// transaction lock; it is idempotent, and a run that races another on it
/// fails on the unique version row and succeeds when run again.
///
/// Nothing here locks the application's `payments` against its reads or
/// writes: 0001 runs without the statements that did
/// (`APPLICATION_TABLE_EDITS`), 0005 and 0007 are only recorded
/// ([`RECORDED_ONLY`]), and then [`crate::upgrade::remove_legacy`] removes
/// what earlier releases added (its report is returned; a step whose lock was
/// not available is deferred, not waited for).
///
/// # Errors
/// [`DbError::Migrate`] for a dirty, changed or unknown migration;
/// [`DbError::Store`] when a statement fails (a migration's own error too).
pub async fn migrate(pool: &PgPool) -> Result<UpgradeReport, DbError> {
    migrate_in(pool, &TimestampZone::default()).await
}

/// [`migrate`] with the transactions' `TimeZone` set to `zone`
/// (`RECONCILER_TIMESTAMP_ZONE`): migration 0010 copies `payments.created_at`
/// into `reconciliation_payment_state`, and a `timestamp without time zone`
/// column is read in that zone, never the session's. Every statement runs
/// under the runner's own timeouts (`SET LOCAL`), never a role's default
/// `statement_timeout` (docs/operations.md, "A role's statement timeout").
///
/// # Errors
/// As [`migrate`].
pub async fn migrate_in(pool: &PgPool, zone: &TimestampZone) -> Result<UpgradeReport, DbError> {
    let mut conn = pool.acquire().await.map_err(DbError::Connect)?;
    let mut tx = store::begin(&mut *conn)
        .await
        .context("opening a transaction")?;
    schema::ensure_table(&mut tx).await?;
    // A uuid or text key: migration 1's foreign key cannot be built on it.
    store::keys::prepare(&mut tx).await?;
    tx.commit().await.context("creating _sqlx_migrations")?;
    for migration in MIGRATOR.iter() {
        if migration.migration_type.is_down_migration() {
            continue;
        }
        if RECORDED_ONLY.contains(&migration.version) {
            record_only(&mut conn, migration).await?;
        } else if migration.no_tx {
            apply_outside_a_transaction(&mut conn, migration).await?;
        } else {
            apply_in_a_transaction(&mut conn, migration, zone).await?;
        }
    }
    // What earlier releases added to `payments`, where the history shows it.
    Ok(crate::upgrade::remove_legacy(&mut conn).await?)
}

/// Records a [`RECORDED_ONLY`] migration with the file's checksum, its SQL
/// never run: it built an index on the application's table over columns no
/// release adds any more.
async fn record_only(conn: &mut PgConnection, migration: &Migration) -> Result<(), DbError> {
    let mut tx = store::begin_with(&mut *conn, MIGRATION_TIMEOUTS)
        .await
        .context("opening a transaction")?;
    store::lock_migrations(&mut tx).await?;
    if !is_applied(&mut tx, migration).await? {
        schema::record(&mut tx, migration, Duration::ZERO).await?;
        tracing::info!(
            version = migration.version,
            description = %migration.description,
            "migration recorded without running it: it built an index on payments over columns no release adds any more"
        );
    }
    tx.commit().await.context("recording a migration")?;
    Ok(())
}

/// A `-- no-transaction` migration: reads and writes in transactions (one
/// server connection each behind a pooler); only the migration itself runs
/// outside one.
async fn apply_outside_a_transaction(
    conn: &mut PgConnection,
    migration: &Migration,
) -> Result<(), DbError> {
    let mut tx = store::begin_with(&mut *conn, MIGRATION_TIMEOUTS)
        .await
        .context("opening a transaction")?;
    let applied = is_applied(&mut tx, migration).await?;
    tx.commit().await.context("reading _sqlx_migrations")?;
    if applied {
        return Ok(());
    }
    // An interrupted CONCURRENTLY build leaves an invalid index that `IF NOT
    // EXISTS` would skip, and every query that needs it would scan the
    // table: drop it and build it again.
    for index in payment_index::invalid_indexes_named_in(conn, &migration.sql).await? {
        payment_index::drop_invalid(conn, &index).await?;
    }
    let started = Instant::now();
    // Outside a transaction: free of the role's statement timeout by a
    // session setting, its lock wait bounded, both reset after.
    store::legacy::concurrently(conn, &migration.sql).await?;
    if let Some(index) = payment_index::invalid_indexes_named_in(conn, &migration.sql)
        .await?
        .pop()
    {
        return Err(DbError::InvalidIndex {
            version: migration.version,
            index,
        });
    }
    let mut tx = store::begin_with(&mut *conn, MIGRATION_TIMEOUTS)
        .await
        .context("opening a transaction")?;
    schema::record(&mut tx, migration, started.elapsed()).await?;
    tx.commit().await.context("recording a migration")?;
    Ok(())
}

/// A transactional migration: applied and recorded in one transaction that
/// first takes [`store::lock_migrations`].
async fn apply_in_a_transaction(
    conn: &mut PgConnection,
    migration: &Migration,
    zone: &TimestampZone,
) -> Result<(), DbError> {
    let mut tx = store::begin_with(&mut *conn, MIGRATION_TIMEOUTS)
        .await
        .context("opening a transaction")?;
    store::set_local_time_zone(&mut tx, zone).await?;
    store::lock_migrations(&mut tx).await?;
    if !is_applied(&mut tx, migration).await? {
        tracing::info!(
            version = migration.version,
            description = %migration.description,
            "applying migration (no statement timeout: a large payments table takes as long as it takes)"
        );
        let started = Instant::now();
        schema::execute_sql(&mut tx, &applied_sql(migration)?).await?;
        schema::record(&mut tx, migration, started.elapsed()).await?;
        tracing::info!(
            version = migration.version,
            description = %migration.description,
            "migration applied"
        );
    }
    tx.commit().await.context("committing a migration")?;
    Ok(())
}

/// Migrations recorded but never run: 0005 and 0007 built
/// `CREATE INDEX CONCURRENTLY` indexes on `payments` over the columns 0001
/// added, which this runner no longer adds (docs/design.md, "Invariants":
/// `migrate` adds nothing to the application's table but lookup indexes).
/// Installs that ran them have the indexes removed by [`crate::upgrade`].
pub const RECORDED_ONLY: [i64; 2] = [5, 7];

/// What migration 0001 runs without (its checksum is fixed: installs recorded
/// it), each `(text, replacement)` found exactly once: the two columns it put
/// on `payments` (in its `CREATE TABLE` for an empty database and as `ALTER
/// TABLE … ADD COLUMN` on an existing one: an `ACCESS EXCLUSIVE` lock that
/// queues the application's writes), and the foreign key from
/// `reconciliation_findings` (a `SHARE ROW EXCLUSIVE` lock on `payments`
/// now, a check on every application `DELETE` after). The findings keep the
/// payment's id as a value.
const APPLICATION_TABLE_EDITS: [(&str, &str); 3] = [
    (
        ",\n    observed_external_status text,\n    last_reconciled_at       timestamptz\n);",
        "\n);",
    ),
    (
        "ALTER TABLE payments ADD COLUMN IF NOT EXISTS observed_external_status text;\n\
         ALTER TABLE payments ADD COLUMN IF NOT EXISTS last_reconciled_at timestamptz;\n",
        "",
    ),
    (
        "payment_id       bigint      NOT NULL REFERENCES payments (id),",
        "payment_id       bigint      NOT NULL,",
    ),
];

/// The start and end of migration 0001's outbox section. Its checksum is
/// fixed (installs recorded it), so the file keeps the section, but the
/// outbox's name and shape are settings now: [`migrate`] runs 0001 without
/// it, and `store::outbox_shape::create` makes the outbox only when it is
/// absent (never altering or indexing the application's own).
const OUTBOX_SECTION: (&str, &str) = (
    "-- The outbox the seed writes to but does not define.",
    "WHERE processed_at IS NULL;\n",
);

/// The SQL to run for `migration`: its own, except 0001 without its outbox
/// section and without [`APPLICATION_TABLE_EDITS`]. The recorded checksum
/// stays the file's.
fn applied_sql(migration: &Migration) -> Result<String, DbError> {
    if migration.version != 1 {
        return Ok(migration.sql.to_string());
    }
    let sql: &str = &migration.sql;
    let start = sql
        .find(OUTBOX_SECTION.0)
        .ok_or(DbError::OutboxSectionMissing)?;
    let end = sql[start..]
        .find(OUTBOX_SECTION.1)
        .map(|i| start + i + OUTBOX_SECTION.1.len())
        .ok_or(DbError::OutboxSectionMissing)?;
    let mut sql = format!("{}{}", &sql[..start], &sql[end..]);
    for (text, replacement) in APPLICATION_TABLE_EDITS {
        if sql.matches(text).count() != 1 {
            return Err(DbError::EditMissing(text));
        }
        sql = sql.replacen(text, replacement, 1);
    }
    Ok(sql)
}

/// No statement timeout (an index build on a large table takes as long as it
/// takes); lock waits are bounded by the migrations themselves.
const MIGRATION_TIMEOUTS: Timeouts = Timeouts {
    statement: "0",
    lock: "0",
};

/// Whether `migration` is applied, after sqlx's checks.
async fn is_applied(conn: &mut PgConnection, migration: &Migration) -> Result<bool, DbError> {
    let applied = schema::applied(conn).await?;
    if let Some(dirty) = applied.iter().find(|a| !a.success) {
        return Err(DbError::Migrate(MigrateError::Dirty(dirty.version)));
    }
    if let Some(unknown) = applied.iter().find(|a| !MIGRATOR.version_exists(a.version)) {
        return Err(DbError::Migrate(MigrateError::VersionMissing(
            unknown.version,
        )));
    }
    match applied.iter().find(|a| a.version == migration.version) {
        Some(a) if a.checksum != *migration.checksum => Err(DbError::Migrate(
            MigrateError::VersionMismatch(migration.version),
        )),
        Some(_) => Ok(true),
        None => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migration_one_runs_without_any_outbox_statement() {
        let first = MIGRATOR.iter().find(|m| m.version == 1).unwrap();
        let sql = applied_sql(first).unwrap();
        assert!(first.sql.contains("CREATE TABLE IF NOT EXISTS outbox"));
        let statements: Vec<&str> = sql
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect();
        assert!(
            !statements.iter().any(|l| l.contains("outbox")),
            "{statements:#?}"
        );
        // Everything else of 0001 is still there.
        assert!(sql.contains("CREATE TABLE IF NOT EXISTS reconciliation_runs"));
        assert!(sql.contains("CREATE UNIQUE INDEX IF NOT EXISTS reconciliation_findings_open"));
    }

    #[test]
    fn migration_one_runs_without_touching_an_existing_payments_table() {
        let first = MIGRATOR.iter().find(|m| m.version == 1).unwrap();
        let sql = applied_sql(first).unwrap();
        let statements: String = sql
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(!statements.contains("ALTER TABLE payments"), "{statements}");
        assert!(!statements.contains("REFERENCES payments"), "{statements}");
        assert!(
            !statements.contains("observed_external_status"),
            "{statements}"
        );
        assert!(!statements.contains("last_reconciled_at"), "{statements}");
        // The demo's table is still created on an empty database.
        assert!(statements.contains("CREATE TABLE IF NOT EXISTS payments"));
        assert!(
            statements.contains("updated_at               timestamptz NOT NULL DEFAULT now()\n);")
        );
        assert!(statements.contains("payment_id       bigint      NOT NULL,"));
        // The two index migrations are recorded only.
        for version in RECORDED_ONLY {
            let m = MIGRATOR.iter().find(|m| m.version == version).unwrap();
            assert!(m
                .sql
                .contains("CREATE INDEX CONCURRENTLY IF NOT EXISTS payments_"));
        }
    }
}
