//! The cursor's promises: the whole table is walked, drift is recorded once
//! across cycles, and two runs on one cursor never both commit.

mod support;

use std::time::Duration;

use sqlx::PgPool;
use stripe_reconciler::scan::{run_batch, Mode, RunError};
use support::*;
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, Request};

/// The design note's broken scan: "the 200 most recently updated rows".
async fn scan_broken(pool: &PgPool) {
    sqlx::query(
        "UPDATE payments SET last_reconciled_at = now()
          WHERE id IN (SELECT id FROM payments ORDER BY updated_at DESC LIMIT 200)",
    )
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_cursor_reaches_rows_that_limit_200_starves(pool: PgPool) {
    // 500 rows with distinct updated_at, as in the design note's test.
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         SELECT 'o' || i, 'pi_' || i, 'paid', now() - interval '30 days', now() - interval '1 day' + i * interval '1 second'
           FROM generate_series(1, 500) AS i",
    )
    .execute(&pool)
    .await
    .unwrap();
    let never = "SELECT count(*) FROM payments WHERE last_reconciled_at IS NULL";

    for _ in 0..10 {
        scan_broken(&pool).await;
    }
    assert_eq!(
        count(&pool, never).await,
        300,
        "ten hourly LIMIT-200 scans leave 300 rows unchecked"
    );

    sqlx::query("UPDATE payments SET last_reconciled_at = NULL")
        .execute(&pool)
        .await
        .unwrap();
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;
    let gw = gateway(&stripe);
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let report = run_batch(&pool, &gw, &settings(200), Mode::Write, None)
            .await
            .unwrap();
        assert!(!report.wrapped);
        remaining.push(count(&pool, never).await);
    }
    assert_eq!(
        remaining,
        vec![300, 100, 0],
        "every row confirmed within 3 batches"
    );

    let fourth = run_batch(&pool, &gw, &settings(200), Mode::Write, None)
        .await
        .unwrap();
    assert!(fourth.wrapped, "the 4th batch wraps");
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 0);
    let completed = count(
        &pool,
        "SELECT count(*) FROM reconciliation_cursor WHERE last_cycle_completed_at IS NOT NULL",
    )
    .await;
    assert_eq!(completed, 1, "the wrap stamps the cycle");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn two_full_cycles_record_each_drift_once(pool: PgPool) {
    insert_paid(&pool, 40).await;
    // Drift: pi_5 and pi_25 are pending locally; Stripe says succeeded for all.
    sqlx::query("UPDATE payments SET status = 'pending' WHERE id IN (5, 25)")
        .execute(&pool)
        .await
        .unwrap();
    // pi_33 is paid locally but canceled at Stripe.
    let stripe = MockServer::start().await;
    mount(&stripe, "pi_33", ok("pi_33", "canceled")).await;
    Mock::given(method("GET"))
        .and(path_regex("^/v1/payment_intents/pi_[0-9]+$"))
        .respond_with(|req: &Request| ok(req.url.path().rsplit('/').next().unwrap(), "succeeded"))
        .mount(&stripe)
        .await;
    let gw = gateway(&stripe);

    let mut wraps = 0;
    let mut batches = 0;
    while wraps < 2 {
        let report = run_batch(&pool, &gw, &settings(15), Mode::Write, None)
            .await
            .unwrap();
        wraps += usize::from(report.wrapped);
        batches += 1;
    }
    assert_eq!(batches, 8, "3 batches + wrap, twice");
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        3
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings WHERE kind = 'missed_success' AND resolved_at IS NULL").await,
        2
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM outbox").await,
        2,
        "one command per finding, not per scan"
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox WHERE event_type = 'ApplyPaymentSucceeded'"
        )
        .await,
        2
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn two_runs_racing_on_one_cursor_commit_exactly_one_batch(pool: PgPool) {
    insert_paid(&pool, 30).await;
    sqlx::query("UPDATE payments SET status = 'pending' WHERE id <= 10")
        .execute(&pool)
        .await
        .unwrap();
    // Two Stripes that disagree, so the rows show whose batch committed. The
    // delay keeps both batches in phase 2 at the same time.
    let says_succeeded = stripe_answering("succeeded", Duration::from_millis(150)).await;
    let says_processing = stripe_answering("processing", Duration::from_millis(150)).await;
    let (gw_a, gw_b) = (gateway(&says_succeeded), gateway(&says_processing));
    let s = settings(20);

    let (a, b) = tokio::join!(
        run_batch(&pool, &gw_a, &s, Mode::Write, None),
        run_batch(&pool, &gw_b, &s, Mode::Write, None)
    );

    let (winner_status, won, lost) = match (a, b) {
        (Ok(r), Err(e)) => ("succeeded", r, e),
        (Err(e), Ok(r)) => ("processing", r, e),
        other => panic!("expected exactly one winner: {other:?}"),
    };
    assert!(matches!(lost, RunError::ConcurrentRun { .. }), "{lost:?}");
    assert_eq!(lost.exit_code(), 75);
    assert_eq!(won.cursor_to, 20);
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 20);
    let observed: Vec<Option<String>> = sqlx::query_scalar(
        "SELECT observed_external_status FROM payments WHERE id <= 20 ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        observed.iter().all(|o| o.as_deref() == Some(winner_status)),
        "the loser wrote nothing: {observed:?}"
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM payments WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        20
    );
    // "succeeded": rows 1-10 (pending) are missed_success with a command each.
    // "processing": rows 1-10 are in flight; rows 11-20 (paid) need review.
    let (kind, commands) = if winner_status == "succeeded" {
        ("missed_success", 10)
    } else {
        ("paid_locally_not_externally", 0)
    };
    let kinds: Vec<(String, i64)> =
        sqlx::query_as("SELECT kind, count(*) FROM reconciliation_findings GROUP BY kind")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        kinds,
        vec![(kind.to_owned(), 10)],
        "only the winner's findings"
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox").await, commands);
}
