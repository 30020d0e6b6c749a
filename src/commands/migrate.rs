//! `stripe-reconciler migrate [--unique-payment-intent-index]`

use super::CommandError;
use crate::config::{OutboxShape, Settings};
use crate::db;
use crate::key::{KeyKind, Walk};
use crate::lifecycle::preflight::{self, check_schema};
use crate::store::outbox_shape::{self, OutboxState};
use crate::store::payment_index::{self as schema, IndexBuild, PaymentIntentIndex};
use crate::store::{self, Context, StoreError};

/// Checks the schema, applies the embedded migrations, creates the outbox
/// when it is absent, then makes sure duplicate PaymentIntent ids are found
/// by an index lookup: a plain index built `CONCURRENTLY` when none covers
/// `stripe_payment_intent_id` (UNIQUE only with `unique`, and only without
/// duplicates); an existing index of either kind is kept. Duplicates and the
/// absence of a UNIQUE index are reported.
pub(super) async fn migrate(settings: &Settings, unique: bool) -> Result<(), CommandError> {
    let pool = settings.database.connect_for_migrations().await?;
    let store = |e: StoreError| CommandError::Store(e);
    let mut conn = pool.acquire().await.context("connecting").map_err(store)?;
    // 1. Nothing is created for a schema the reconciler cannot work with
    //    (the partition's column too, when `payments` exists already). Every
    //    step runs under migrate's own timeouts, never the role's defaults.
    let mut tx = store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(store)?;
    let outbox = check_schema(&mut tx, settings, true).await?;
    if schema::payments_exists(&mut tx).await.map_err(store)? {
        preflight::checked(&mut tx, settings).await?;
    } else {
        // RECONCILER_TIMESTAMP_ZONE is known to the database (exit 78).
        crate::store::payments::time_columns(&mut tx, &settings.job.schema.times)
            .await
            .map_err(preflight::column_error)?;
    }
    tx.commit()
        .await
        .context("closing a transaction")
        .map_err(store)?;
    drop(conn);
    // 2. The embedded migrations (0001 without its outbox section), in the
    //    zone `payments`' wall-clock timestamps are read in.
    let upgrade = db::migrate_in(&pool, &settings.job.schema.times.zone).await?;
    for line in upgrade.lines() {
        println!("{line}");
    }
    tracing::info!(
        migrations = crate::MIGRATOR.iter().count(),
        "database schema is up to date"
    );
    let mut conn = pool.acquire().await.context("connecting").map_err(store)?;
    // 2b. The reconciler's key columns hold payments.id's type (issue 31).
    keys(&mut conn, settings).await?;
    // 3. The outbox: created only when absent; an existing one is left as it is.
    let table = settings.job.outbox.table.display();
    if outbox == OutboxState::Absent && settings.job.outbox.shape == OutboxShape::Reconciler {
        let mut tx = store::begin(&mut *conn)
            .await
            .context("opening a transaction")
            .map_err(store)?;
        store::lock_migrations(&mut tx).await.map_err(store)?;
        outbox_shape::create(&mut tx, &settings.job.outbox)
            .await
            .map_err(store)?;
        tx.commit()
            .await
            .context("creating the outbox")
            .map_err(store)?;
        println!(
            "created the outbox {table} (reconciler shape, drained by `stripe-reconciler repair`)"
        );
    } else {
        println!(
            "outbox {table} ({} shape) is {}: not altered",
            settings.job.outbox.shape.as_str(),
            outbox
        );
    }
    // 4. The PaymentIntent id lookup index.
    payment_intent_index(&mut conn, unique).await?;
    // 5. The partition's `(column, id)` index, when a partition is set.
    partition_index(&mut conn, settings).await
}

/// Aligns the reconciler's key columns with `payments.id`'s type and says
/// how the cycle walks the table, naming the index of the application's
/// that would keep list mode's batches dense when it is missing
/// (docs/keys.md; `migrate` never adds it: the table is the application's).
/// When the state table's key column changes type (the first `migrate` on a
/// uuid, text or numeric table), the existing payments are registered in it,
/// as migration 0010 does for integer keys.
async fn keys(conn: &mut sqlx::PgConnection, settings: &Settings) -> Result<(), CommandError> {
    let key = preflight::detect_key(&mut *conn).await?;
    let changed = crate::store::keys::align(&mut *conn, &key)
        .await
        .map_err(CommandError::Store)?;
    if !changed.is_empty() {
        println!(
            "payments.id is {}: the key column of {} now holds that type",
            key.sql(),
            changed.join(", ")
        );
    }
    if changed.iter().any(|t| t == "reconciliation_payment_state") {
        let times = crate::store::payments::time_columns(&mut *conn, &settings.job.schema.times)
            .await
            .map_err(preflight::column_error)?;
        let registered = crate::store::payment_state::register_existing(&mut *conn, &times)
            .await
            .map_err(CommandError::Store)?;
        tracing::info!(
            registered,
            "existing payments registered in the reconciler's state"
        );
    }
    match (key.kind(), key.walk()) {
        (_, Walk::CreatedAt) => println!(
            "payments.id is {}: each cycle walks payments in (created_at, id) order on your index leading with created_at",
            key.sql()
        ),
        (KeyKind::Uuid | KeyKind::Text, Walk::Key) => {
            println!(
                "payments.id is {}: each cycle walks payments in key order; random keys (uuid v4) scatter list mode's batches. \
                 An index of yours on a NOT NULL created_at makes the cycle walk in (created_at, id) order instead, e.g. \
                 CREATE INDEX CONCURRENTLY payments_created_at_id ON payments (created_at, id); migrate does not add it",
                key.sql()
            );
            tracing::warn!(key = key.sql(), "payments has no index leading with a NOT NULL created_at: walking in key order");
        }
        _ => {}
    }
    Ok(())
}

