//! Issue 11, "never stalls, never deadlocks, never lies": the scan and the
//! repair worker keep moving when some rows (or Stripe) misbehave, never
//! deadlock each other, and what they record is what Stripe says now.
//! Part of `scripts/faults.sh`.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::{Connection, PgPool};
use stripe_reconciler::reconcile::Verdict;
use stripe_reconciler::repair::worker::MAX_ATTEMPTS;
use stripe_reconciler::repair::{drain, RepairOptions};
use stripe_reconciler::scan::{run_batch, BatchReport, Mode, RunError};
use stripe_reconciler::store::payments;
use stripe_reconciler::stripe::{GatewayError, StripeGateway};
use support::*;
use tokio_util::sync::CancellationToken;
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const JOB: &str = "payments-vs-stripe";

async fn scan(pool: &PgPool, gw: &StripeGateway, s: &JobSettings) -> Result<BatchReport, RunError> {
    run_batch(pool, gw, s, Mode::Write, None).await
}

/// A retry of the cycle: the cursor goes back to the start WITHOUT a wrap
/// (`cycle_started_at` unchanged), as after a rolled-back or repeated run.
async fn rewind_cursor(pool: &PgPool) {
    sqlx::query("UPDATE reconciliation_cursor SET last_id = 0 WHERE job = $1")
        .bind(JOB)
        .execute(pool)
        .await
        .unwrap();
}

/// Runs batches until one reports `wrapped`; returns the batches run (the
/// wrapping one included).
async fn one_cycle(pool: &PgPool, gw: &StripeGateway, s: &JobSettings) -> u32 {
    for n in 1..=50 {
        if scan(pool, gw, s).await.unwrap().wrapped {
            return n;
        }
    }
    panic!("the cursor did not wrap in 50 batches");
}

/// Stripe's answer to `GET /v1/payment_intents?limit=1` (the outage probe).
async fn mount_probe(server: &MockServer, response: ResponseTemplate) {
    Mock::given(method("GET"))
        .and(path("/v1/payment_intents"))
        .and(query_param("limit", "1"))
        .respond_with(response)
        .mount(server)
        .await;
}

fn empty_list() -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("Request-Id", "req_probe1")
        .set_body_json(
            json!({"object": "list", "data": [], "has_more": false, "url": "/v1/payment_intents"}),
        )
}

fn server_error() -> ResponseTemplate {
    ResponseTemplate::new(500)
        .insert_header("Request-Id", "req_500")
        .set_body_json(
            json!({"error": {"type": "api_error", "message": "An unknown error occurred"}}),
        )
}

async fn probes(server: &MockServer) -> usize {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path() == "/v1/payment_intents")
        .count()
}

