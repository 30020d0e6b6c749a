//! The migrations apply to an empty database and to one that already has the
//! application's `payments` and `outbox` tables.

use sqlx::PgPool;

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

    stripe_reconciler::MIGRATOR.run(&pool).await.unwrap();
    // Idempotent: a second run is a no-op.
    stripe_reconciler::MIGRATOR.run(&pool).await.unwrap();

    let (observed, reconciled): (Option<String>, Option<chrono::DateTime<chrono::Utc>>) =
        sqlx::query_as("SELECT observed_external_status, last_reconciled_at FROM payments")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (observed, reconciled),
        (None, None),
        "existing rows are kept"
    );
    let (attempts, processed): (i32, Option<chrono::DateTime<chrono::Utc>>) = sqlx::query_as(
        "SELECT attempts, processed_at FROM outbox WHERE event_type = 'OrderShipped'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (attempts, processed),
        (0, None),
        "the application's outbox rows are kept"
    );
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    for expected in [
        "payments_reconciled_or_created",
        "reconciliation_findings_open",
        "outbox_unprocessed",
    ] {
        assert!(
            indexes.iter().any(|i| i == expected),
            "{expected} missing from {indexes:?}"
        );
    }
}

#[sqlx::test(migrations = false)]
async fn the_lag_query_is_an_index_lookup(pool: PgPool) {
    stripe_reconciler::MIGRATOR.run(&pool).await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, last_reconciled_at)
         SELECT 'o' || i, 'pi_' || i, 'paid', now() - i * interval '1 minute',
                CASE WHEN i % 3 = 0 THEN NULL ELSE now() - i * interval '1 second' END
           FROM generate_series(1, 20000) AS i;
         ANALYZE payments;",
    )
    .execute(&pool)
    .await
    .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT now() - min(coalesce(last_reconciled_at, created_at)) FROM payments",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let plan = plan.join("\n");
    assert!(plan.contains("payments_reconciled_or_created"), "{plan}");
    assert!(!plan.contains("Seq Scan"), "{plan}");
}
