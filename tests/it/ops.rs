//! The operator's side of the real binary (docs/scan.md; the README's exit codes): exit codes,
//! the
//! summary on stdout that tells the truth, secrets never printed, errors a
//! person can read, and log lines that say how far a cycle is. Real binary,
//! real PostgreSQL, real Pushgateway; Stripe is the one fake (`stripe_fake`).

use std::process::Output;
use std::time::Duration;

use crate::support::stripe_fake::{StripeFake, LIST};
use serde_json::Value;
use sqlx::PgPool;

use crate::support::arrange;
use crate::support::pushgateway::{self, value};
use crate::support::secrets::{assert_no_secret, url_with_password, DB_PASSWORD, SECRET_KEY};
use crate::support::*;

fn binary(args: &[&str], env: &[(&str, String)]) -> Output {
    reconciler(args, env).output().unwrap()
}

#[test]
fn a_missing_or_malformed_setting_exits_78_naming_the_variable() {
    let out = binary(&["run"], &[]);
    assert_eq!(out.status.code(), Some(78));
    assert!(
        all_output(&out).contains("DATABASE_URL is required"),
        "{}",
        all_output(&out)
    );

    let db = (
        "DATABASE_URL",
        "postgres://u:secret-pw@127.0.0.1:1/x".to_owned(),
    );
    let out = binary(
        &["run"],
        &[db.clone(), ("RECONCILER_BATCH_SIZE", "0".into())],
    );
    assert_eq!(out.status.code(), Some(78));
    assert!(
        all_output(&out).contains("RECONCILER_BATCH_SIZE"),
        "{}",
        all_output(&out)
    );
    assert!(!all_output(&out).contains("secret-pw"));

    let out = binary(&["run"], &[db]);
    assert_eq!(out.status.code(), Some(78));
    assert!(
        all_output(&out).contains("STRIPE_API_KEY is required"),
        "{}",
        all_output(&out)
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_run_prints_its_summary_and_exits_0(pool: PgPool) {
    arrange::paid_with_pending(&pool, 12, &[3]).await;
    let stripe = stripe_mirroring(&pool, "succeeded", Duration::ZERO).await;
    let env = [
        ("DATABASE_URL", url_with_password(&pool)),
        ("STRIPE_API_KEY", SECRET_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_BATCH_SIZE", "5".to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "10".to_owned()),
    ];

    let dry = tokio::task::spawn_blocking({
        let env = env.clone();
        move || binary(&["run", "--dry-run"], &env)
    })
    .await
    .unwrap();
    assert_eq!(dry.status.code(), Some(0), "{}", all_output(&dry));
    let summary: Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(summary["dry_run"], true);
    assert_eq!(summary["verdicts"]["repairable"], 1);
    assert_eq!(
        summary["rows_scanned"], 12,
        "a dry run stops at the end of the table"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_cursor").await,
        0,
        "dry run wrote the cursor"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );

    let out = tokio::task::spawn_blocking(move || binary(&["run"], &env))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_no_secret(&out);
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["outcome"], "completed");
    // Up to 10 batches of 5 over 12 rows: 5, 5, 2 (the last rows: the
    // cycle ends), and the run stops: each row is read at most once per run.
    assert_eq!(summary["batches"], 3);
    assert_eq!(
        summary["rows_scanned"], 12,
        "a run reads each row at most once"
    );
    assert_eq!(summary["wrapped"], true);
    assert_eq!(summary["findings_created"], 1);
    assert_eq!(summary["commands_enqueued"], 1);
    assert_eq!(summary["verdicts"]["in_sync"], 11);
    assert_eq!(summary["verdicts"]["repairable"], 1);
    // The default read mode: every row verified through list pages (one
    // per batch), none failed, no retrieve.
    assert_eq!(summary["stripe_requests"]["list"], 3, "{summary}");
    assert_eq!(summary["stripe_requests"]["retrieve"], 0, "{summary}");
    stripe.assert_read_by_list(0);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        1
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_runs WHERE outcome = 'completed' AND rows_scanned = 12 AND max_payment_id = 12").await,
        1
    );
}

/// A pending row with no PaymentIntent id (a checkout never confirmed, no
/// Checkout Session column) has nothing to verify: counted in the summary
/// and the gauge, never a finding (an earlier release's finding on it is
/// cleared), and it holds no lag. A paid row with no PaymentIntent id stays
/// a finding: its money is unproven.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn pending_rows_without_a_payment_intent_are_counted_not_flagged(pool: PgPool) {
    sqlx::raw_sql(
        "ALTER TABLE payments ALTER COLUMN stripe_payment_intent_id DROP NOT NULL;
         INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at) VALUES
             ('cart-1', NULL, 'pending', now() - interval '9 days', now() - interval '9 days'),
             ('cart-2', '', 'pending', now() - interval '8 days', now() - interval '8 days'),
             ('order-3', NULL, 'paid', now() - interval '7 days', now() - interval '7 days');
         INSERT INTO reconciliation_findings (payment_id, kind, local_status)
         VALUES (1, 'invalid_payment_intent_id', 'pending');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;
    let gateway = pushgateway::start().await;
    let env = env(
        &pool,
        &stripe.uri(),
        &[
            ("RECONCILER_READ_MODE", "retrieve"),
            ("PUSHGATEWAY_URL", &gateway.url),
        ],
    );
    let out = tokio::task::spawn_blocking(move || binary(&["run"], &env))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let summary = summary(&out);
    assert_eq!(summary["pending_without_payment_intent"], 2, "{summary}");
    assert_eq!(summary["verdicts"]["needs_review"], 1, "{summary}");
    let open: Vec<(i64, String)> = sqlx::query_as(
        "SELECT payment_id, kind FROM reconciliation_findings WHERE resolved_at IS NULL ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(open, [(3, "invalid_payment_intent_id".to_owned())]);
    assert_eq!(requests(&stripe).await, 0, "nothing to ask Stripe");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state
              WHERE payment_id IN (1, 2) AND last_reconciled_at IS NOT NULL"
        )
        .await,
        2,
        "checked: they hold no lag"
    );
    let metrics = gateway.scrape().await;
    assert_eq!(
        value(
            &metrics,
            "stripe_reconciler_pending_without_payment_intent",
            &[JOB]
        ),
        Some(2.0),
        "{metrics}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_key_stripe_rejects_exits_78_and_writes_nothing(pool: PgPool) {
    insert_paid(&pool, 3).await;
    // A rejected key: Stripe's 401 on every endpoint.
    let stripe = StripeFake::start().await;
    stripe.answer_every_request(&err(401, "invalid_request_error", "api_key_invalid"));
    let env = [
        ("DATABASE_URL", url_with_password(&pool)),
        ("STRIPE_API_KEY", SECRET_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
    ];

    let out = tokio::task::spawn_blocking(move || binary(&["run"], &env))
        .await
        .unwrap();

    assert_eq!(out.status.code(), Some(78), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("Stripe rejected the API key"),
        "{}",
        all_output(&out)
    );
    assert_no_secret(&out);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        0
    );
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 0);
}