/// `count` with one bigint parameter.
async fn count_for(pool: &PgPool, sql: &str, id: i64) -> i64 {
    sqlx::query_scalar(sql)
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

// 1. A 404 is classified by its body.

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_404_that_is_neither_resource_missing_nor_a_wrong_url_leaves_only_that_row_unverifiable(
    pool: PgPool,
) {
    let stripe = MockServer::start().await;
    let mut healthy = Vec::new();
    for i in 0..7 {
        let pi = format!("pi_Healthy{i}");
        healthy.push(insert_payment(&pool, &pi, "paid", 3600).await);
        mount(&stripe, &pi, ok(&pi, "succeeded")).await;
    }
    // A Stripe envelope with another code, an empty object, a proxy's HTML page.
    let odd_code = insert_payment(&pool, "pi_OddCode", "pending", 3600).await;
    mount(
        &stripe,
        "pi_OddCode",
        ResponseTemplate::new(404).set_body_json(json!({"error": {
            "type": "invalid_request_error", "code": "parameter_unknown",
            "message": "Received unknown parameter: expand"}})),
    )
    .await;
    let empty = insert_payment(&pool, "pi_EmptyBody", "pending", 3600).await;
    mount(
        &stripe,
        "pi_EmptyBody",
        ResponseTemplate::new(404).set_body_json(json!({})),
    )
    .await;
    let html = insert_payment(&pool, "pi_HtmlBody", "pending", 3600).await;
    mount(
        &stripe,
        "pi_HtmlBody",
        ResponseTemplate::new(404).set_body_raw("<html><body>Not Found</body></html>", "text/html"),
    )
    .await;

    let report = scan(&pool, &gateway(&stripe), &settings(20))
        .await
        .expect("a 404 that says nothing is not a reason to abandon the batch");

    assert_eq!(report.verdicts.get(Verdict::Unverifiable), 3, "{report:?}");
    assert_eq!(report.verdicts.get(Verdict::InSync), 7, "{report:?}");
    for id in [odd_code, empty, html] {
        assert_eq!(
            verified(&pool, id).await,
            (None, false),
            "payment {id} is UNVERIFIABLE, not stamped"
        );
    }
    for id in &healthy {
        assert_eq!(verified(&pool, *id).await, (Some("succeeded".into()), true));
    }
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE kind = 'missing_externally'"
        )
        .await,
        0,
        "no row is claimed missing from Stripe on a 404 that did not say so"
    );
    assert_eq!(
        cursor(&pool, JOB).await,
        html,
        "the cursor moved past the batch"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn stripes_unrecognized_request_url_404_is_a_configuration_error_and_writes_nothing(
    pool: PgPool,
) {
    let stripe = MockServer::start().await;
    for i in 0..5 {
        let pi = format!("pi_Fine{i}");
        insert_payment(&pool, &pi, "pending", 3600).await;
        mount(&stripe, &pi, ok(&pi, "succeeded")).await;
    }
    insert_payment(&pool, "pi_X", "paid", 3600).await;
    mount(
        &stripe,
        "pi_X",
        ResponseTemplate::new(404).set_body_json(json!({"error": {
            "type": "invalid_request_error",
            "message": "Unrecognized request URL (GET: /v1/payment_intents/pi_X). Please see https://stripe.com/docs or we can help at https://support.stripe.com/."}})),
    )
    .await;

    let err = scan(&pool, &gateway(&stripe), &settings(20))
        .await
        .expect_err("a wrong URL must stop the run");

    assert!(
        matches!(
            err,
            RunError::StripeRejected(GatewayError::Misconfigured { status: 404, .. })
        ),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), 78);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox").await, 0);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM payments WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        0
    );
    assert!(cursor(&pool, JOB).await <= 0, "the cursor moved");
}

// 2. Rows that always fail at the head of a small batch.

