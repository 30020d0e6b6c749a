//! List mode on a random-key table without an index on `created_at`
//! (docs/keys.md, "The walk"): the walk goes over the reconciler's own
//! ordered copy, so each batch is a narrow `created_at` window again and is
//! read by list pages, not one retrieve per row. Counted from the Stripe
//! fake's requests, through the binary.

use serde_json::Value;
use sqlx::PgPool;

use crate::support::keyed::{app_table, migrate};
use crate::support::stripe_fake::LIST;
use crate::support::*;

/// Rows a minute apart (random uuids: key order is not time order).
async fn insert_rows(pool: &PgPool, from: i64, to: i64) {
    sqlx::query(
        "INSERT INTO payments (id, order_id, stripe_payment_intent_id, status, created_at, updated_at)
         SELECT gen_random_uuid(), 'order-' || i, 'pi_' || i, 'paid',
                now() - interval '1 hour' - (5000 - i) * interval '1 minute', now() - interval '1 hour'
           FROM generate_series($1::int, $2::int) AS i",
    )
    .bind(from as i32)
    .bind(to as i32)
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_uuid_table_without_a_created_at_index_is_read_by_list_pages(pool: PgPool) {
    app_table(&pool, "uuid", "bigint", false).await;
    insert_rows(&pool, 1, 2_400).await;
    migrate(&pool, &[]).await;
    // Rows inserted after `migrate`: the run registers them in the copy first.
    insert_rows(&pool, 2_401, 3_000).await;
    let stripe = stripe_mirroring(&pool, "succeeded", std::time::Duration::ZERO).await;
    let env = [
        ("DATABASE_URL", database_url(&pool)),
        ("STRIPE_API_KEY", "sk_test_walk".to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
        ("RECONCILER_BATCH_SIZE", "500".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "10".to_owned()),
    ];

    let out = reconciler_output(&["run"], &env).await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let summary: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(summary["rows_scanned"], 3_000, "{summary}");
    assert_eq!(summary["wrapped"], true, "{summary}");
    assert_eq!(summary["verdicts"]["in_sync"], 3_000, "{summary}");
    // About one list page per hundred rows; a retrieve per row would be 3,000.
    let lists = stripe.count(LIST);
    assert!(
        (lists as f64) / 3_000.0 <= 0.02,
        "{lists} list requests for 3,000 rows"
    );
    stripe.assert_read_by_list(30);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM payments p WHERE NOT EXISTS (
                 SELECT 1 FROM reconciliation_payment_state s
                  WHERE s.payment_id = p.id AND s.last_reconciled_at IS NOT NULL)"
        )
        .await,
        0,
        "every row confirmed"
    );
}

/// A cursor left by a walk by key (a uuid table read in retrieve mode, or by
/// an older release) is not a position in the own copy's `(created_at, id)`
/// order: list mode then walks the copy from its start, and does not end
/// the cycle on an empty read with the rows beyond that key never walked.
#[sqlx::test(migrations = false)]
async fn a_cursor_left_by_a_key_walk_restarts_the_copy_walk(pool: PgPool) {
    app_table(&pool, "uuid", "bigint", false).await;
    insert_rows(&pool, 1, 600).await;
    migrate(&pool, &[]).await;
    let stripe = stripe_mirroring(&pool, "succeeded", std::time::Duration::ZERO).await;
    let env = |mode: &str| {
        [
            ("DATABASE_URL", database_url(&pool)),
            ("STRIPE_API_KEY", "sk_test_walk".to_owned()),
            ("STRIPE_API_BASE", stripe.uri()),
            ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
            ("RECONCILER_BATCH_SIZE", "200".to_owned()),
            ("RECONCILER_BATCHES_PER_RUN", "1".to_owned()),
            ("RECONCILER_READ_MODE", mode.to_owned()),
        ]
    };
    let out = reconciler_output(&["run"], &env("retrieve")).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));

    let out = reconciler_output(&["run"], &env("list")).await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let summary: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(summary["wrapped"], false, "{summary}");
    assert_eq!(summary["rows_scanned"], 200, "{summary}");
}