#[sqlx::test(migrations = false)]
async fn an_unreachable_database_exits_1_without_echoing_the_password(_pool: PgPool) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env = [
        (
            "DATABASE_URL",
            format!("postgres://app:{DB_PASSWORD}@127.0.0.1:{port}/payments"),
        ),
        ("STRIPE_API_KEY", SECRET_KEY.to_owned()),
    ];
    let out = tokio::task::spawn_blocking(move || binary(&["run"], &env))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("cannot connect to PostgreSQL"),
        "{}",
        all_output(&out)
    );
    assert_no_secret(&out);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_run_past_its_deadline_starts_no_new_batch(pool: PgPool) {
    // Batches of one row, overlapped (up to three in progress). Batch 2's
    // list page is answered 12 s after it arrived, and the run's deadline is
    // 10 s from its start (before that arrival): the deadline has passed
    // when that page comes back, whatever the machine's speed. Batch 1 is
    // committed before; batch 2 and the batches already reading beside it
    // finish; none starts after. (Which batch that page belongs to
    // depends on how the batches' reads interleave, so the number of
    // batches is not asserted, only that every one started was committed
    // and none started after the deadline.)
    //
    // The only time the test depends on is the 10 s the binary has to start
    // and send its first pages (local, unhurried): a slower start fails the
    // test, it cannot pass it.
    insert_paid(&pool, 40).await;
    let slow = stripe_mirroring(&pool, "succeeded", std::time::Duration::ZERO).await;
    slow.answer_slowly(LIST, 2, std::time::Duration::from_secs(12));
    let env = [
        ("DATABASE_URL", database_url(&pool)),
        ("STRIPE_API_KEY", SECRET_KEY.to_owned()),
        ("STRIPE_API_BASE", slow.uri()),
        ("RECONCILER_BATCH_SIZE", "1".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "40".to_owned()),
        ("RECONCILER_RUN_DEADLINE_SECONDS", "10".to_owned()),
        ("RECONCILER_HTTP_TIMEOUT_SECONDS", "60".to_owned()),
    ];

    let out = reconciler_output(&["run"], &env).await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let batches = summary["batches"].as_u64().unwrap();
    let seen = slow.seen();
    let second_list = seen.iter().filter(|r| r.endpoint == LIST).nth(1).unwrap();
    let answered = second_list.at + std::time::Duration::from_secs(12);
    assert!(
        seen.iter().all(|r| r.at < answered),
        "no page was asked after the slow page came back (past the deadline): {seen:#?}"
    );
    assert_eq!(
        slow.count(LIST) as u64,
        batches,
        "one page a batch, none after the deadline: {seen:#?}"
    );
    assert!(batches < 40, "stopped at the deadline: {batches}");
    assert_eq!(
        cursor(&pool, "payments-vs-stripe").await,
        batches as i64,
        "the batches it did are committed"
    );
}

