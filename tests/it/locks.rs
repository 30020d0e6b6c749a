//! The scan, the repair workers and the application on the same rows at once
//! (docs/scan.md, "Guards": one lock order, no deadlock): no deadlock between a scan and two
//! workers,
//! and the scan's row locks do not block inserts that reference a payment.
//! Part of `scripts/faults.sh`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgPool};
use stripe_reconciler::repair::{drain, RepairOptions};
use stripe_reconciler::store::payments;
use tokio_util::sync::CancellationToken;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::support::*;

/// Answers `succeeded` (the fixture: `latest_charge: null`) for any
/// PaymentIntent and counts the requests, so a test can start something
/// while a scan's phase 2 is under way.
struct CountingStripe(Arc<AtomicUsize>);

impl Respond for CountingStripe {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        self.0.fetch_add(1, Ordering::SeqCst);
        ok(req.url.path().rsplit('/').next().unwrap(), "succeeded")
    }
}

/// Rounds of the deadlock test, each on fresh data, and when its workers
/// start: after this many of the rescan's 1,000 reads, so they are mid-way
/// through the outbox when the scan's phase 3 locks the payments and
/// refreshes their findings.
const DEADLOCK_ROUNDS: [usize; 5] = [950, 900, 980, 850, 1000];

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_scan_and_two_repair_workers_on_the_same_rows_never_deadlock(pool: PgPool) {
    // Bare wiremock, not the fake: its own `Respond` counts the reads to
    // start the workers mid-way through the rescan (arrival timing,
    // docs/testing.md "Stripe in tests").
    let stripe = MockServer::start().await;
    let reads = Arc::new(AtomicUsize::new(0));
    Mock::given(method("GET"))
        .and(wiremock::matchers::path_regex(
            "^/v1/payment_intents/pi_[0-9]+$",
        ))
        .respond_with(CountingStripe(reads.clone()))
        .mount(&stripe)
        .await;
    let gw = gateway_with(&stripe, 20_000, Duration::from_secs(5));
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         SELECT 'order-' || i, 'pi_' || i, 'pending', now() - interval '30 days', now() - interval '1 hour'
           FROM generate_series(1, 1000) AS i",
    )
    .execute(&pool)
    .await
    .unwrap();
    let mut s = settings(1000);
    s.stripe.max_in_flight = 32;
    let small = RepairOptions {
        chunk: 50,
        ..RepairOptions::default()
    };

    // The scan and the workers on pools of their own, named, so that a
    // sampler can see them holding transactions at the same moment.
    let scan_pool = named_pool(&pool, "test-scan").await;
    let worker_pool = named_pool(&pool, "test-repair-worker").await;
    let mut rounds_overlapping = 0;
    let mut lock_waits_seen = 0;

    for (round, start_workers_after) in DEADLOCK_ROUNDS.into_iter().enumerate() {
        if round > 0 {
            sqlx::raw_sql(
                "DELETE FROM outbox;
                 DELETE FROM reconciliation_findings;
                 DELETE FROM reconciliation_unverifiable;
                 UPDATE payments SET status = 'pending', version = 0,
                        updated_at = now() - interval '1 hour';
                 TRUNCATE reconciliation_payment_state;
                 UPDATE reconciliation_cursor SET last_id = 0;",
            )
            .execute(&pool)
            .await
            .unwrap();
        }
        let first = scan_with(&scan_pool, &gw, &s).await.unwrap();
        assert_eq!(first.commands_enqueued, 1000, "round {round}: {first:?}");
        rewind_cursor(&pool).await;
        reads.store(0, Ordering::SeqCst);

        let token = CancellationToken::new();
        let worker = || async {
            wait::until_every("the rescan's reads", Duration::from_millis(1), || async {
                (reads.load(Ordering::SeqCst) >= start_workers_after).then_some(())
            })
            .await;
            drain(&worker_pool, small.clone(), &token).await
        };
        let sampling = CancellationToken::new();
        let sampler = tokio::spawn(sample_overlap(pool.clone(), sampling.clone()));
        let (rescan, a, b) = tokio::join!(scan_with(&scan_pool, &gw, &s), worker(), worker());
        sampling.cancel();
        let (overlapped, waits) = sampler.await.unwrap();
        rounds_overlapping += usize::from(overlapped);
        lock_waits_seen += waits;

        let rescan = rescan.unwrap_or_else(|e| panic!("round {round}: scan failed: {e:?}"));
        let a = a.unwrap_or_else(|e| panic!("round {round}: worker A failed: {e:?}"));
        let b = b.unwrap_or_else(|e| panic!("round {round}: worker B failed: {e:?}"));
        assert_eq!(rescan.scanned, 1000, "round {round}: {rescan:?}");
        assert!(scan_with(&pool, &gw, &s).await.unwrap().wrapped);
        assert_eq!(a.applied + b.applied, 1000, "round {round}: {a:?} {b:?}");
        assert_eq!(a.failed + b.failed, 0, "round {round}: {a:?} {b:?}");
        assert_eq!(
            count(
                &pool,
                "SELECT count(*) FROM payments WHERE status = 'paid' AND version = 1"
            )
            .await,
            1000,
            "round {round}"
        );
        assert_eq!(
            count(
                &pool,
                "SELECT count(*) FROM outbox WHERE event_type = 'PaymentStatusChanged'"
            )
            .await,
            1000,
            "round {round}: one event per payment"
        );
        assert_eq!(
            count(&pool, "SELECT count(DISTINCT aggregate_id) FROM outbox WHERE event_type = 'PaymentStatusChanged'").await,
            1000,
            "round {round}"
        );
        assert_eq!(
            count(
                &pool,
                "SELECT count(*) FROM reconciliation_findings WHERE kind = 'missed_success' AND resolved_at IS NULL"
            )
            .await,
            0,
            "round {round}: open missed_success findings"
        );
        assert_eq!(
            count(
                &pool,
                "SELECT count(*) FROM outbox WHERE event_type LIKE 'Apply%' AND processed_at IS NULL"
            )
            .await,
            0,
            "round {round}: unprocessed repair commands"
        );
    }
    // The test database is dropped after the test: no connection may stay.
    scan_pool.close().await;
    worker_pool.close().await;
    // The rounds proved something only if the scan and the workers really
    // held transactions on these rows at the same time, and one waited for
    // another's lock.
    assert!(
        rounds_overlapping >= 1 && lock_waits_seen >= 1,
        "the scan and the workers never held transactions at once \
         ({rounds_overlapping} of {} rounds overlapped, {lock_waits_seen} lock waits seen)",
        DEADLOCK_ROUNDS.len()
    );
}

