//! The application's `payments` stays the application's (docs/schema.md,
//! "What `migrate` creates"): `migrate`
//! never queues the application's writes behind a lock, adds no column,
//! constraint or foreign key, and an upgrade from the previous release (the
//! migration files applied as released, by sqlx's own migrator) removes what
//! that release added, only where the reconciler's history shows it added it,
//! deferring a step whose lock is busy. A payment the application deletes
//! closes its findings as `payment_deleted` and skips its commands; a batch
//! that reads the table's last rows ends the cycle.

use crate::support::stripe_fake::StripeFake;
use sqlx::PgPool;

use crate::support::*;

/// An application's `payments` (bigint ids, a plain index on the
/// PaymentIntent column, nothing of the reconciler's), with `rows` rows.
async fn application_payments(pool: &PgPool, rows: i64, own_columns: bool) {
    let extra = if own_columns {
        // The design note's seed: the application's own columns of these names.
        ",\n observed_external_status text,\n last_reconciled_at timestamptz"
    } else {
        ""
    };
    sqlx::raw_sql(&format!(
        "CREATE TABLE payments (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text,
             status text NOT NULL,
             version bigint NOT NULL DEFAULT 0,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now(){extra});
         CREATE INDEX payments_pi ON payments (stripe_payment_intent_id);"
    ))
    .execute(pool)
    .await
    .unwrap();
    insert_paid(pool, rows).await;
}

/// An application transaction that updated payment 1 and stays open.
async fn hold_a_row(pool: &PgPool) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut app = pool.begin().await.unwrap();
    sqlx::query("UPDATE payments SET version = version + 1 WHERE id = 1")
        .execute(&mut *app)
        .await
        .unwrap();
    app
}

/// Runs `migrate` while the application inserts payments: each insert runs
/// with `lock_timeout` at 1 ms, so any wait for a lock `migrate` holds or
/// queues on `payments` fails it (55P03), however loaded the machine: the
/// proof is the absence of lock waits, not elapsed time. Returns the
/// binary's output and the inserts done while it ran (at least one).
async fn migrate_while_inserting(pool: &PgPool) -> (std::process::Output, u32) {
    let env = [("DATABASE_URL", database_url(pool))];
    let mut child = reconciler(&["migrate"], &env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut inserts = 0u32;
    loop {
        let mut tx = pool.begin().await.unwrap();
        sqlx::query("SET LOCAL lock_timeout = '1ms'")
            .execute(&mut *tx)
            .await
            .unwrap();
        let inserted = sqlx::query(
            "INSERT INTO payments (order_id, stripe_payment_intent_id, status) VALUES ('app', NULL, 'pending')",
        )
        .execute(&mut *tx)
        .await;
        if let Err(e) = inserted {
            let _ = child.kill();
            panic!("the application's insert waited for a lock while migrate ran: {e}");
        }
        tx.commit().await.unwrap();
        inserts += 1;
        if child.try_wait().unwrap().is_some() {
            break;
        }
    }
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    (out, inserts)
}

async fn columns_of_payments(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT attname::text FROM pg_attribute
          WHERE attrelid = 'payments'::regclass AND attnum > 0 AND NOT attisdropped
          ORDER BY attnum",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn indexes_of_payments(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE tablename = 'payments' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Constraints and triggers on `payments` other than its own primary key,
/// and foreign keys pointing at it.
async fn reconciler_hold_on_payments(pool: &PgPool) -> (i64, i64) {
    let constraints = count(
        pool,
        "SELECT count(*) FROM pg_constraint
          WHERE (conrelid = 'payments'::regclass AND contype <> 'p')
             OR confrelid = 'payments'::regclass",
    )
    .await;
    let triggers = count(
        pool,
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'payments'::regclass",
    )
    .await;
    (constraints, triggers)
}

const APP_COLUMNS: [&str; 7] = [
    "id",
    "order_id",
    "stripe_payment_intent_id",
    "status",
    "version",
    "created_at",
    "updated_at",
];

#[sqlx::test(migrations = false)]
async fn migrate_with_a_row_held_does_not_block_the_applications_inserts(pool: PgPool) {
    application_payments(&pool, 5, false).await;
    let app = hold_a_row(&pool).await;

    let (out, inserts) = migrate_while_inserting(&pool).await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert!(inserts >= 1);
    // The application's transaction was never disturbed.
    app.commit().await.unwrap();
    assert_eq!(
        count(&pool, "SELECT version FROM payments WHERE id = 1").await,
        1
    );
    assert_eq!(columns_of_payments(&pool).await, APP_COLUMNS);
    assert_eq!(
        indexes_of_payments(&pool).await,
        ["payments_pi", "payments_pkey"]
    );
    assert_eq!(reconciler_hold_on_payments(&pool).await, (0, 0));
    // The reconciler's own tables are there; its state knows every payment.
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE payment_id <= 5"
        )
        .await,
        5
    );
    // The application deletes a payment freely.
    sqlx::query("DELETE FROM payments WHERE id = 2")
        .execute(&pool)
        .await
        .unwrap();
}