/// With `RECONCILER_PARTITION_COLUMN` set: checks the column (exit 78 naming
/// the variable) and makes sure an index on `payments (<column>, id)` exists,
/// a plain one built `CONCURRENTLY` when none does; reports which.
async fn partition_index(
    conn: &mut sqlx::PgConnection,
    settings: &Settings,
) -> Result<(), CommandError> {
    let store = |e: StoreError| CommandError::Store(e);
    let mut tx = store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(store)?;
    let settings = preflight::checked(&mut tx, settings).await?;
    let Some(partition) = &settings.job.schema.partition else {
        return Ok(());
    };
    let column = partition.column.as_str();
    let kept = schema::partition_index(&mut tx, &partition.column)
        .await
        .map_err(store)?;
    tx.commit()
        .await
        .context("closing a transaction")
        .map_err(store)?;
    if let Some(name) = kept {
        println!("payments ({column}, id) has the index {name}: kept");
        return Ok(());
    }
    println!(
        "building the index {} on payments ({column}, id) CONCURRENTLY (the application keeps writing; on a large table this takes minutes)",
        schema::partition_index_name(&partition.column)
    );
    let (built, name) = schema::create_partition_index(&mut *conn, &partition.column)
        .await
        .map_err(store)?;
    if built == IndexBuild::LockTimeout {
        println!(
            "{}",
            lock_skipped(&mut *conn, &name, &format!("payments ({column}, id)")).await?
        );
        return Ok(());
    }
    println!(
        "added the plain index {name} on payments ({column}, id) so the partition's batches are index range scans (RECONCILER_PARTITION_COLUMN); no constraint was added"
    );
    Ok(())
}

/// Prints (and logs) how many PaymentIntent ids several rows of `payments`
/// hold; returns the number of such ids. With an index on the column
/// (`indexed`), counted in bounded steps along it
/// ([`schema::count_duplicates_step`]), with a progress line every
/// [`PROGRESS_STEPS`] steps; without one, in one scan free of the role's
/// statement timeout.
async fn report_duplicates(
    conn: &mut sqlx::PgConnection,
    indexed: bool,
) -> Result<i64, CommandError> {
    let (ids, rows) = if indexed {
        println!(
            "counting duplicate PaymentIntent ids along the index, {} rows per step",
            schema::DUPLICATE_STEP_ROWS
        );
        let mut count = schema::DuplicateCount::default();
        let mut steps = 0u64;
        while !count.done {
            schema::count_duplicates_step(&mut *conn, &mut count)
                .await
                .map_err(CommandError::Store)?;
            steps += 1;
            tracing::debug!(
                rows_read = count.rows_read,
                "counting duplicate PaymentIntent ids"
            );
            if steps % PROGRESS_STEPS == 0 && !count.done {
                println!(
                    "counting duplicate PaymentIntent ids: {} rows read so far",
                    count.rows_read
                );
            }
        }
        (count.ids, count.rows)
    } else {
        println!("counting duplicate PaymentIntent ids (one scan of payments: no index orders the column yet)");
        schema::count_duplicates(&mut *conn)
            .await
            .map_err(CommandError::Store)?
    };
    if ids > 0 {
        println!(
            "payments.stripe_payment_intent_id: {ids} PaymentIntent id(s) are held by {rows} rows; \
             each such row is reported as duplicate_payment_intent and never repaired"
        );
        tracing::warn!(
            duplicate_ids = ids,
            rows,
            "payments holds duplicate PaymentIntent ids"
        );
    } else {
        println!("payments.stripe_payment_intent_id: no duplicates");
    }
    Ok(ids)
}

/// Steps of the duplicate count between two progress lines (a million rows).
const PROGRESS_STEPS: u64 = 20;

