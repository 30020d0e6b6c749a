//! Faults and bad input: the job keeps its promises when the world misbehaves.
//! Run the whole fault suite with `scripts/faults.sh`.

use std::time::Duration;

use crate::support::arrange;
use crate::support::pushgateway::{self, value};
use crate::support::stripe_fake::{StripeFake, LIST, RETRIEVE};
use crate::support::*;
use sqlx::PgPool;
use stripe_reconciler::reconcile::Verdict;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const SECRET_KEY: &str = "sk_live_FaultSuiteKey0a1b2c3d4e5f";
const DB_PASSWORD: &str = "FaultSuite-db-password-27182";

fn env(pool: &PgPool, stripe: &str, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut url = url::Url::parse(&database_url(pool)).unwrap();
    url.set_password(Some(DB_PASSWORD)).unwrap();
    let mut env = vec![
        ("DATABASE_URL", url.to_string()),
        ("STRIPE_API_KEY", SECRET_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
        // These tests read small tables to their end in one run (`auto`
        // would plan one batch for them).
        ("RECONCILER_BATCHES_PER_RUN", "10".to_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}

fn all_output(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub(super) async fn nothing_written(pool: &PgPool) {
    assert_eq!(
        count(pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );
    assert_eq!(count(pool, "SELECT count(*) FROM outbox").await, 0);
    assert_eq!(
        count(
            pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        0
    );
    assert_eq!(
        phase_3_commits(pool).await,
        0,
        "the cursor moved or a cycle was stamped"
    );
}

/// Ten paid payments, one of them (id 3) pending while Stripe says succeeded.
async fn one_missed_success_in_ten(pool: &PgPool) {
    arrange::paid_with_pending(pool, 10, &[3]).await;
}

/// `stripe-reconciler run` in the background, output captured.
fn spawn_run(env: &[(&str, String)]) -> std::process::Child {
    reconciler(&["run"], env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// A healthy run after a fault records the one drift exactly once.
async fn next_run_completes_the_batch_once(pool: &PgPool) {
    let fast = stripe_mirroring(pool, "succeeded", Duration::ZERO).await;
    let out = reconciler_output(
        &["run"],
        &env(pool, &fast.uri(), &[("RECONCILER_BATCHES_PER_RUN", "1")]),
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    // In the default read mode: one list page, none failed, no retrieve.
    fast.assert_read_by_list(0);
    assert_eq!(
        count(pool, "SELECT count(*) FROM reconciliation_findings").await,
        1
    );
    assert_eq!(count(pool, "SELECT count(*) FROM outbox").await, 1);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn sigterm_abandons_the_batch_pushes_metrics_and_the_next_run_redoes_it(pool: PgPool) {
    arrange::paid_with_pending(&pool, 10, &[2]).await;
    let slow = stripe_mirroring(&pool, "succeeded", Duration::ZERO).await;
    let gw = pushgateway::start().await;
    // Read one by one, one read at a time: the batch's ten rows are ten
    // reads, so a run that went on reading after the signal asks more than
    // the one held.
    let run_env = env(
        &pool,
        &slow.uri(),
        &[
            ("PUSHGATEWAY_URL", &gw.url),
            ("RECONCILER_READ_MODE", "retrieve"),
            ("RECONCILER_MAX_IN_FLIGHT", "1"),
        ],
    );

    // In phase 2: the fake holds the first read unanswered; the signal is
    // sent while it is held, and the read is answered only once the binary
    // has logged that it got the signal, however slowly the machine runs.
    let mut first_read = slow.hold_request(RETRIEVE, 1);
    let log = std::env::temp_dir().join(format!("{}-sigterm.log", database_name(&pool)));
    let child = reconciler(&["run"], &run_env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    first_read.arrived().await;
    wait::signal(&child, "-TERM");
    wait::until_logged(&log, "shutdown signal received").await;
    first_read.release();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        std::fs::read_to_string(&log).unwrap()
    );
    std::fs::remove_file(&log).unwrap();

    assert_eq!(out.status.code(), Some(1), "{said}");
    assert_eq!(
        slow.count(RETRIEVE),
        1,
        "no read started after the signal (one at a time): {:#?}",
        slow.seen()
    );
    assert_eq!(requests(&slow).await, 1, "{:#?}", slow.seen());
    assert!(said.contains("interrupted"), "{said}");
    assert!(!said.contains(SECRET_KEY) && !said.contains(DB_PASSWORD));
    nothing_written(&pool).await;
    let m = gw.scrape().await;
    assert_eq!(
        value(
            &m,
            "stripe_reconciler_run_outcome",
            &[("job", "payments-vs-stripe"), ("outcome", "interrupted")]
        ),
        Some(1.0),
        "{m}"
    );
    assert!(!m.contains(SECRET_KEY) && !m.contains(DB_PASSWORD));

    // The lease was given back: the next run starts at once and redoes the batch.
    next_run_completes_the_batch_once(&pool).await;
    assert_eq!(
        cursor(&pool, "payments-vs-stripe").await,
        0,
        "the table's last rows were read: the cycle ended and the cursor is back at 0"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_connection_killed_in_phase_3_writes_nothing_and_exits_1(pool: PgPool) {
    one_missed_success_in_ten(&pool).await;
    let slow = stripe_mirroring(&pool, "succeeded", Duration::ZERO).await;
    let mut first_read = slow.hold_request(LIST, 1);
    let run_env = env(&pool, &slow.uri(), &[("RECONCILER_BATCHES_PER_RUN", "1")]);
    let child = spawn_run(&run_env);

    // While the job asks Stripe (its first read held unanswered by the
    // fake), hold the cursor row: phase 3 will wait on it, however slowly
    // the machine runs.
    first_read.arrived().await;
    let mut blocker = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM reconciliation_cursor FOR UPDATE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    first_read.release();
    // Wait until the job's phase 3 is blocked on that lock, then kill that
    // connection (only the job's, only in this test's database).
    let waiting = wait::until("phase 3 blocked on the cursor", || async {
        let pids =
            wait::reconciler_writers_waiting_on_a_lock(&pool, "reconciliation_payment_state").await;
        (!pids.is_empty()).then_some(pids)
    })
    .await;
    assert_eq!(waiting.len(), 1, "one connection waits: {waiting:?}");
    assert_eq!(wait::terminate(&pool, &waiting).await, 1);
    blocker.rollback().await.unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();

    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(!all_output(&out).contains(DB_PASSWORD));
    nothing_written(&pool).await;

    // The next run completes the batch once the lease the dead run held has expired.
    sqlx::query("UPDATE reconciliation_cursor SET lease_expires_at = now() - interval '1 second'")
        .execute(&pool)
        .await
        .unwrap();
    next_run_completes_the_batch_once(&pool).await;
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_connection_killed_in_phase_2_is_replaced_and_the_batch_commits_once(pool: PgPool) {
    one_missed_success_in_ten(&pool).await;
    let slow = stripe_mirroring(&pool, "succeeded", Duration::ZERO).await;
    let mut first_read = slow.hold_request(LIST, 1);
    let run_env = env(&pool, &slow.uri(), &[("RECONCILER_BATCHES_PER_RUN", "1")]);
    let child = spawn_run(&run_env);
    // In phase 2 (the first read reached Stripe and is held unanswered),
    // kill every connection the job holds to this test's database.
    first_read.arrived().await;
    let held = wait::until("the job's connections", || async {
        let pids = wait::reconciler_backends(&pool).await;
        (!pids.is_empty()).then_some(pids)
    })
    .await;
    assert_eq!(wait::terminate(&pool, &held).await, held.len());
    assert_eq!(
        phase_3_commits(&pool).await,
        0,
        "killed before phase 3 committed"
    );
    first_read.release();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();

    // No transaction was open during phase 2; the pool reconnects for phase 3.
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        1
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox").await, 1);
    assert_eq!(
        cursor(&pool, "payments-vs-stripe").await,
        0,
        "the table's last rows were read: the cycle ended and the cursor is back at 0"
    );
    assert_eq!(
        phase_3_commits(&pool).await,
        1,
        "the guard above sees a committed phase 3"
    );
}

/// Stripe's answer to a key of another account (or mode): the shared fake
/// holding nothing, so every list page is empty (200), every retrieve 404
/// `resource_missing`.
async fn stripe_of_another_account() -> StripeFake {
    StripeFake::start().await
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_key_for_another_account_stops_after_a_few_reads_with_exit_78(pool: PgPool) {
    insert_paid(&pool, 60).await;
    // pi_60 was verified by an earlier run with the right key.
    sqlx::query(
        "INSERT INTO reconciliation_payment_state (payment_id, created_at, observed_external_status)
         SELECT id, created_at, 'succeeded' FROM payments WHERE id = 60
         ON CONFLICT (payment_id) DO UPDATE SET observed_external_status = 'succeeded'",
    )
        .execute(&pool)
        .await
        .unwrap();
    let stripe = stripe_of_another_account().await;

    let out = reconciler_output(&["run"], &env(&pool, &stripe.uri(), &[])).await;

    assert_eq!(out.status.code(), Some(78), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("another account or mode"),
        "{}",
        all_output(&out)
    );
    // Listed first (the default read mode; the pages are empty), then the
    // rows no page held are retrieved, and those 404s stop the run.
    let (lists, retrieves) = (stripe.count(LIST), stripe.count(RETRIEVE));
    assert!(lists > 0, "the default read mode lists first");
    assert_eq!(stripe.failed_list_pages(), 0);
    assert!(
        (1..30).contains(&retrieves),
        "stopped after a few reads, not the whole batch: {retrieves}"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 0);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn genuinely_missing_payment_intents_at_the_start_of_a_batch_are_findings(pool: PgPool) {
    insert_paid(&pool, 40).await;
    sqlx::query(
        "INSERT INTO reconciliation_payment_state (payment_id, created_at, observed_external_status)
         SELECT id, created_at, 'succeeded' FROM payments WHERE id = 40
         ON CONFLICT (payment_id) DO UPDATE SET observed_external_status = 'succeeded'",
    )
        .execute(&pool)
        .await
        .unwrap();
    // pi_1 .. pi_12 are unknown to Stripe (old rows of another account); the rest exist.
    let stripe = StripeFake::start().await;
    stripe
        .answer_any("succeeded")
        .set_latency(Duration::from_millis(50));
    for i in 1..=12 {
        stripe.delete(&format!("pi_{i}"));
    }

    // The rule under test is the retrieve mode's (a 404 is only ever read
    // from a retrieve): the read mode is named, no list page is asked.
    let out = reconciler_output(
        &["run"],
        &env(
            &pool,
            &stripe.uri(),
            &[
                ("RECONCILER_BATCHES_PER_RUN", "1"),
                ("RECONCILER_READ_MODE", "retrieve"),
            ],
        ),
    )
    .await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(stripe.count(LIST), 0, "no list page in retrieve mode");
    let retrieves = stripe.count(RETRIEVE);
    assert!(retrieves >= 40, "every row retrieved: {retrieves}");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE kind = 'missing_externally'"
        )
        .await,
        12
    );
    assert_eq!(
        cursor(&pool, "payments-vs-stripe").await,
        0,
        "the table's last rows were read: the cycle ended and the cursor is back at 0"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_new_install_whose_every_read_is_404_stops_with_exit_78_and_writes_nothing(pool: PgPool) {
    insert_paid(&pool, 20).await;
    let stripe = stripe_of_another_account().await;

    let out = reconciler_output(&["run"], &env(&pool, &stripe.uri(), &[])).await;

    assert_eq!(out.status.code(), Some(78), "{}", all_output(&out));
    let (lists, retrieves) = (stripe.count(LIST), stripe.count(RETRIEVE));
    assert_eq!(stripe.failed_list_pages(), 0);
    assert!(
        lists > 0 && retrieves > 0,
        "{lists} pages, {retrieves} retrieves"
    );
    nothing_written(&pool).await;
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_proxy_answering_html_for_everything_stops_the_run_without_moving_the_cursor(
    pool: PgPool,
) {
    insert_paid(&pool, 20).await;
    // Bare wiremock, not the fake: a proxy's HTML on every path is no
    // Stripe answer (docs/testing.md "Stripe in tests").
    let stripe = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(404)
                .set_body_raw("<html><body>Not Found</body></html>", "text/html"),
        )
        .mount(&stripe)
        .await;

    let out = reconciler_output(&["run"], &env(&pool, &stripe.uri(), &[])).await;

    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    // The proxy answers the list page too: the run asked for one (the
    // default read mode) and got the HTML, as every read did.
    let received = stripe.received_requests().await.unwrap_or_default();
    assert!(received
        .iter()
        .any(|r| r.url.path() == "/v1/payment_intents"));
    nothing_written(&pool).await;
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_runs WHERE outcome = 'completed'"
        )
        .await,
        0,
        "not recorded as a success"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_second_run_exits_75_before_any_stripe_read(pool: PgPool) {
    insert_paid(&pool, 5).await;
    sqlx::query(
        "INSERT INTO reconciliation_cursor (job, lease_owner, lease_expires_at)
         VALUES ('payments-vs-stripe', 'other-pod:1:abc', now() + interval '5 minutes')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = stripe_mirroring(&pool, "succeeded", Duration::ZERO).await;

    let out = reconciler_output(&["run"], &env(&pool, &stripe.uri(), &[])).await;

    assert_eq!(out.status.code(), Some(75), "{}", all_output(&out));
    assert_eq!(requests(&stripe).await, 0, "no Stripe read was spent");
    nothing_written(&pool).await;

    // A lease whose holder died expires; the next run takes it over.
    sqlx::query("UPDATE reconciliation_cursor SET lease_expires_at = now() - interval '1 second'")
        .execute(&pool)
        .await
        .unwrap();
    let out = reconciler_output(&["run"], &env(&pool, &stripe.uri(), &[])).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    stripe.assert_read_by_list(0);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_cursor WHERE lease_owner IS NULL"
        )
        .await,
        1,
        "released at the end"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn hostile_payment_intent_ids_become_findings_without_a_request(pool: PgPool) {
    sqlx::query("ALTER TABLE payments ALTER COLUMN stripe_payment_intent_id DROP NOT NULL")
        .execute(&pool)
        .await
        .unwrap();
    let long = format!("pi_{}", "A".repeat(5000));
    let ids: Vec<Option<&str>> = vec![
        None,
        Some(""),
        Some("   "),
        Some(&long),
        Some("pi_ünïcødé"),
        Some("pi_1/../../v1/customers"),
        Some("pi_1?expand[]=customer"),
        Some("pi_1#fragment"),
        Some("pi_1%2F..%2Fcharges"),
        Some("pi_.."),
        Some("pi_1\r\nX-Injected: 1"),
    ];
    for (n, id) in ids.iter().enumerate() {
        sqlx::query("INSERT INTO payments (order_id, stripe_payment_intent_id, status, updated_at) VALUES ($1, $2, 'pending', now() - interval '1 hour')")
            .bind(format!("order-{n}"))
            .bind(id)
            .execute(&pool)
            .await
            .unwrap();
    }
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;

    let report = scan_with(&pool, &gateway(&stripe), &settings(200))
        .await
        .unwrap();

    // NULL, empty and blank ids on pending rows are checkouts never
    // confirmed: nothing to verify, counted, no finding.
    assert_eq!(report.pending_without_payment_intent, 3);
    assert_eq!(
        report.verdicts.get(Verdict::NeedsReview),
        ids.len() as u64 - 3
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE kind = 'invalid_payment_intent_id'"
        )
        .await,
        ids.len() as i64 - 3
    );
    assert_eq!(requests(&stripe).await, 0, "no hostile id reached Stripe");
    assert_eq!(
        cursor(&pool, "payments-vs-stripe").await,
        0,
        "the cursor moves past them (the table's last rows were read: the cycle ended and the cursor is back at 0)"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn secrets_never_appear_in_output_or_metrics(pool: PgPool) {
    insert_paid(&pool, 6).await;
    let gw = pushgateway::start().await;
    let good = stripe_mirroring(&pool, "succeeded", Duration::ZERO).await;
    // A revoked key: Stripe's 401 on every endpoint.
    let rejecting = StripeFake::start().await;
    rejecting.answer_every_request(&err(401, "invalid_request_error", "api_key_invalid"));
    let unreachable = format!(
        "http://127.0.0.1:{}",
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    );

    for (stripe, expected) in [(good.uri(), 0), (rejecting.uri(), 78), (unreachable, 1)] {
        sqlx::query("UPDATE reconciliation_cursor SET last_id = 0")
            .execute(&pool)
            .await
            .unwrap();
        let out = reconciler_output(
            &["run"],
            &env(
                &pool,
                &stripe,
                &[("PUSHGATEWAY_URL", &gw.url), ("RUST_LOG", "debug")],
            ),
        )
        .await;
        assert_eq!(out.status.code(), Some(expected), "{}", all_output(&out));
        let everything = format!("{}{}", all_output(&out), gw.scrape().await);
        assert!(
            !everything.contains(SECRET_KEY),
            "the API key leaked:\n{everything}"
        );
        assert!(
            !everything.contains(DB_PASSWORD),
            "the database password leaked:\n{everything}"
        );
    }
}