/// A database migrated by the previous release: the migration files as
/// released (sqlx's migrator, every statement of 0001, 0005 and 0007), with
/// a finding and its queued repair command made by a scan.
async fn previous_release(pool: &PgPool, own_columns: bool) -> StripeFake {
    application_payments(pool, 3, own_columns).await;
    stripe_reconciler::MIGRATOR.run(pool).await.unwrap();
    // The tests' outbox: 0001's own section made it, as in the previous release.
    let pending = insert_payment(pool, "pi_Missed", "pending", 3600).await;
    let stripe = StripeFake::start().await;
    for i in 1..=3 {
        stripe.set_status(&format!("pi_{i}"), "succeeded");
    }
    stripe.set_status("pi_Missed", "succeeded");
    let report = scan(pool, &stripe, &settings(100)).await;
    assert_eq!(report.findings_created, 1);
    assert_eq!(report.commands_enqueued, 1);
    assert_eq!(findings_of(pool, pending).await.len(), 1);
    stripe
}

async fn kept_findings_and_commands(pool: &PgPool) -> (i64, i64) {
    (
        count(
            pool,
            "SELECT count(*) FROM reconciliation_findings WHERE resolved_at IS NULL",
        )
        .await,
        count(
            pool,
            "SELECT count(*) FROM outbox WHERE event_type LIKE 'ApplyPayment%' AND processed_at IS NULL",
        )
        .await,
    )
}

