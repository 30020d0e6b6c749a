//! `migrate` with `RECONCILER_CHECKOUT_SESSION_COLUMN` (docs/checkout-sessions.md, "Events"):
//! it says
//! which index of the application's would serve the events job's lookups by
//! Checkout Session id, and never adds one to `payments`.

use crate::support::*;
use sqlx::PgPool;

async fn session_indexes(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes
          WHERE tablename = 'payments' AND indexdef LIKE '%(checkout_session_id)%'
          ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn migrate_names_the_session_index_that_would_help_and_never_adds_it(pool: PgPool) {
    sqlx::raw_sql("ALTER TABLE payments ADD COLUMN checkout_session_id text")
        .execute(&pool)
        .await
        .unwrap();
    let env = [
        ("DATABASE_URL", database_url(&pool)),
        ("RECONCILER_LOG_FORMAT", "pretty".to_owned()),
        (
            "RECONCILER_CHECKOUT_SESSION_COLUMN",
            "checkout_session_id".to_owned(),
        ),
    ];

    let out = reconciler_output(&["migrate"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert!(
        stdout(&out).contains(
            "payments (checkout_session_id) has no index leading with it: the events job's lookups of Checkout Session rows read the whole table"
        ),
        "{}",
        all_output(&out)
    );
    assert!(
        stdout(&out).contains(
            "CREATE INDEX CONCURRENTLY payments_checkout_session_id ON payments (\"checkout_session_id\"); migrate does not add it"
        ),
        "{}",
        all_output(&out)
    );
    assert!(
        session_indexes(&pool).await.is_empty(),
        "migrate added an index"
    );

    // The statement it prints works, and the next migrate sees that index.
    sqlx::raw_sql(
        "CREATE INDEX CONCURRENTLY payments_checkout_session_id ON payments (checkout_session_id)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let again = reconciler_output(&["migrate"], &env).await;
    assert_eq!(again.status.code(), Some(0), "{}", all_output(&again));
    assert!(
        stdout(&again)
            .contains("payments (checkout_session_id) has the index payments_checkout_session_id"),
        "{}",
        all_output(&again)
    );
    assert!(!stdout(&again).contains("has no index leading with it"));
}