/// Ten paid payments; the first six answer 500 on every attempt, the other
/// four `succeeded`. Returns the ids in order.
async fn six_failing_of_ten(pool: &PgPool, stripe: &MockServer) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 0..10 {
        let pi = format!("pi_Row{i}");
        ids.push(insert_payment(pool, &pi, "paid", 3600).await);
        if i < 6 {
            mount(stripe, &pi, server_error()).await;
        } else {
            mount(stripe, &pi, ok(&pi, "succeeded")).await;
        }
    }
    ids
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn rows_that_always_fail_at_the_head_of_a_batch_do_not_stall_the_scan_when_stripe_answers(
    pool: PgPool,
) {
    let stripe = MockServer::start().await;
    let ids = six_failing_of_ten(&pool, &stripe).await;
    mount_probe(&stripe, empty_list()).await;
    let gw = gateway(&stripe);
    let s = settings(10);

    let report = scan(&pool, &gw, &s)
        .await
        .expect("Stripe answers the probe: the batch commits");

    assert_eq!(probes(&stripe).await, 1, "Stripe was probed once");
    assert_eq!(report.verdicts.get(Verdict::Unverifiable), 6);
    assert_eq!(report.verdicts.get(Verdict::InSync), 4);
    assert_eq!(
        cursor(&pool, JOB).await,
        ids[9],
        "the cursor moved past them"
    );
    for id in &ids[..6] {
        assert_eq!(verified(&pool, *id).await, (None, false));
    }
    for id in &ids[6..] {
        assert_eq!(verified(&pool, *id).await, (Some("succeeded".into()), true));
    }
    // The next batch reaches the end of the table instead of retrying them forever.
    assert!(scan(&pool, &gw, &s).await.unwrap().wrapped);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn when_the_probe_fails_too_the_batch_is_abandoned_as_stripe_down(pool: PgPool) {
    let stripe = MockServer::start().await;
    six_failing_of_ten(&pool, &stripe).await;
    mount_probe(&stripe, server_error()).await;

    let err = scan(&pool, &gateway(&stripe), &settings(10))
        .await
        .expect_err("Stripe is down");

    assert!(
        matches!(
            err,
            RunError::StripeDown {
                failed: 6,
                asked: 10
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), 1);
    assert!(probes(&stripe).await >= 1, "Stripe was probed");
    assert_eq!(cursor(&pool, JOB).await, 0, "cursor unmoved");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM payments WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        0
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );
}

// 3. persistently_unverifiable.

async fn unverifiable_findings(
    pool: &PgPool,
    id: i64,
) -> Vec<(bool, Option<String>, Option<String>)> {
    sqlx::query_as(
        "SELECT resolved_at IS NULL, details->>'last_error', resolution
           FROM reconciliation_findings
          WHERE payment_id = $1 AND kind = 'persistently_unverifiable' ORDER BY id",
    )
    .bind(id)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_row_stripe_never_answers_for_gets_one_finding_after_three_cycles_and_it_clears(
    pool: PgPool,
) {
    let stripe = MockServer::start().await;
    let bad = insert_payment(&pool, "pi_Broken", "paid", 3600).await;
    mount(&stripe, "pi_Broken", server_error()).await;
    for i in 0..5 {
        let pi = format!("pi_Good{i}");
        insert_payment(&pool, &pi, "paid", 3600).await;
        mount(&stripe, &pi, ok(&pi, "succeeded")).await;
    }
    let gw = gateway(&stripe);
    let s = JobSettings {
        unverifiable_cycles: 3,
        ..settings(10)
    };

    // Cycle 1, retried three times before it completes: counts once.
    for _ in 0..3 {
        let r = scan(&pool, &gw, &s).await.unwrap();
        assert_eq!(r.verdicts.get(Verdict::Unverifiable), 1);
        rewind_cursor(&pool).await;
    }
    assert!(
        unverifiable_findings(&pool, bad).await.is_empty(),
        "retries within one cycle counted more than once"
    );
    assert_eq!(
        count_for(
            &pool,
            "SELECT cycles::bigint FROM reconciliation_unverifiable WHERE payment_id = $1",
            bad
        )
        .await,
        1
    );
    one_cycle(&pool, &gw, &s).await; // wrap 1
    one_cycle(&pool, &gw, &s).await; // wrap 2
    assert!(
        unverifiable_findings(&pool, bad).await.is_empty(),
        "a finding before the third cycle"
    );

    one_cycle(&pool, &gw, &s).await; // wrap 3

    let found = unverifiable_findings(&pool, bad).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].0, "open");
    let last_error = found[0].1.clone().unwrap_or_default();
    assert!(
        last_error.contains("500"),
        "details.last_error says what Stripe answered: {last_error:?}"
    );
    // Still failing: still one finding, never a second.
    one_cycle(&pool, &gw, &s).await;
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE kind = 'persistently_unverifiable'"
        )
        .await,
        1
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        1,
        "no other finding for the healthy rows"
    );

    // Stripe answers for it again, in sync: the finding is cleared.
    stripe.reset().await;
    mount(&stripe, "pi_Broken", ok("pi_Broken", "succeeded")).await;
    for i in 0..5 {
        let pi = format!("pi_Good{i}");
        mount(&stripe, &pi, ok(&pi, "succeeded")).await;
    }
    one_cycle(&pool, &gw, &s).await;

    assert_eq!(
        unverifiable_findings(&pool, bad).await,
        vec![(false, Some(last_error), Some("cleared".into()))]
    );
    assert_eq!(verified(&pool, bad).await, (Some("succeeded".into()), true));
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_unverifiable").await,
        0,
        "the streak is forgotten"
    );
}

