//! The figures a run pushes, read back from a real Pushgateway (`status --json`
//! on a known data set is in `status.rs`).

use std::process::Output;
use std::time::Duration;

use crate::support::pushgateway::{self, value};
use crate::support::stripe_fake::StripeFake;
use crate::support::*;
use sqlx::PgPool;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const JOB: (&str, &str) = ("job", "payments-vs-stripe");

fn run(pool: &PgPool, stripe: &str, pushgateway: &str, extra: &[(&str, &str)]) -> Output {
    let mut env = vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.to_owned()),
        ("PUSHGATEWAY_URL", pushgateway.to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    reconciler(&["run"], &env).output().unwrap()
}

async fn run_async(
    pool: &PgPool,
    stripe: &str,
    pushgateway: &str,
    extra: &[(&'static str, &'static str)],
) -> Output {
    let (pool, stripe, pushgateway, extra) = (
        pool.clone(),
        stripe.to_owned(),
        pushgateway.to_owned(),
        extra.to_vec(),
    );
    tokio::task::spawn_blocking(move || run(&pool, &stripe, &pushgateway, &extra))
        .await
        .unwrap()
}

/// 12 payments: 10 in sync, one missed success, one paid locally only;
/// Stripe (the shared fake) lists them all, as the default read mode reads.
async fn known_data_set(pool: &PgPool) -> StripeFake {
    insert_paid(pool, 12).await;
    sqlx::query("UPDATE payments SET status = 'pending' WHERE id = 4")
        .execute(pool)
        .await
        .unwrap();
    let stripe = stripe_mirroring(pool, "succeeded", Duration::ZERO).await;
    stripe.set_status("pi_9", "requires_payment_method");
    stripe
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_run_pushes_every_named_metric_with_its_value(pool: PgPool) {
    let stripe = known_data_set(&pool).await;
    let gw = pushgateway::start().await;
    let before = chrono::Utc::now().timestamp() as f64;

    let out = run_async(
        &pool,
        &stripe.uri(),
        &gw.url,
        &[
            ("RECONCILER_BATCH_SIZE", "5"),
            ("RECONCILER_BATCHES_PER_RUN", "3"),
        ],
    )
    .await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let after = chrono::Utc::now().timestamp() as f64 + 1.0;
    let m = gw.scrape().await;
    let v = |name: &str, labels: &[(&str, &str)]| {
        let mut all = vec![JOB];
        all.extend_from_slice(labels);
        value(&m, &format!("stripe_reconciler_{name}"), &all)
            .unwrap_or_else(|| panic!("{name}{labels:?} missing from:\n{m}"))
    };
    assert_eq!(v("rows_scanned", &[]), 12.0);
    assert_eq!(v("batches", &[]), 3.0);
    assert_eq!(v("verdicts", &[("verdict", "in_sync")]), 10.0);
    assert_eq!(v("verdicts", &[("verdict", "repairable")]), 1.0);
    assert_eq!(v("verdicts", &[("verdict", "needs_review")]), 1.0);
    assert_eq!(v("verdicts", &[("verdict", "unverifiable")]), 0.0);
    assert_eq!(v("verdicts", &[("verdict", "in_flight")]), 0.0);
    // The run read the table's last rows: the cycle ended, the cursor is at 0.
    assert_eq!(v("cursor_position", &[]), 0.0);
    assert_eq!(v("open_findings", &[("kind", "missed_success")]), 1.0);
    assert_eq!(
        v("open_findings", &[("kind", "paid_locally_not_externally")]),
        1.0
    );
    assert_eq!(v("outbox_pending", &[]), 1.0);
    assert_eq!(v("run_outcome", &[("outcome", "completed")]), 1.0);
    assert_eq!(v("run_outcome", &[("outcome", "stripe_down")]), 0.0);
    let last_run = v("last_run_timestamp_seconds", &[]);
    let last_success = v("last_success_timestamp_seconds", &[]);
    assert!(
        before <= last_run && last_run <= after,
        "{before} {last_run} {after}"
    );
    assert!(
        before <= last_success && last_success <= after,
        "{before} {last_success} {after}"
    );
    assert!(v("lag_seconds", &[]) < 60.0, "every row was just confirmed");
    assert!(v("run_duration_seconds", &[]) > 0.0);
    assert!(v("cycle_age_seconds", &[]) >= 0.0);
    assert_eq!(
        v("wrapped", &[]),
        1.0,
        "the run read the last rows: the cycle ended"
    );
    assert_eq!(v("stripe_accounts_unreachable", &[]), 0.0);
    // Read in the default mode, by list pages: none failed, no row fell back
    // to a retrieve.
    assert_eq!(v("stripe_requests", &[("endpoint", "list")]), 3.0);
    assert_eq!(v("stripe_requests", &[("endpoint", "retrieve")]), 0.0);
    stripe.assert_read_by_list(0);
    assert!(
        value(&m, "stripe_reconciler_capacity_ratio", &[JOB]).is_none(),
        "unknown after one run, so absent"
    );
}

/// A second run that starts while the first holds the lease exits 75
/// without touching the first's figures. Deterministic: the test holds one
/// row of the reconciler's own state, so the first run waits in its phase 3
/// (lease held) until the second has exited, whatever the machine's speed.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_run_that_finds_the_lease_held_exits_75_and_keeps_the_winners_figures(pool: PgPool) {
    insert_paid(&pool, 12).await;
    let stripe = stripe_mirroring(&pool, "succeeded", Duration::ZERO).await;
    let gw = pushgateway::start().await;
    let env: &[(&'static str, &'static str)] = &[
        ("RECONCILER_BATCH_SIZE", "20"),
        ("RECONCILER_BATCHES_PER_RUN", "1"),
    ];
    sqlx::query(
        "INSERT INTO reconciliation_payment_state (payment_id, created_at)
         SELECT id, created_at FROM payments WHERE id = 1",
    )
    .execute(&pool)
    .await
    .unwrap();
    let mut blocker = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM reconciliation_payment_state WHERE payment_id = 1 FOR UPDATE")
        .execute(&mut *blocker)
        .await
        .unwrap();

    let uri = stripe.uri();
    let first = tokio::spawn({
        let (pool, uri, url) = (pool.clone(), uri.clone(), gw.url.clone());
        async move { run_async(&pool, &uri, &url, env).await }
    });
    wait::until_true(
        "the first run's phase 3 waiting on the held row",
        || async {
            !wait::reconciler_writers_waiting_on_a_lock(&pool, "reconciliation_payment_state")
                .await
                .is_empty()
        },
    )
    .await;
    let second = run_async(&pool, &uri, &gw.url, env).await;
    assert_eq!(second.status.code(), Some(75), "{}", stderr(&second));
    blocker.rollback().await.unwrap();
    let first = first.await.unwrap();
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));

    let m = gw.scrape().await;
    assert_eq!(
        value(&m, "stripe_reconciler_rows_scanned", &[JOB]),
        Some(12.0),
        "{m}"
    );
    assert_eq!(
        value(
            &m,
            "stripe_reconciler_run_outcome",
            &[JOB, ("outcome", "completed")]
        ),
        Some(1.0)
    );
    assert!(
        value(
            &m,
            "stripe_reconciler_concurrent_run_timestamp_seconds",
            &[JOB, ("outcome", "concurrent_run")]
        )
        .is_some(),
        "{m}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_dead_or_refusing_pushgateway_changes_nothing_but_a_log_line(pool: PgPool) {
    let stripe = known_data_set(&pool).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let refusing = MockServer::start().await;
    Mock::given(method("PUT"))
        .respond_with(ResponseTemplate::new(400))
        .mount(&refusing)
        .await;

    for gateway in [format!("http://127.0.0.1:{port}"), refusing.uri()] {
        sqlx::query("UPDATE reconciliation_cursor SET last_id = 0")
            .execute(&pool)
            .await
            .unwrap();
        let out = run_async(
            &pool,
            &stripe.uri(),
            &gateway,
            &[("RECONCILER_BATCHES_PER_RUN", "1")],
        )
        .await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("cannot push metrics"),
            "{}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains(r#""level":"ERROR""#),
            "{}",
            stderr(&out)
        );
    }
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        2,
        "the database work is done"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_run_that_cannot_reach_the_database_keeps_the_last_known_state(pool: PgPool) {
    let stripe = known_data_set(&pool).await;
    let gw = pushgateway::start().await;
    let good = run_async(&pool, &stripe.uri(), &gw.url, &[]).await;
    assert_eq!(good.status.code(), Some(0), "{}", stderr(&good));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env = [
        (
            "DATABASE_URL",
            format!("postgres://root@127.0.0.1:{port}/gone"),
        ),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("PUSHGATEWAY_URL", gw.url.clone()),
    ];

    let down = reconciler_output(&["run"], &env).await;

    assert_eq!(down.status.code(), Some(1), "{}", stderr(&down));
    let m = gw.scrape().await;
    assert_eq!(
        value(
            &m,
            "stripe_reconciler_run_outcome",
            &[JOB, ("outcome", "database_error")]
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        value(
            &m,
            "stripe_reconciler_open_findings",
            &[JOB, ("kind", "paid_locally_not_externally")]
        ),
        Some(1.0),
        "the money-at-risk figure survives the failed run"
    );
    assert!(value(&m, "stripe_reconciler_lag_seconds", &[JOB]).is_some());
    assert!(value(
        &m,
        "stripe_reconciler_last_success_timestamp_seconds",
        &[JOB]
    )
    .is_some());
}

/// Metric labels stay bounded whatever Stripe answers (docs/operations.md, "Metrics"). 50
/// locally
/// failed payments, each answered with its own undocumented status: 50 raw
/// kinds in the findings, one `kind` label value in the push.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn fifty_undocumented_stripe_statuses_push_one_open_findings_label(pool: PgPool) {
    insert_paid(&pool, 50).await;
    sqlx::query("UPDATE payments SET status = 'failed'")
        .execute(&pool)
        .await
        .unwrap();
    // Bare wiremock, not the fake: a new, made-up status on every read is
    // no answer Stripe gives (docs/testing.md "Stripe in tests").
    let stripe = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(|r: &Request| {
            let id = r.url.path().rsplit('/').next().unwrap();
            // A Stripe-looking word (lowercase letters), new on every read.
            let status: String = (0..12).map(|_| fastrand::lowercase()).collect();
            ok(id, &status)
        })
        .mount(&stripe)
        .await;
    let gw = pushgateway::start().await;

    let out = run_async(
        &pool,
        &stripe.uri(),
        &gw.url,
        &[
            ("RECONCILER_BATCH_SIZE", "50"),
            ("RECONCILER_BATCHES_PER_RUN", "1"),
            ("RECONCILER_READ_MODE", "retrieve"),
        ],
    )
    .await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        count(
            &pool,
            "SELECT count(DISTINCT kind) FROM reconciliation_findings WHERE resolved_at IS NULL"
        )
        .await,
        50,
        "the raw statuses stay in the findings"
    );
    let m = gw.scrape().await;
    let labels: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("stripe_reconciler_open_findings{"))
        .collect();
    assert_eq!(
        labels.len(),
        1,
        "one label value, got:\n{}",
        labels.join("\n")
    );
    assert_eq!(
        value(
            &m,
            "stripe_reconciler_open_findings",
            &[JOB, ("kind", "unexpected:failed->unknown")]
        ),
        Some(50.0),
        "{m}"
    );
}