/// A pool on the test's database whose connections carry `application_name = name`.
async fn named_pool(pool: &PgPool, name: &str) -> PgPool {
    let options = (*pool.connect_options()).clone().application_name(name);
    PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
        .unwrap()
}

/// Until `stop`, samples the test database's sessions: whether the scan's
/// and a worker's connections were ever inside a transaction at the same
/// moment, and how many samples saw a session waiting on a lock.
async fn sample_overlap(pool: PgPool, stop: CancellationToken) -> (bool, usize) {
    let mut overlapped = false;
    let mut waits = 0;
    let mut conn = pool.acquire().await.unwrap();
    while !stop.is_cancelled() {
        let (both, waiting): (bool, bool) = sqlx::query_as(
            "SELECT coalesce(bool_or(application_name = 'test-scan'), false)
                    AND coalesce(bool_or(application_name = 'test-repair-worker'), false),
                    coalesce(bool_or(wait_event_type = 'Lock'), false)
               FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()
                AND xact_start IS NOT NULL AND state <> 'idle'",
        )
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        overlapped |= both;
        waits += usize::from(waiting);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    (overlapped, waits)
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_scans_row_locks_do_not_block_inserts_referencing_the_payment(pool: PgPool) {
    let id = insert_payment(&pool, "pi_Locked", "pending", 3600).await;
    sqlx::raw_sql(
        "CREATE TABLE shipments (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                                 payment_id bigint NOT NULL REFERENCES payments (id))",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (version, updated_at): (i64, DateTime<Utc>) =
        sqlx::query_as("SELECT version, updated_at FROM payments WHERE id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();

    // The scan's phase 3: the batch's payments locked, in its own transaction.
    let mut scan_conn = pool.acquire().await.unwrap();
    let mut scan_tx = scan_conn.begin().await.unwrap();
    let key = stripe_reconciler::key::KeyType::default();
    let locked = payments::lock_unchanged(
        &mut scan_tx,
        &key,
        &[id.into()],
        &[version],
        &[updated_at],
        &Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(locked, vec![id.into()]);

    // The application, meanwhile, on another connection.
    let mut app = pool.acquire().await.unwrap();
    sqlx::query("SET lock_timeout = '1s'")
        .execute(&mut *app)
        .await
        .unwrap();

    let shipment = sqlx::query("INSERT INTO shipments (payment_id) VALUES ($1)")
        .bind(id)
        .execute(&mut *app)
        .await;
    assert!(
        shipment.is_ok(),
        "an insert referencing a payment the scan holds must not wait: {shipment:?}"
    );
    let finding = sqlx::query(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status) VALUES ($1, 'manual_note', 'pending')",
    )
    .bind(id)
    .execute(&mut *app)
    .await;
    assert!(finding.is_ok(), "{finding:?}");
    // The lock is real: a status change of the same payment does wait.
    let update = sqlx::query("UPDATE payments SET status = 'paid' WHERE id = $1")
        .bind(id)
        .execute(&mut *app)
        .await;
    assert!(
        update
            .as_ref()
            .is_err_and(|e| e.to_string().contains("lock timeout")),
        "{update:?}"
    );
    scan_tx.rollback().await.unwrap();
}
