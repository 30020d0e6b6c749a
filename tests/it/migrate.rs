//! `migrate` and the migrations: they apply to an empty database and to one
//! that already has the application's `payments` and `outbox` tables (adding
//! nothing to either; `app_table` has the locks and the upgrade), report
//! duplicate PaymentIntent ids, rebuild an index an interrupted build left
//! invalid, and wait for another `migrate`'s lock (through PgBouncer).

use sqlx::PgPool;

use crate::support::pgbouncer;
use crate::support::secrets::{assert_no_secret, url_with_password};
use crate::support::*;

#[sqlx::test(migrations = false)]
async fn migrations_apply_over_existing_payments_and_outbox(pool: PgPool) {
    // An application schema that predates the reconciler: no reconciliation
    // columns on payments, an outbox without the worker's bookkeeping.
    sqlx::raw_sql(
        "CREATE TABLE payments (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text NOT NULL UNIQUE,
             status text NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
             version bigint NOT NULL DEFAULT 0,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now());
         CREATE TABLE outbox (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             aggregate_type text NOT NULL,
             aggregate_id text NOT NULL,
             event_type text NOT NULL,
             payload jsonb NOT NULL,
             created_at timestamptz NOT NULL DEFAULT now());
         INSERT INTO payments (order_id, stripe_payment_intent_id, status) VALUES ('o1', 'pi_1', 'paid');
         INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
             VALUES ('Order', '7', 'OrderShipped', '{}');",
    )
    .execute(&pool)
    .await
    .unwrap();

    let columns = |pool: PgPool| async move {
        sqlx::query_scalar::<_, String>(
            "SELECT table_name || '.' || column_name FROM information_schema.columns
              WHERE table_name IN ('payments', 'outbox') ORDER BY table_name, ordinal_position",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    let before = columns(pool.clone()).await;

    stripe_reconciler::db::migrate(&pool).await.unwrap();
    // Idempotent: a second run is a no-op.
    stripe_reconciler::db::migrate(&pool).await.unwrap();

    // Neither application table gained a column (docs/design.md, "Invariants": no column on a
    // table the reconciler did not create).
    assert_eq!(columns(pool.clone()).await, before);
    assert_eq!(count(&pool, "SELECT count(*) FROM payments").await, 1);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox WHERE event_type = 'OrderShipped'"
        )
        .await,
        1,
        "the application's outbox rows are kept"
    );
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        indexes.iter().any(|i| i == "reconciliation_findings_open"),
        "{indexes:?}"
    );
    for absent in [
        "payments_reconciled_or_created",
        "payments_never_reconciled",
        "outbox_unprocessed",
    ] {
        assert!(
            !indexes.iter().any(|i| i == absent),
            "{absent} in {indexes:?}"
        );
    }
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM pg_constraint WHERE confrelid = 'payments'::regclass"
        )
        .await,
        0,
        "no foreign key to payments"
    );
}

#[sqlx::test(migrations = false)]
async fn the_lag_query_is_an_index_lookup(pool: PgPool) {
    stripe_reconciler::MIGRATOR.run(&pool).await.unwrap();
    // 20000 payments, all but the newest 100 seen by the scan.
    sqlx::raw_sql(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at)
         SELECT 'o' || i, 'pi_' || i, 'paid', now() - i * interval '1 minute'
           FROM generate_series(1, 20000) AS i;
         INSERT INTO reconciliation_payment_state (payment_id, created_at, last_reconciled_at)
         SELECT id, created_at,
                CASE WHEN id % 3 = 0 THEN NULL ELSE now() - id * interval '1 second' END
           FROM payments WHERE id <= 19900;
         ANALYZE payments;
         ANALYZE reconciliation_payment_state;",
    )
    .execute(&pool)
    .await
    .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let key = stripe_reconciler::key::KeyType::default();
    let head = stripe_reconciler::store::payment_state::highest_seen(&mut conn, &key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.key.as_i64(), Some(19900));
    let plan: Vec<String> = sqlx::query_scalar(&format!(
        "EXPLAIN SELECT now() - {}",
        stripe_reconciler::store::stats::lag_since(&key, (1, 2), true, &Default::default())
    ))
    .bind(&head.key)
    .bind(head.created_at)
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let plan = plan.join("\n");
    assert!(plan.contains("reconciliation_payment_state_lag"), "{plan}");
    assert!(plan.contains("payments_pkey"), "{plan}");
    assert!(!plan.contains("Seq Scan"), "{plan}");
}

#[sqlx::test(migrations = false)]
async fn migrate_applies_the_schema(pool: PgPool) {
    // The application's table (the demo's): migrate never creates it.
    create_demo_payments(&pool).await;
    let env = [("DATABASE_URL", url_with_password(&pool))];
    let out = tokio::task::spawn_blocking(move || reconciler(&["migrate"], &env).output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_no_secret(&out);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_cursor").await,
        0,
        "table exists"
    );
}

