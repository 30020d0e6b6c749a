//! `migrate` says what it leaves on the application's `payments` when a
//! `CREATE INDEX CONCURRENTLY` gives up: a transaction with an older
//! snapshot makes both the build and the drop of its invalid leftover time
//! out, and the invalid index (which the application's writes keep
//! maintaining) stays until the next `migrate`. The output must not claim
//! that nothing was left behind.

use sqlx::PgPool;

use crate::support::*;

/// Invalid indexes on `payments`.
async fn invalid_indexes(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
          WHERE i.indrelid = 'payments'::regclass AND NOT i.indisvalid",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = false)]
async fn an_index_build_that_times_out_reports_its_invalid_leftover(pool: PgPool) {
    // The application's table without a PaymentIntent index: migrate builds one.
    sqlx::raw_sql(
        "CREATE TABLE payments (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text,
             status text NOT NULL,
             version bigint NOT NULL DEFAULT 0,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now());
         INSERT INTO payments (order_id, stripe_payment_intent_id, status)
         VALUES ('o1', 'pi_A', 'paid'), ('o2', 'pi_B', 'paid');",
    )
    .execute(&pool)
    .await
    .unwrap();
    // A report holding a snapshot (a long REPEATABLE READ transaction): a
    // concurrent index build waits for it, and so does a concurrent drop.
    let mut report = pool.begin().await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *report)
        .await
        .unwrap();
    let _: i64 = sqlx::query_scalar("SELECT count(*) FROM payments")
        .fetch_one(&mut *report)
        .await
        .unwrap();

    let env = [("DATABASE_URL", database_url(&pool))];
    let out = reconciler_output(&["migrate"], &env).await;
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let left = invalid_indexes(&pool).await;
    report.rollback().await.unwrap();

    assert!(
        stdout.contains("not built"),
        "the build should have timed out behind the snapshot: {stdout}"
    );
    if left.is_empty() {
        assert!(stdout.contains("nothing was left behind"), "{stdout}");
    } else {
        assert!(
            !stdout.contains("nothing was left behind"),
            "{left:?} is still on payments, invalid, but the output says nothing was left: {stdout}"
        );
        for index in &left {
            assert!(
                stdout.contains(&format!("{index} is left on payments, invalid")),
                "{stdout}"
            );
        }
    }

    // The next migrate, without the snapshot, drops the leftover and builds it.
    let out = reconciler_output(&["migrate"], &env).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(invalid_indexes(&pool).await, Vec::<String>::new());
}