// 4. The scan and two repair workers at once, on the same rows.

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
    s.max_in_flight = 32;
    let small = RepairOptions {
        chunk: 50,
        ..RepairOptions::default()
    };
    let started = std::time::Instant::now();

    for (round, start_workers_after) in DEADLOCK_ROUNDS.into_iter().enumerate() {
        if round > 0 {
            sqlx::raw_sql(
                "DELETE FROM outbox;
                 DELETE FROM reconciliation_findings;
                 DELETE FROM reconciliation_unverifiable;
                 UPDATE payments SET status = 'pending', version = 0,
                        updated_at = now() - interval '1 hour',
                        observed_external_status = NULL, last_reconciled_at = NULL;
                 UPDATE reconciliation_cursor SET last_id = 0;",
            )
            .execute(&pool)
            .await
            .unwrap();
        }
        let first = scan(&pool, &gw, &s).await.unwrap();
        assert_eq!(first.commands_enqueued, 1000, "round {round}: {first:?}");
        rewind_cursor(&pool).await;
        reads.store(0, Ordering::SeqCst);

        let token = CancellationToken::new();
        let worker = || async {
            while reads.load(Ordering::SeqCst) < start_workers_after {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            drain(&pool, small, &token).await
        };
        let (rescan, a, b) = tokio::join!(scan(&pool, &gw, &s), worker(), worker());

        let rescan = rescan.unwrap_or_else(|e| panic!("round {round}: scan failed: {e:?}"));
        let a = a.unwrap_or_else(|e| panic!("round {round}: worker A failed: {e:?}"));
        let b = b.unwrap_or_else(|e| panic!("round {round}: worker B failed: {e:?}"));
        assert_eq!(rescan.scanned, 1000, "round {round}: {rescan:?}");
        assert!(scan(&pool, &gw, &s).await.unwrap().wrapped);
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
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "took {:?}",
        started.elapsed()
    );
}