/// An interrupted `CREATE INDEX CONCURRENTLY` leaves an invalid index that
/// `IF NOT EXISTS` would skip, and every lookup would then scan `payments`:
/// `migrate` drops it and builds it again.
#[sqlx::test(migrations = false)]
async fn migrate_rebuilds_an_index_an_interrupted_build_left_invalid(pool: PgPool) {
    payments_without_unique(&pool).await;
    insert_payment(&pool, "pi_One", "paid", 3600).await;
    let env = [("DATABASE_URL", database_url(&pool))];
    let out = reconciler_output(&["migrate"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    // Make the index invalid as an interrupted build leaves it.
    sqlx::raw_sql(
        "UPDATE pg_index SET indisvalid = false
          WHERE indexrelid = 'payments_stripe_payment_intent_id_lookup'::regclass",
    )
    .execute(&pool)
    .await
    .unwrap();

    let out = reconciler_output(&["migrate"], &env).await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let valid: bool = sqlx::query_scalar(
        "SELECT indisvalid FROM pg_index
          WHERE indexrelid = 'payments_stripe_payment_intent_id_lookup'::regclass",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(valid, "the invalid index was rebuilt");
}

async fn payment_intent_indexes(pool: &PgPool) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT indexname::text, indexdef FROM pg_indexes
          WHERE tablename = 'payments' AND indexdef LIKE '%(stripe_payment_intent_id)%'
          ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = false)]
async fn migrate_reports_duplicates_and_adds_a_plain_index(pool: PgPool) {
    payments_without_unique(&pool).await;
    for pi in [
        "pi_Twice",
        "pi_Twice",
        "pi_Thrice",
        "pi_Thrice",
        "pi_Thrice",
        "pi_Once",
    ] {
        insert_payment(&pool, pi, "paid", 3600).await;
    }
    let env = [("DATABASE_URL", database_url(&pool))];

    let out = reconciler_output(&["migrate"], &env).await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("2 PaymentIntent id(s)") && stdout.contains("5 rows"),
        "the duplicates are counted: {stdout}"
    );
    let indexes = payment_intent_indexes(&pool).await;
    assert_eq!(
        indexes.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["payments_stripe_payment_intent_id_lookup"],
        "{indexes:?}"
    );
    assert!(!indexes[0].1.contains("UNIQUE"), "{indexes:?}");
    assert_eq!(count(&pool, "SELECT count(*) FROM payments").await, 6);

    // Again: still exit 0, still one index.
    let out = reconciler_output(&["migrate"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(payment_intent_indexes(&pool).await.len(), 1);
}

#[sqlx::test(migrations = false)]
async fn migrate_adds_a_unique_index_only_with_the_explicit_flag(pool: PgPool) {
    payments_without_unique(&pool).await;
    insert_payment(&pool, "pi_One", "paid", 3600).await;
    insert_payment(&pool, "pi_Two", "pending", 3600).await;
    let env = [("DATABASE_URL", database_url(&pool))];

    let out = reconciler_output(&["migrate", "--unique-payment-intent-index"], &env).await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let indexes = payment_intent_indexes(&pool).await;
    assert_eq!(
        indexes.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["payments_stripe_payment_intent_id_unique"],
        "{indexes:?}"
    );
    assert!(indexes[0].1.contains("UNIQUE"), "{indexes:?}");
    let duplicate = sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status) VALUES ('o', 'pi_One', 'pending')",
    )
    .execute(&pool)
    .await;
    assert!(duplicate.is_err(), "a duplicate can no longer be inserted");

    // Without the flag the existing UNIQUE index is kept, never dropped.
    let out = reconciler_output(&["migrate"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(payment_intent_indexes(&pool).await.len(), 1);
}

#[sqlx::test(migrations = false)]
async fn migrate_without_duplicates_adds_a_plain_index_and_says_no_unique_exists(pool: PgPool) {
    payments_without_unique(&pool).await;
    insert_payment(&pool, "pi_One", "paid", 3600).await;
    insert_payment(&pool, "pi_Two", "pending", 3600).await;
    let env = [("DATABASE_URL", database_url(&pool))];

    let out = reconciler_output(&["migrate"], &env).await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("no duplicates"), "{stdout}");
    assert!(stdout.contains("no UNIQUE constraint"), "{stdout}");
    let indexes = payment_intent_indexes(&pool).await;
    assert_eq!(
        indexes.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["payments_stripe_payment_intent_id_lookup"],
        "{indexes:?}"
    );
    assert!(!indexes[0].1.contains("UNIQUE"), "{indexes:?}");
    // The application may still write a second row for one PaymentIntent.
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status) VALUES ('o', 'pi_One', 'pending')",
    )
    .execute(&pool)
    .await
    .unwrap();
}

/// `migrate` serialises on a transaction-scoped lock (what another `migrate`
/// holds while it applies a migration): it waits while the lock is held and
/// finishes once that transaction ends, through the pooler.
#[sqlx::test(migrations = false)]
async fn migrate_waits_for_another_migrations_transaction_then_applies(pool: PgPool) {
    // The application's table (the demo's): migrate never creates it.
    create_demo_payments(&pool).await;
    let bouncer = pgbouncer::start(2).await;
    let mut other = pool.begin().await.unwrap();
    // The key of store::lock_migrations.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('stripe-reconciler migrate', 0))")
        .execute(&mut *other)
        .await
        .unwrap();
    let env = [("DATABASE_URL", bouncer.url(&database_name(&pool), ""))];
    let mut child = reconciler(&["migrate"], &env)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until migrate is seen blocked on the migration lock.
    wait::until_true("migrate waiting on the advisory lock", || async {
        wait::lock_waits(&pool, "advisory").await > 0
    })
    .await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "migrate must wait for the migration lock"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM _sqlx_migrations").await,
        0,
        "nothing applied while the lock is held"
    );
    other.rollback().await.unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    bouncer.assert_ok("migrate after the lock", &out);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM _sqlx_migrations WHERE success").await,
        stripe_reconciler::MIGRATOR.iter().count() as i64
    );
}
