//! The shared rate limit over list pages, fallback retrieves and overlapping
//! batches, in a test binary of its own (as `rate_limit.rs`): cargo runs
//! test binaries one after another, so no other test's load adds jitter to
//! the arrival times this test measures.

// Test code: a failed unwrap is a failed test (Cargo.toml [lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use sqlx::PgPool;
use stripe_reconciler::config::{ReadMode, Sizing};
use stripe_reconciler::scan::ScanJob;
use support::stripe_fake::{StripeFake, LIST, RETRIEVE};
use support::*;

/// List pages, fallback retrieves and overlapping batches all share the one
/// rate limit: never more than RECONCILER_RATE_LIMIT_RPS requests in any
/// one-second window, and the next batch's reads start before the previous
/// batch's commit is done.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn list_pages_and_overlapping_batches_share_the_rate_limit(pool: PgPool) {
    let account = StripeFake::start().await;
    account.set_latency(Duration::from_millis(100));
    let t = chrono::Utc::now().timestamp() - 3600;
    for i in 0..120 {
        let pi = format!("pi_Rate{i:04}");
        insert_at(&pool, &pi, "paid", t - 1000 + i * 5).await;
        // A third of them created far from their row: retrieves.
        let created = if i % 3 == 0 {
            t - 40 * 86_400
        } else {
            t - 1000 + i * 5
        };
        account.add(None, &pi, "succeeded", created);
    }
    let s = Settings {
        scan: ScanSettings {
            batches_per_run: Sizing::Fixed(20),
            read_mode: ReadMode::List,
            ..settings(20).scan
        },
        stripe: StripeSettings {
            rate_limit_rps: 10,
            ..settings(20).stripe
        },
        ..settings(20)
    };

    let (summary, result) = run_job(
        &pool,
        &gateway_with(&account, 10, Duration::from_secs(2)),
        &s,
        ScanJob::default(),
    )
    .await;

    result.unwrap();
    assert_eq!(summary.rows_scanned, 120);
    let seen = account.seen();
    let arrivals: Vec<_> = seen.iter().map(|s| s.at).collect();
    assert!(account.count(LIST) >= 6 && account.count(RETRIEVE) >= 40);
    assert!(
        max_in_window(&arrivals, Duration::from_secs(1)) <= 10,
        "{} requests in one second",
        max_in_window(&arrivals, Duration::from_secs(1))
    );
    assert_eq!(
        summary.stripe_requests.total() as usize,
        seen.len(),
        "stripe_requests counts every request"
    );
    // Batches overlap: the second batch (rows 20..40) lists its window while
    // the first batch's own retrieves are still being sent.
    let first_batch_last_retrieve = seen
        .iter()
        .filter(|s| s.endpoint == RETRIEVE)
        .filter(|s| {
            s.id.as_deref()
                .and_then(|id| id.strip_prefix("pi_Rate"))
                .and_then(|n| n.parse::<i64>().ok())
                .is_some_and(|n| n < 20)
        })
        .map(|s| s.at)
        .max()
        .unwrap();
    let second_batch_first_page = seen
        .iter()
        .filter(|s| s.endpoint == LIST && s.gte >= Some(t - 1000 + 20 * 5))
        .map(|s| s.at)
        .min()
        .unwrap();
    assert!(
        second_batch_first_page < first_batch_last_retrieve,
        "the second batch waited for the first one's reads to finish"
    );
}