// 5. A stuck command whose finding a later scan clears is closed by that scan.

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_stuck_repair_command_is_closed_when_a_later_scan_clears_its_finding(pool: PgPool) {
    let stripe = MockServer::start().await;
    let id = insert_payment(&pool, "pi_Stuck", "pending", 3600).await;
    mount(&stripe, "pi_Stuck", ok("pi_Stuck", "succeeded")).await;
    let gw = gateway(&stripe);
    let s = settings(10);
    assert_eq!(scan(&pool, &gw, &s).await.unwrap().commands_enqueued, 1);
    sqlx::query(
        "UPDATE outbox SET attempts = $1, last_error = 'could not serialize access'
          WHERE event_type = 'ApplyPaymentSucceeded'",
    )
    .bind(MAX_ATTEMPTS)
    .execute(&pool)
    .await
    .unwrap();
    let before = drain(&pool, RepairOptions::default(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        (before.applied, before.stuck),
        (0, 1),
        "the command is stuck"
    );
    // The webhook got there some other way: the payment is paid, as Stripe says.
    sqlx::query(
        "UPDATE payments SET status = 'paid', version = version + 1,
                updated_at = now() - interval '1 hour' WHERE id = $1",
    )
    .bind(id)
    .execute(&pool)
    .await
    .unwrap();
    rewind_cursor(&pool).await;

    let report = scan(&pool, &gw, &s).await.unwrap();

    assert_eq!(report.findings_cleared, 1, "{report:?}");
    let finding: (Option<String>,) = sqlx::query_as(
        "SELECT resolution FROM reconciliation_findings WHERE payment_id = $1 AND kind = 'missed_success'",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(finding.0.as_deref(), Some("cleared"));
    let command: (bool, Option<String>) = sqlx::query_as(
        "SELECT processed_at IS NOT NULL, last_error FROM outbox WHERE event_type = 'ApplyPaymentSucceeded'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(command.0, "the stuck command is closed by the scan");
    assert!(
        command
            .1
            .as_deref()
            .unwrap_or("")
            .contains("resolved by a later scan"),
        "last_error says why: {:?}",
        command.1
    );
    let after = drain(&pool, RepairOptions::default(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(after.stuck, 0, "nothing left for a person: {after:?}");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox WHERE event_type = 'PaymentStatusChanged'"
        )
        .await,
        0,
        "the scan changed no payment"
    );
}

// 6. The review queue shows Stripe's current state.

async fn findings_of(
    pool: &PgPool,
    id: i64,
) -> Vec<(i64, String, Option<String>, Option<String>, bool)> {
    sqlx::query_as(
        "SELECT id, kind, external_status, resolution, resolved_at IS NULL
           FROM reconciliation_findings WHERE payment_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn last_seen(pool: &PgPool, finding: i64) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT last_seen_at FROM reconciliation_findings WHERE id = $1")
        .bind(finding)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn age_last_seen(pool: &PgPool) {
    sqlx::query("UPDATE reconciliation_findings SET last_seen_at = now() - interval '1 hour'")
        .execute(pool)
        .await
        .unwrap();
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_review_queue_follows_stripes_current_state(pool: PgPool) {
    let stripe = MockServer::start().await;
    let failed = insert_payment(&pool, "pi_Failed", "failed", 3600).await;
    let paid = insert_payment(&pool, "pi_Paid", "paid", 3600).await;
    mount(&stripe, "pi_Failed", ok("pi_Failed", "requires_action")).await;
    mount(&stripe, "pi_Paid", ok("pi_Paid", "requires_action")).await;
    let gw = gateway(&stripe);
    let s = settings(10);
    scan(&pool, &gw, &s).await.unwrap();
    let first = findings_of(&pool, failed).await;
    assert_eq!(
        first
            .iter()
            .map(|f| (f.1.as_str(), f.2.as_deref(), f.4))
            .collect::<Vec<_>>(),
        vec![(
            "unexpected:failed->requires_action",
            Some("requires_action"),
            true
        )]
    );
    let old_unexpected = first[0].0;
    let paid_finding = findings_of(&pool, paid).await[0].0;

    // Seen again, unchanged: the same finding, last seen now.
    age_last_seen(&pool).await;
    rewind_cursor(&pool).await;
    let before = Utc::now() - chrono::Duration::minutes(1);
    scan(&pool, &gw, &s).await.unwrap();
    assert_eq!(findings_of(&pool, failed).await.len(), 1);
    assert!(
        last_seen(&pool, old_unexpected).await > before,
        "last_seen_at refreshed"
    );

    // Stripe moves on to `processing`.
    stripe.reset().await;
    mount(&stripe, "pi_Failed", ok("pi_Failed", "processing")).await;
    mount(&stripe, "pi_Paid", ok("pi_Paid", "processing")).await;
    age_last_seen(&pool).await;
    rewind_cursor(&pool).await;
    let report = scan(&pool, &gw, &s).await.unwrap();

    let now = findings_of(&pool, failed).await;
    assert_eq!(
        now.iter()
            .map(|f| (f.0, f.1.as_str(), f.2.as_deref(), f.3.as_deref(), f.4))
            .collect::<Vec<_>>(),
        vec![
            (
                old_unexpected,
                "unexpected:failed->requires_action",
                Some("requires_action"),
                Some("superseded"),
                false
            ),
            (
                now[1].0,
                "unexpected:failed->processing",
                Some("processing"),
                None,
                true
            ),
        ],
        "{report:?}"
    );
    // Same kind, new Stripe status: the open finding is refreshed, not duplicated.
    let paid_now = findings_of(&pool, paid).await;
    assert_eq!(
        paid_now,
        vec![(
            paid_finding,
            "paid_locally_not_externally".into(),
            Some("processing".into()),
            None,
            true
        )]
    );
    assert!(last_seen(&pool, paid_finding).await > before);
}

// 7. The scan's row locks do not block inserts that reference the payments.

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
    let locked = payments::lock_unchanged(&mut scan_tx, &[id], &[version], &[updated_at])
        .await
        .unwrap();
    assert_eq!(locked, vec![id]);

    // The application, meanwhile, on another connection.
    let mut app = pool.acquire().await.unwrap();
    sqlx::query("SET lock_timeout = '1s'")
        .execute(&mut *app)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let shipment = sqlx::query("INSERT INTO shipments (payment_id) VALUES ($1)")
        .bind(id)
        .execute(&mut *app)
        .await;
    assert!(
        shipment.is_ok(),
        "an insert referencing a payment the scan holds must not wait: {shipment:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(900));
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

/// A 404 says nothing about the money: a dispute found earlier stays open
/// (and keeps blocking repairs) when Stripe later answers 404 for the row;
/// only an answer that shows the charge can clear it.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_404_never_clears_a_money_finding(pool: PgPool) {
    let stripe = MockServer::start().await;
    let payment = insert_payment(&pool, "pi_Disputed", "paid", 3600).await;
    let mut disputed = payment_intent("pi_Disputed", "succeeded");
    disputed["latest_charge"]["disputed"] = json!(true);
    mount(
        &stripe,
        "pi_Disputed",
        ResponseTemplate::new(200).set_body_json(disputed),
    )
    .await;
    let gw = gateway(&stripe);
    scan(&pool, &gw, &settings(200)).await.unwrap();
    let open_disputes = "SELECT count(*) FROM reconciliation_findings
                          WHERE payment_id = $1 AND kind = 'disputed' AND resolved_at IS NULL";
    assert_eq!(count_for(&pool, open_disputes, payment).await, 1);

    stripe.reset().await;
    mount(
        &stripe,
        "pi_Disputed",
        err(404, "invalid_request_error", "resource_missing"),
    )
    .await;
    rewind_cursor(&pool).await;
    scan(&pool, &gw, &settings(200)).await.unwrap();

    assert_eq!(
        count_for(&pool, open_disputes, payment).await,
        1,
        "the dispute stays open beside missing_externally"
    );
    assert_eq!(
        count_for(
            &pool,
            "SELECT count(*) FROM reconciliation_findings
              WHERE payment_id = $1 AND kind = 'missing_externally' AND resolved_at IS NULL",
            payment
        )
        .await,
        1
    );
}

/// An interrupted `CREATE INDEX CONCURRENTLY` leaves an invalid index that
/// `IF NOT EXISTS` would skip, and every batch would then scan `payments`:
/// `migrate` drops it and builds it again.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn migrate_rebuilds_an_index_an_interrupted_build_left_invalid(pool: PgPool) {
    // Make the index invalid as an interrupted build leaves it, and forget
    // that its migration ran.
    sqlx::raw_sql(
        "UPDATE pg_index SET indisvalid = false
          WHERE indexrelid = 'payments_never_reconciled'::regclass;
         DELETE FROM _sqlx_migrations WHERE version = 7;",
    )
    .execute(&pool)
    .await
    .unwrap();

    stripe_reconciler::db::migrate(&pool).await.unwrap();

    let valid: bool = sqlx::query_scalar(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = 'payments_never_reconciled'::regclass",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(valid, "the invalid index was rebuilt");
    assert_eq!(
        count_for(
            &pool,
            "SELECT count(*) FROM _sqlx_migrations WHERE version = $1",
            7
        )
        .await,
        1
    );
}

/// Sequence order is not commit order: a payment whose id was taken before,
/// but committed after, the cursor passed it is checked by the next batch
/// (one lookup on `payments_never_reconciled`), not a whole cycle later; a
/// row behind the cursor that Stripe cannot answer for waits for the next
/// cycle instead of being retried by every batch.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_payment_committed_after_the_cursor_passed_its_id_is_checked_by_the_next_batch(
    pool: PgPool,
) {
    let stripe = MockServer::start().await;
    for i in 1..=20 {
        let pi = format!("pi_Row{i}");
        insert_payment(&pool, &pi, "paid", 3600).await;
        mount(&stripe, &pi, ok(&pi, "succeeded")).await;
    }
    // Ids 21 and 22 are taken by two long transactions; the cursor passes
    // them (rows 23..=30 commit first).
    sqlx::query("SELECT setval(pg_get_serial_sequence('payments', 'id'), 22)")
        .execute(&pool)
        .await
        .unwrap();
    for i in 23..=30 {
        let pi = format!("pi_Row{i}");
        insert_payment(&pool, &pi, "paid", 3600).await;
        mount(&stripe, &pi, ok(&pi, "succeeded")).await;
    }
    let gw = gateway(&stripe);
    // Batches of 20 read up to 2 rows behind the cursor each.
    let s = settings(20);
    for _ in 0..2 {
        scan(&pool, &gw, &s).await.unwrap();
    }
    let cursor: i64 = sqlx::query_scalar("SELECT last_id FROM reconciliation_cursor")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(cursor, 30, "the cursor passed ids 21 and 22");

    // Now they commit: 21 is a missed webhook, 22 a PaymentIntent that
    // always answers 500 (Stripe itself answers the probe).
    for (id, pi) in [(21, "pi_Late"), (22, "pi_LateBroken")] {
        sqlx::query(
            "INSERT INTO payments (id, order_id, stripe_payment_intent_id, status, created_at, updated_at)
             OVERRIDING SYSTEM VALUE
             VALUES ($1, 'order-late', $2, 'pending', now() - interval '1 hour', now() - interval '1 hour')",
        )
        .bind(id)
        .bind(pi)
        .execute(&pool)
        .await
        .unwrap();
    }
    mount(&stripe, "pi_Late", ok("pi_Late", "succeeded")).await;
    mount(&stripe, "pi_LateBroken", server_error()).await;
    mount_probe(&stripe, empty_list()).await;
    for i in 31..=40 {
        let pi = format!("pi_Row{i}");
        insert_payment(&pool, &pi, "paid", 3600).await;
        mount(&stripe, &pi, ok(&pi, "succeeded")).await;
    }

    let next = scan(&pool, &gw, &s).await.unwrap();
    assert_eq!(
        next.scanned, 12,
        "ten rows after the cursor and the two late ones"
    );
    assert_eq!(
        count_for(
            &pool,
            "SELECT count(*) FROM reconciliation_findings
              WHERE payment_id = $1 AND kind = 'missed_success' AND resolved_at IS NULL",
            21
        )
        .await,
        1,
        "the late missed webhook is found by the next batch"
    );
    let reads_after_first = reads_of(&stripe, "/pi_LateBroken").await;
    assert!(reads_after_first > 0);

    // The next batch (the wrap) and a rewound batch in the same cycle do not
    // retry the failing late row.
    rewind_cursor(&pool).await;
    sqlx::query("UPDATE reconciliation_cursor SET last_id = 40")
        .execute(&pool)
        .await
        .unwrap();
    for i in 41..=45 {
        let pi = format!("pi_Row{i}");
        insert_payment(&pool, &pi, "paid", 3600).await;
        mount(&stripe, &pi, ok(&pi, "succeeded")).await;
    }
    let later = scan(&pool, &gw, &s).await.unwrap();
    assert_eq!(
        later.scanned, 5,
        "only the new rows: the failing late row waits for the next cycle"
    );
    assert_eq!(reads_of(&stripe, "/pi_LateBroken").await, reads_after_first);
}

/// Requests the mock received for paths ending in `suffix`.
async fn reads_of(stripe: &MockServer, suffix: &str) -> usize {
    stripe
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path().ends_with(suffix))
        .count()
}

/// A repair is applied only while the newest read supports it: when a later
/// read cannot confirm the drift, the pending command is closed, and the next
/// read that confirms it enqueues one again; the payment is repaired once.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_pending_repair_waits_while_stripe_cannot_confirm_the_drift(pool: PgPool) {
    let stripe = MockServer::start().await;
    let payment = insert_payment(&pool, "pi_Missed", "pending", 3600).await;
    mount(&stripe, "pi_Missed", ok("pi_Missed", "succeeded")).await;
    let gw = gateway(&stripe);
    scan(&pool, &gw, &settings(200)).await.unwrap();
    let live = "SELECT count(*) FROM outbox WHERE processed_at IS NULL
                 AND event_type = 'ApplyPaymentSucceeded' AND aggregate_id = $1::text";
    assert_eq!(count_for(&pool, live, payment).await, 1);

    // Stripe now answers 500 for it: the command is closed, not applied.
    stripe.reset().await;
    mount(&stripe, "pi_Missed", server_error()).await;
    rewind_cursor(&pool).await;
    scan(&pool, &gw, &settings(200)).await.unwrap();
    assert_eq!(count_for(&pool, live, payment).await, 0);
    let report = drain(&pool, RepairOptions::default(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.applied, 0);

    // Stripe confirms the success again: one new command, one repair.
    stripe.reset().await;
    mount(&stripe, "pi_Missed", ok("pi_Missed", "succeeded")).await;
    rewind_cursor(&pool).await;
    scan(&pool, &gw, &settings(200)).await.unwrap();
    assert_eq!(count_for(&pool, live, payment).await, 1);
    let report = drain(&pool, RepairOptions::default(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.applied, 1);
    assert_eq!(
        count_for(
            &pool,
            "SELECT count(*) FROM outbox WHERE event_type = 'PaymentStatusChanged' AND aggregate_id = $1::text",
            payment
        )
        .await,
        1
    );
}