/// The PaymentIntent lookup index: the plain one built first when none
/// exists (unless a UNIQUE one is asked for), so the duplicate count reads
/// the column in index order, in bounded steps; then the count; then the
/// UNIQUE index when asked for and possible.
async fn payment_intent_index(
    conn: &mut sqlx::PgConnection,
    unique: bool,
) -> Result<(), CommandError> {
    let store = |e: StoreError| CommandError::Store(e);
    let mut tx = store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(store)?;
    let mut index = schema::payment_intent_index(&mut tx).await.map_err(store)?;
    tx.commit()
        .await
        .context("closing a transaction")
        .map_err(store)?;
    let added = index == PaymentIntentIndex::Missing && !unique;
    if added {
        if !build_plain_index(&mut *conn).await? {
            return Ok(());
        }
        index = PaymentIntentIndex::Plain;
        println!(
            "added the plain index {} so duplicates are found by index lookup; no UNIQUE constraint exists or was added",
            schema::PLAIN_INDEX
        );
    }
    let ids = report_duplicates(&mut *conn, index != PaymentIntentIndex::Missing).await?;
    match index {
        PaymentIntentIndex::Unique => {
            println!("payments.stripe_payment_intent_id has a UNIQUE index: kept");
            return Ok(());
        }
        PaymentIntentIndex::Plain if !unique => {
            if !added {
                println!("payments.stripe_payment_intent_id has a plain index and no UNIQUE constraint: kept (the reconciler adds no constraint)");
            }
            return Ok(());
        }
        _ => {}
    }
    if unique {
        if ids > 0 {
            println!(
                "--unique-payment-intent-index: not built, the duplicates above would violate it"
            );
        } else {
            return build_unique_index(&mut *conn).await;
        }
    }
    if index == PaymentIntentIndex::Missing && build_plain_index(&mut *conn).await? {
        println!(
            "added the plain index {} so duplicates are found by index lookup; no UNIQUE constraint exists or was added",
            schema::PLAIN_INDEX
        );
    }
    Ok(())
}

/// `--unique-payment-intent-index` on a column without duplicates.
async fn build_unique_index(conn: &mut sqlx::PgConnection) -> Result<(), CommandError> {
    println!(
        "building the index {} on payments (stripe_payment_intent_id) CONCURRENTLY (the application keeps writing; on a large table this takes minutes)",
        schema::UNIQUE_INDEX
    );
    let built = schema::create_payment_intent_index(&mut *conn, true)
        .await
        .map_err(CommandError::Store)?;
    if built == IndexBuild::LockTimeout {
        println!(
            "{}",
            lock_skipped(
                &mut *conn,
                schema::UNIQUE_INDEX,
                "payments (stripe_payment_intent_id)"
            )
            .await?
        );
        return Ok(());
    }
    println!(
        "--unique-payment-intent-index: added {}; the application can no longer insert a second row for one PaymentIntent",
        schema::UNIQUE_INDEX
    );
    Ok(())
}

/// Builds the plain lookup index `CONCURRENTLY` (free of the role's
/// statement timeout, its lock wait bounded), saying so first; `false` when
/// its lock was not granted (reported, with what to run).
async fn build_plain_index(conn: &mut sqlx::PgConnection) -> Result<bool, CommandError> {
    println!(
        "building the index {} on payments (stripe_payment_intent_id) CONCURRENTLY (the application keeps writing; on a large table this takes minutes)",
        schema::PLAIN_INDEX
    );
    let built = schema::create_payment_intent_index(&mut *conn, false)
        .await
        .map_err(CommandError::Store)?;
    if built == IndexBuild::LockTimeout {
        println!(
            "{}",
            lock_skipped(
                &mut *conn,
                schema::PLAIN_INDEX,
                "payments (stripe_payment_intent_id)"
            )
            .await?
        );
        println!(
            "until it is built, `run` stops with exit 78; to build it by hand instead (psql, as the table's owner):\n{}",
            schema::build_by_hand()
        );
        return Ok(false);
    }
    Ok(true)
}

/// The line `migrate` prints when a `CREATE INDEX CONCURRENTLY` on the
/// application's table did not get its lock in time. When the drop of the
/// build's invalid leftover timed out too (a transaction with an older
/// snapshot holds both back), the line says the index is still there: the
/// application's writes maintain it until the next `migrate` drops it.
async fn lock_skipped(
    conn: &mut sqlx::PgConnection,
    index: &str,
    on: &str,
) -> Result<String, CommandError> {
    let left = schema::invalid_indexes_named_in(&mut *conn, index)
        .await
        .map_err(CommandError::Store)?
        .iter()
        .any(|name| name == index);
    let timeout = crate::store::legacy::INDEX_LOCK_TIMEOUT;
    Ok(if left {
        format!(
            "{index} on {on}: not built, a transaction on payments held its lock for more than {timeout} (CREATE INDEX CONCURRENTLY waits for the transactions already running); {index} is left on payments, invalid (unused by queries, but the application's writes maintain it) and could not be dropped either: run migrate again later, it drops the leftover and builds the index"
        )
    } else {
        format!(
            "{index} on {on}: not built, a transaction on payments held its lock for more than {timeout} (CREATE INDEX CONCURRENTLY waits for the transactions already running); nothing was left behind, run migrate again later"
        )
    })
}