#[sqlx::test(migrations = false)]
async fn an_upgrade_removes_what_the_previous_release_added_deferring_while_a_row_is_held(
    pool: PgPool,
) {
    let _stripe = previous_release(&pool, false).await;
    let before = kept_findings_and_commands(&pool).await;
    assert_eq!(before, (1, 1));
    let mut expected_before: Vec<String> = APP_COLUMNS.iter().map(|c| c.to_string()).collect();
    expected_before.extend([
        "observed_external_status".into(),
        "last_reconciled_at".into(),
    ]);
    assert_eq!(columns_of_payments(&pool).await, expected_before);
    assert_eq!(
        reconciler_hold_on_payments(&pool).await.0,
        1,
        "the foreign key"
    );

    // 1. An application transaction holds a row: every step that needs a
    //    lock the application holds is deferred, none waits in its way.
    let app = hold_a_row(&pool).await;
    let (out, inserts) = migrate_while_inserting(&pool).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert!(inserts >= 1);
    let said = stdout(&out);
    assert!(said.contains("deferred"), "{said}");
    assert!(said.contains("run migrate again later"), "{said}");
    app.commit().await.unwrap();
    assert_eq!(kept_findings_and_commands(&pool).await, before);

    // 2. Once the application's transaction ended, a later migrate removes
    //    them all.
    let out = reconciler_output(&["migrate"], &[("DATABASE_URL", database_url(&pool))]).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let said = stdout(&out);
    assert!(!said.contains("deferred"), "{said}");
    for removed in [
        "foreign key reconciliation_findings_payment_id_fkey",
        "index payments_reconciled_or_created",
        "index payments_never_reconciled",
        "columns payments.observed_external_status, payments.last_reconciled_at",
    ] {
        assert!(
            said.contains(&format!("removed the {removed}")),
            "{removed}: {said}"
        );
    }
    assert_eq!(columns_of_payments(&pool).await, APP_COLUMNS);
    let indexes = indexes_of_payments(&pool).await;
    assert!(
        !indexes
            .iter()
            .any(|i| i == "payments_never_reconciled" || i == "payments_reconciled_or_created"),
        "{indexes:?}"
    );
    assert_eq!(reconciler_hold_on_payments(&pool).await, (0, 0));
    // Every finding and command kept.
    assert_eq!(kept_findings_and_commands(&pool).await, before);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        1
    );

    // 3. Nothing left: a third migrate removes nothing and says nothing of it.
    let out = reconciler_output(&["migrate"], &[("DATABASE_URL", database_url(&pool))]).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert!(!stdout(&out).contains("removed the"), "{}", stdout(&out));
}

#[sqlx::test(migrations = false)]
async fn an_upgrade_never_touches_the_applications_own_columns_of_those_names(pool: PgPool) {
    let _stripe = previous_release(&pool, true).await;
    let columns_before = columns_of_payments(&pool).await;
    assert!(columns_before.iter().any(|c| c == "last_reconciled_at"));

    let out = reconciler_output(&["migrate"], &[("DATABASE_URL", database_url(&pool))]).await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let said = stdout(&out);
    assert_eq!(columns_of_payments(&pool).await, columns_before, "{said}");
    assert!(
        said.contains("payments.last_reconciled_at is the application's own"),
        "{said}"
    );
    // What the reconciler did build on them goes: its indexes, its foreign key.
    let indexes = indexes_of_payments(&pool).await;
    assert!(
        !indexes
            .iter()
            .any(|i| i == "payments_never_reconciled" || i == "payments_reconciled_or_created"),
        "{indexes:?}"
    );
    assert_eq!(reconciler_hold_on_payments(&pool).await, (0, 0));
    assert_eq!(kept_findings_and_commands(&pool).await, (1, 1));
}

/// A fresh install through `migrate` (no previous release): the demo's
/// `payments` (created by the demo, never by `migrate`) gets none of the
/// reconciler's old columns, and ends in the same schema as an upgraded one.
#[sqlx::test(migrations = false)]
async fn a_fresh_install_and_an_upgrade_end_in_the_same_schema(pool: PgPool) {
    // The application's table (the demo's): migrate never creates it.
    create_demo_payments(&pool).await;
    let out = reconciler_output(&["migrate"], &[("DATABASE_URL", database_url(&pool))]).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert!(!stdout(&out).contains("removed the"), "{}", stdout(&out));
    let columns = columns_of_payments(&pool).await;
    assert!(
        !columns.iter().any(|c| c == "last_reconciled_at"),
        "{columns:?}"
    );
    assert!(!columns.iter().any(|c| c == "observed_external_status"));
    let indexes = indexes_of_payments(&pool).await;
    assert!(!indexes.iter().any(|i| i == "payments_never_reconciled"));
    assert!(!indexes
        .iter()
        .any(|i| i == "payments_reconciled_or_created"));
    let fks = count(
        &pool,
        "SELECT count(*) FROM pg_constraint WHERE confrelid = 'payments'::regclass",
    )
    .await;
    assert_eq!(fks, 0);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM _sqlx_migrations WHERE success").await,
        stripe_reconciler::MIGRATOR.iter().count() as i64
    );
}