const JOB: (&str, &str) = ("job", "payments-vs-stripe");

fn env(pool: &PgPool, stripe: &str, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
        // These tests read small tables to their end in one run (`auto`
        // would plan one batch for them).
        ("RECONCILER_BATCHES_PER_RUN", "10".to_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}

fn summary(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

async fn set_cursor(pool: &PgPool, last_id: i64) {
    sqlx::query(
        "INSERT INTO reconciliation_cursor (job, last_id) VALUES ('payments-vs-stripe', $1)",
    )
    .bind(last_id)
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_dry_run_counts_only_the_findings_a_real_run_would_create(pool: PgPool) {
    arrange::paid_with_pending(&pool, 12, &[3, 8]).await;
    let stripe = stripe_mirroring(&pool, "succeeded", Duration::ZERO).await;
    // A real run records both drifts; then payment 8's finding is closed as
    // `cleared` (as a verification in between would), so only its drift is
    // new again. (A finding resolved by hand would stay closed: an
    // acknowledgement, tests/it/acknowledgements.rs.)
    let real = reconciler_output(&["run"], &env(&pool, &stripe.uri(), &[])).await;
    assert_eq!(real.status.code(), Some(0), "{}", stderr(&real));
    assert_eq!(summary(&real)["findings_created"], 2);
    sqlx::query("UPDATE reconciliation_findings SET resolved_at = now(), resolution = 'cleared' WHERE payment_id = 8")
        .execute(&pool)
        .await
        .unwrap();

    let dry = reconciler_output(&["run", "--dry-run"], &env(&pool, &stripe.uri(), &[])).await;
    assert_eq!(dry.status.code(), Some(0), "{}", stderr(&dry));
    let s = summary(&dry);
    assert_eq!(s["verdicts"]["repairable"], 2, "both drifts are seen");
    assert_eq!(s["findings_created"], 1, "only payment 8's is new: {s}");
    assert_eq!(s["commands_enqueued"], 1);

    let pretty = reconciler_output(
        &["run", "--dry-run"],
        &env(&pool, &stripe.uri(), &[("RECONCILER_LOG_FORMAT", "pretty")]),
    )
    .await;
    let table = stdout(&pretty);
    assert!(table.contains("would create findings   1"), "{table}");
    assert!(!table.contains("findings created"), "{table}");
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        2,
        "the dry runs wrote nothing"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_failed_run_reports_the_real_cursor_in_its_summary_and_metrics(pool: PgPool) {
    insert_paid(&pool, 20).await;
    set_cursor(&pool, 7).await;
    let gw = pushgateway::start().await;
    let rejecting = StripeFake::start().await;
    rejecting.answer_every_request(&err(401, "invalid_request_error", "api_key_invalid"));
    let down = StripeFake::start().await;
    down.answer_every_request(&err(500, "api_error", "internal"));

    for (stripe, code, outcome) in [
        (rejecting.uri(), 78, "stripe_rejected_key"),
        (down.uri(), 1, "stripe_down"),
    ] {
        let out = reconciler_output(
            &["run"],
            &env(&pool, &stripe, &[("PUSHGATEWAY_URL", &gw.url)]),
        )
        .await;
        assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
        let s = summary(&out);
        assert_eq!(s["outcome"], outcome);
        assert_eq!(s["cursor_position"], 7, "{outcome}: {s}");
        let m = gw.scrape().await;
        assert_eq!(
            value(
                &m,
                "stripe_reconciler_run_outcome",
                &[JOB, ("outcome", outcome)]
            ),
            Some(1.0),
            "{m}"
        );
        assert_eq!(
            value(&m, "stripe_reconciler_cursor_position", &[JOB]),
            Some(7.0),
            "{m}"
        );
    }
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 7);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_run_refused_by_the_lease_names_the_holder_and_its_expiry(pool: PgPool) {
    insert_paid(&pool, 5).await;
    sqlx::query(
        "INSERT INTO reconciliation_cursor (job, last_id, lease_owner, lease_expires_at)
         VALUES ('payments-vs-stripe', 3, 'other-pod:42:cafe', '2031-05-06 07:08:09+00')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = stripe_mirroring(&pool, "succeeded", Duration::ZERO).await;

    let out = reconciler_output(&["run"], &env(&pool, &stripe.uri(), &[])).await;

    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let log = stderr(&out);
    assert!(log.contains("another run holds the lease"), "{log}");
    assert!(log.contains("other-pod:42:cafe"), "{log}");
    assert!(log.contains("2031-05-06T07:08:09Z"), "{log}");
    assert!(!log.contains("rolled back"), "no batch ran: {log}");
    let s = summary(&out);
    assert_eq!(s["outcome"], "concurrent_run");
    assert_eq!(s["cursor_position"], 3);
    assert_eq!(requests(&stripe).await, 0);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn each_batch_line_shows_rows_done_of_the_cycle_and_an_estimated_end(pool: PgPool) {
    insert_paid(&pool, 12).await;
    sqlx::query("ANALYZE payments")
        .execute(&pool)
        .await
        .unwrap();
    let stripe = stripe_mirroring(&pool, "succeeded", Duration::from_millis(5)).await;

    let out = reconciler_output(
        &["run"],
        &env(
            &pool,
            &stripe.uri(),
            &[
                ("RECONCILER_BATCH_SIZE", "5"),
                ("RECONCILER_BATCHES_PER_RUN", "2"),
            ],
        ),
    )
    .await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let batches: Vec<Value> = stderr(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l.get("batch").is_some())
        .collect();
    assert_eq!(batches.len(), 2, "{}", stderr(&out));
    let first = &batches[0];
    assert_eq!(first["cycle_rows_done"], 5, "{first}");
    assert_eq!(first["cycle_rows_total"], 12);
    assert!(first["cycle_eta_seconds"].as_f64().is_some(), "{first}");
    assert_eq!(batches[1]["cycle_rows_done"], 10);
    assert_eq!(
        batches[1]["cycle_more_runs"], 1,
        "2 rows are left for the next run"
    );
    assert!(
        first["message"]
            .as_str()
            .unwrap()
            .contains("5 / 12 rows of the cycle"),
        "{first}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn pretty_logs_carry_no_colour_codes_when_stderr_is_not_a_terminal(pool: PgPool) {
    insert_paid(&pool, 3).await;
    let stripe = stripe_mirroring(&pool, "succeeded", Duration::ZERO).await;

    let out = reconciler_output(
        &["run"],
        &env(&pool, &stripe.uri(), &[("RECONCILER_LOG_FORMAT", "pretty")]),
    )
    .await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("batch done"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "ANSI escape in piped output: {err:?}"
    );
}
