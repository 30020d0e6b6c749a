//! The operator's first hour (issue 16): summaries that tell the truth,
//! errors a person can read, a status that says where the lag is, and a
//! `status --json` shape scripts can rely on. Real binary, real PostgreSQL,
//! real Pushgateway; Stripe is wiremock.

mod support;

use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use support::pushgateway::{self, value};
use support::*;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer};

const JOB: (&str, &str) = ("job", "payments-vs-stripe");

fn env(pool: &PgPool, stripe: &str, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn summary(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

/// An unreachable PostgreSQL (a port nobody listens on).
fn dead_database() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("postgres://root@127.0.0.1:{port}/gone")
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
    insert_paid(&pool, 12).await;
    sqlx::query("UPDATE payments SET status = 'pending' WHERE id IN (3, 8)")
        .execute(&pool)
        .await
        .unwrap();
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;
    // A real run records both drifts; then payment 8's finding is resolved by
    // hand, so only its drift is new again.
    let real = reconciler_output(&["run"], &env(&pool, &stripe.uri(), &[])).await;
    assert_eq!(real.status.code(), Some(0), "{}", stderr(&real));
    assert_eq!(summary(&real)["findings_created"], 2);
    sqlx::query("UPDATE reconciliation_findings SET resolved_at = now(), resolution = 'manual' WHERE payment_id = 8")
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
    let rejecting = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(err(401, "invalid_request_error", "api_key_invalid"))
        .mount(&rejecting)
        .await;
    let down = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(err(500, "api_error", "internal"))
        .mount(&down)
        .await;

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
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;

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
    let stripe = stripe_answering("succeeded", Duration::from_millis(5)).await;

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
async fn status_names_the_payment_that_holds_the_lag(pool: PgPool) {
    insert_paid(&pool, 10).await;
    sqlx::raw_sql(
        "UPDATE payments SET last_reconciled_at = now() - interval '5 minutes';
         UPDATE payments SET last_reconciled_at = NULL, created_at = now() - interval '6 days',
                             order_id = 'order-stuck', stripe_payment_intent_id = 'pi_Stuck'
          WHERE id = 4;
         INSERT INTO reconciliation_cursor (job, last_id) VALUES ('payments-vs-stripe', 7);
         INSERT INTO reconciliation_findings (payment_id, kind, local_status) VALUES (4, 'missing_externally', 'paid');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let db = [("DATABASE_URL", database_url(&pool))];

    let out = reconciler_output(&["status"], &db).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let screen = stdout(&out);
    assert!(
        screen.contains("reconciliation lag                6d"),
        "{screen}"
    );
    assert!(
        screen.contains(
            "held by payment                 4 (order order-stuck, pi_Stuck, local paid)"
        ),
        "{screen}"
    );
    assert!(screen.contains("never (created 6d"), "{screen}");
    assert!(
        screen.contains("without a definitive answer from Stripe"),
        "{screen}"
    );
    assert!(screen.contains("missing_externally"), "{screen}");

    let out = reconciler_output(&["status", "--json"], &db).await;
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["lag_held_by"]["payment_id"], 4);
    assert_eq!(s["lag_held_by"]["open_finding_kind"], "missing_externally");
}

/// The documented shape of `status --json` (README, "status --json"):
/// scripts depend on these keys and types; keys are only ever added.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn status_json_has_the_documented_shape(pool: PgPool) {
    insert_paid(&pool, 3).await;
    sqlx::raw_sql(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status) VALUES
             (1, 'missed_success', 'pending'), (2, 'missed_success', 'pending'),
             (3, 'unexpected:failed->succeeded', 'failed');",
    )
    .execute(&pool)
    .await
    .unwrap();

    let out = reconciler_output(
        &["status", "--json"],
        &[("DATABASE_URL", database_url(&pool))],
    )
    .await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut keys: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "capacity",
            "cursor_position",
            "cycle_age_seconds",
            "cycle_last_completed_unix",
            "cycle_progress_percent",
            "job",
            "lag_held_by",
            "lag_seconds",
            "last_success_unix",
            "open_findings",
            "outbox_oldest_pending_seconds",
            "outbox_pending",
            "rows",
        ]
    );
    for key in ["rows", "cursor_position", "outbox_pending"] {
        assert!(s[key].is_i64(), "{key} is an integer: {}", s[key]);
    }
    assert_eq!(
        s["open_findings"],
        serde_json::json!({"missed_success": 2, "unexpected:failed->succeeded": 1})
    );
    assert!(s["open_findings"]["missed_success"].is_i64());
    assert!(s["lag_seconds"].is_f64());
    assert!(s["capacity"].is_null(), "unknown without run history");
    let holder = s["lag_held_by"].as_object().unwrap();
    for key in [
        "payment_id",
        "order_id",
        "stripe_payment_intent_id",
        "status",
        "created_at",
        "updated_at",
        "last_reconciled_at",
        "open_finding_id",
        "open_finding_kind",
        "repair_last_error",
    ] {
        assert!(holder.contains_key(key), "lag_held_by.{key}: {holder:?}");
    }
}

#[sqlx::test(migrations = false)]
async fn errors_of_interactive_commands_are_one_readable_line(_pool: PgPool) {
    let dead = [("DATABASE_URL", dead_database())];
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["findings", "list"],
        &["migrate"],
    ] {
        let out = reconciler_output(args, &dead).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(
            err.starts_with("stripe-reconciler: error: "),
            "{args:?}: {err}"
        );
        assert!(
            err.contains("cannot connect to PostgreSQL"),
            "{args:?}: {err}"
        );
    }

    // A configuration error of `run` is for a person too.
    let out = reconciler_output(&["run"], &dead).await;
    assert_eq!(out.status.code(), Some(78));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("STRIPE_API_KEY is required"), "{err}");

    // A run in a pod keeps JSON lines for the log collector.
    let out = reconciler_output(
        &["run"],
        &[dead[0].clone(), ("STRIPE_API_KEY", API_KEY.to_owned())],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let last = stderr(&out).lines().last().unwrap_or_default().to_owned();
    let line: Value = serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {last}"));
    assert_eq!(line["level"], "ERROR");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn pretty_logs_carry_no_colour_codes_when_stderr_is_not_a_terminal(pool: PgPool) {
    insert_paid(&pool, 3).await;
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;

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

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn usage_errors_exit_2_and_refusals_65_naming_what_to_fix(pool: PgPool) {
    let db = ("DATABASE_URL", database_url(&pool));
    let out = reconciler_output(
        &["findings", "resolve", "1", "--note", "  ", "--by", "bob"],
        std::slice::from_ref(&db),
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--note"), "{}", stderr(&out));

    // Neither --by nor USER: who resolved it must not be "unknown".
    let out = reconciler_output(
        &["findings", "resolve", "1", "--note", "checked"],
        std::slice::from_ref(&db),
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--by"), "{}", stderr(&out));

    let out = reconciler_output(&["frobnicate"], std::slice::from_ref(&db)).await;
    assert_eq!(out.status.code(), Some(2));

    let out = reconciler_output(
        &[
            "findings", "resolve", "999", "--note", "checked", "--by", "bob",
        ],
        &[db],
    )
    .await;
    assert_eq!(out.status.code(), Some(65), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("finding 999 does not exist"),
        "{}",
        stderr(&out)
    );
}
