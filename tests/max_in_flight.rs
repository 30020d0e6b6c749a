//! Bounded concurrency (docs/scan.md, "Three phases per batch"), in a test binary of its own
//! (as
//! `rate_limit.rs`): it measures arrival times, and cargo runs test binaries
//! one after another, so no other test's load adds jitter to them. The
//! set-based phase 3 test that lived here is in `it/scan.rs`.

// Test code: a failed unwrap is a failed test (Cargo.toml [lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use sqlx::PgPool;
use support::*;

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn reads_run_concurrently_but_never_more_than_max_in_flight(pool: PgPool) {
    insert_paid(&pool, 24).await;
    let latency = Duration::from_millis(200);
    let (stripe, arrivals) = recording_stripe(latency).await;
    let s = support::Settings {
        stripe: support::StripeSettings {
            max_in_flight: 3,
            ..settings(200).stripe
        },
        ..settings(200)
    };

    scan_with(&pool, &gateway(&stripe), &s).await.unwrap();

    let arrivals = arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), 24);
    // A request is open for `latency` after it arrives: the arrivals inside
    // any slightly shorter window are requests open at the same time.
    let peak = max_in_window(&arrivals, latency - Duration::from_millis(30));
    assert_eq!(
        peak, 3,
        "concurrent, and bounded by RECONCILER_MAX_IN_FLIGHT"
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        24
    );
}
