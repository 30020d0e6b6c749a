//! The real binary: exit codes, the summary on stdout, and secrets never
//! printed.

mod support;

use std::process::Output;

use serde_json::Value;
use sqlx::PgPool;
use support::*;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request};

const SECRET_KEY: &str = "sk_test_DistinctiveKey9f8e7d6c5b4a";
const DB_PASSWORD: &str = "Distinctive-db-password-31415";

fn binary(args: &[&str], env: &[(&str, String)]) -> Output {
    reconciler(args, env).output().unwrap()
}

/// The test database's URL with a password in it (trust auth ignores it), so
/// a leak of DATABASE_URL would show.
fn url_with_password(pool: &PgPool) -> String {
    let mut url = url::Url::parse(&database_url(pool)).unwrap();
    url.set_password(Some(DB_PASSWORD)).unwrap();
    url.to_string()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn assert_no_secret(o: &Output) {
    let all = text(o);
    assert!(!all.contains(SECRET_KEY), "the API key leaked:\n{all}");
    assert!(
        !all.contains(DB_PASSWORD),
        "the database password leaked:\n{all}"
    );
}

#[test]
fn a_missing_or_malformed_setting_exits_78_naming_the_variable() {
    let out = binary(&["run"], &[]);
    assert_eq!(out.status.code(), Some(78));
    assert!(
        text(&out).contains("DATABASE_URL is required"),
        "{}",
        text(&out)
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
        text(&out).contains("RECONCILER_BATCH_SIZE"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("secret-pw"));

    let out = binary(&["run"], &[db]);
    assert_eq!(out.status.code(), Some(78));
    assert!(
        text(&out).contains("STRIPE_API_KEY is required"),
        "{}",
        text(&out)
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_run_prints_its_summary_and_exits_0(pool: PgPool) {
    insert_paid(&pool, 12).await;
    sqlx::query("UPDATE payments SET status = 'pending' WHERE id = 3")
        .execute(&pool)
        .await
        .unwrap();
    let stripe = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(|r: &Request| ok(r.url.path().rsplit('/').next().unwrap(), "succeeded"))
        .mount(&stripe)
        .await;
    let env = [
        ("DATABASE_URL", url_with_password(&pool)),
        ("STRIPE_API_KEY", SECRET_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_BATCH_SIZE", "5".to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
    ];

    let dry = tokio::task::spawn_blocking({
        let env = env.clone();
        move || binary(&["run", "--dry-run"], &env)
    })
    .await
    .unwrap();
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry));
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
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_no_secret(&out);
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["outcome"], "completed");
    // Up to 10 batches of 5 over 12 rows: 5, 5, 2, wrap, and the run stops:
    // each row is read at most once per run.
    assert_eq!(summary["batches"], 4);
    assert_eq!(
        summary["rows_scanned"], 12,
        "a run reads each row at most once"
    );
    assert_eq!(summary["wrapped"], true);
    assert_eq!(summary["findings_created"], 1);
    assert_eq!(summary["commands_enqueued"], 1);
    assert_eq!(summary["verdicts"]["in_sync"], 11);
    assert_eq!(summary["verdicts"]["repairable"], 1);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        1
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_runs WHERE outcome = 'completed' AND rows_scanned = 12 AND max_payment_id = 12").await,
        1
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_key_stripe_rejects_exits_78_and_writes_nothing(pool: PgPool) {
    insert_paid(&pool, 3).await;
    let stripe = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(err(401, "invalid_request_error", "api_key_invalid"))
        .mount(&stripe)
        .await;
    let env = [
        ("DATABASE_URL", url_with_password(&pool)),
        ("STRIPE_API_KEY", SECRET_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
    ];

    let out = tokio::task::spawn_blocking(move || binary(&["run"], &env))
        .await
        .unwrap();

    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(
        text(&out).contains("Stripe rejected the API key"),
        "{}",
        text(&out)
    );
    assert_no_secret(&out);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM payments WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        0
    );
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 0);
}

#[sqlx::test(migrations = false)]
async fn migrate_applies_the_schema(pool: PgPool) {
    let env = [("DATABASE_URL", url_with_password(&pool))];
    let out = tokio::task::spawn_blocking(move || binary(&["migrate"], &env))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_no_secret(&out);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_cursor").await,
        0,
        "table exists"
    );
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
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("cannot connect to PostgreSQL"),
        "{}",
        text(&out)
    );
    assert_no_secret(&out);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_run_past_its_deadline_starts_no_new_batch(pool: PgPool) {
    insert_paid(&pool, 40).await;
    let slow = stripe_answering("succeeded", std::time::Duration::from_millis(400)).await;
    let env = [
        ("DATABASE_URL", database_url(&pool)),
        ("STRIPE_API_KEY", SECRET_KEY.to_owned()),
        ("STRIPE_API_BASE", slow.uri()),
        ("RECONCILER_BATCH_SIZE", "1".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "40".to_owned()),
        ("RECONCILER_RUN_DEADLINE_SECONDS", "1".to_owned()),
    ];

    let out = reconciler_output(&["run"], &env).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let batches = summary["batches"].as_u64().unwrap();
    // Batches overlap (up to three in progress, each a 400 ms read): about
    // nine start within the second; those in progress at the deadline finish.
    assert!(
        (2..=15).contains(&batches),
        "stopped at the deadline, not after 40 batches: {batches}"
    );
    assert_eq!(
        cursor(&pool, "payments-vs-stripe").await,
        batches as i64,
        "the batches it did are committed"
    );
}
