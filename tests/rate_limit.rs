//! The shared rate limit, in a test binary of its own: cargo runs test
//! binaries one after another, so no other test's load adds jitter to the
//! arrival times this test measures.

// Test code: a failed unwrap is a failed test (Cargo.toml [lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use sqlx::PgPool;
use stripe_reconciler::scan::{run_batch, Mode, ScanGroups};
use support::*;

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn one_rate_limit_is_shared_by_every_concurrent_read(pool: PgPool) {
    insert_paid(&pool, 25).await;
    let (stripe, arrivals) = recording_stripe(Duration::ZERO).await;
    let s = support::Settings {
        stripe: support::StripeSettings {
            max_in_flight: 8,
            ..settings(200).stripe
        },
        ..settings(200)
    };

    let facts = facts(&pool, &s).await;
    run_batch(
        &pool,
        &gateway_with(&stripe, 10, Duration::from_secs(2)),
        &ScanGroups::of(&s, &facts),
        Mode::Write,
        None,
    )
    .await
    .unwrap();

    let arrivals = arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), 25);
    assert!(
        max_in_window(&arrivals, Duration::from_secs(1)) <= 10,
        "never more than 10 reads in a second"
    );
}
