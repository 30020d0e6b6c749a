//! Each gateway failure class, against wiremock, and what a batch does with
//! the ones that stop it: a 404 is classified by its body, and rows that
//! always fail do not stall the scan while Stripe answers the outage probe.

use std::time::Duration;

use crate::support::*;
use serde_json::json;
use sqlx::PgPool;
use stripe_reconciler::reconcile::ExternalStatus;
use stripe_reconciler::reconcile::Verdict;
use stripe_reconciler::scan::{run_batch, Mode, RunError};
use stripe_reconciler::stripe::{GatewayError, PaymentIntentId, Unavailable, STRIPE_VERSION};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn id(s: &str) -> PaymentIntentId {
    PaymentIntentId::parse(s).unwrap()
}

async fn read(response: ResponseTemplate) -> (Result<ExternalStatus, GatewayError>, usize) {
    let server = MockServer::start().await;
    mount(&server, "pi_X", response).await;
    let result = gateway(&server).payment_intent_status(&id("pi_X")).await;
    (result, server.received_requests().await.unwrap().len())
}

fn invalid_body(r: &Result<ExternalStatus, GatewayError>) -> bool {
    matches!(
        r,
        Err(GatewayError::Unavailable {
            cause: Unavailable::InvalidBody(_),
            ..
        })
    )
}

#[tokio::test]
async fn sends_bearer_auth_and_the_pinned_version() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/payment_intents/pi_X"))
        .and(header(
            "Authorization",
            format!("Bearer {API_KEY}").as_str(),
        ))
        .and(header("Stripe-Version", STRIPE_VERSION))
        .respond_with(ok("pi_X", "succeeded"))
        .expect(1)
        .mount(&server)
        .await;
    let status = gateway(&server)
        .payment_intent_status(&id("pi_X"))
        .await
        .unwrap();
    assert_eq!(status, ExternalStatus::Succeeded);
}

#[tokio::test]
async fn an_undocumented_status_is_passed_on_for_review() {
    let (r, _) = read(ok("pi_X", "requires_reauthorization")).await;
    assert_eq!(
        r.unwrap(),
        ExternalStatus::Unknown("requires_reauthorization".into())
    );
}

#[tokio::test]
async fn stripe_404_is_not_found_but_a_proxy_404_is_unavailable() {
    let (r, _) = read(err(404, "invalid_request_error", "resource_missing")).await;
    assert!(
        matches!(r, Err(GatewayError::NotFound { request_id: Some(ref id) }) if id == "req_err456"),
        "{r:?}"
    );
    let (r, _) =
        read(ResponseTemplate::new(404).set_body_raw("<html>Not Found</html>", "text/html")).await;
    assert!(invalid_body(&r), "{r:?}");
}

#[tokio::test]
async fn rejected_keys_are_final_without_retries() {
    for status in [401, 403] {
        let (r, calls) = read(err(status, "invalid_request_error", "api_key_expired")).await;
        assert!(
            matches!(r, Err(GatewayError::Rejected { status: s, .. }) if s == status),
            "{r:?}"
        );
        assert_eq!(calls, 1);
    }
}

#[tokio::test]
async fn server_errors_are_retried_then_unavailable() {
    for status in [500, 502, 503, 409] {
        let (r, calls) = read(err(status, "api_error", "")).await;
        assert!(
            matches!(r, Err(GatewayError::Unavailable { cause: Unavailable::Status(s), attempts: 3, .. }) if s == status),
            "{r:?}"
        );
        assert_eq!(calls, 3, "HTTP {status}");
    }
}

#[tokio::test]
async fn should_retry_false_is_obeyed() {
    let (r, calls) =
        read(err(500, "api_error", "").insert_header("Stripe-Should-Retry", "false")).await;
    assert!(
        matches!(r, Err(GatewayError::Unavailable { attempts: 1, .. })),
        "{r:?}"
    );
    assert_eq!(calls, 1);
}

#[tokio::test]
async fn rate_limited_429_is_unavailable() {
    let (r, calls) = read(err(429, "invalid_request_error", "rate_limit")).await;
    assert!(
        matches!(
            r,
            Err(GatewayError::Unavailable {
                cause: Unavailable::Status(429),
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(calls, 3);
}

#[tokio::test]
async fn a_timeout_is_unavailable() {
    let server = MockServer::start().await;
    mount(
        &server,
        "pi_X",
        ok("pi_X", "succeeded").set_delay(Duration::from_secs(3)),
    )
    .await;
    let gw = gateway_with(&server, 1000, Duration::from_millis(200));
    let r = gw.payment_intent_status(&id("pi_X")).await;
    assert!(
        matches!(
            r,
            Err(GatewayError::Unavailable {
                cause: Unavailable::Timeout,
                ..
            })
        ),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_refused_connection_is_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The listener is dropped: nothing listens on that port any more.
    let gw = gateway_at(
        &format!("http://127.0.0.1:{port}"),
        1000,
        Duration::from_secs(2),
    );
    let r = gw.payment_intent_status(&id("pi_X")).await;
    assert!(
        matches!(
            r,
            Err(GatewayError::Unavailable {
                cause: Unavailable::Connection(_),
                ..
            })
        ),
        "{r:?}"
    );
}

#[tokio::test]
async fn bodies_that_are_not_a_payment_intent_are_unavailable() {
    let json =
        |body: &str| ResponseTemplate::new(200).set_body_raw(body.to_owned(), "application/json");
    let cases = [
        (
            "html",
            ResponseTemplate::new(200)
                .set_body_raw("<html><body>502 Bad Gateway</body></html>", "text/html"),
        ),
        (
            "truncated",
            json(r#"{"id": "pi_X", "object": "payment_intent", "sta"#),
        ),
        ("empty", json("")),
        (
            "missing status",
            json(r#"{"id": "pi_X", "object": "payment_intent"}"#),
        ),
        (
            "numeric status",
            json(r#"{"id": "pi_X", "object": "payment_intent", "status": 3}"#),
        ),
        (
            "status with spaces",
            json(r#"{"id": "pi_X", "object": "payment_intent", "status": "DROP TABLE x"}"#),
        ),
        (
            "another object",
            json(r#"{"id": "pi_X", "object": "customer", "status": "succeeded"}"#),
        ),
        (
            "another id",
            json(r#"{"id": "pi_Y", "object": "payment_intent", "status": "succeeded"}"#),
        ),
        (
            "wrong content type",
            ResponseTemplate::new(200)
                .set_body_raw(r#"{"id": "pi_X", "status": "succeeded"}"#, "text/plain"),
        ),
    ];
    for (name, response) in cases {
        let (r, _) = read(response).await;
        assert!(invalid_body(&r), "{name}: {r:?}");
    }
}

#[tokio::test]
async fn a_huge_body_is_not_buffered() {
    let mut pi = payment_intent("pi_X", "succeeded");
    pi["metadata"] = serde_json::json!({"padding": "x".repeat(1024 * 1024)});
    let (r, _) = read(ResponseTemplate::new(200).set_body_json(pi)).await;
    assert!(
        matches!(
            r,
            Err(GatewayError::Unavailable {
                cause: Unavailable::TooLarge(_),
                ..
            })
        ),
        "{r:?}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_rejected_key_aborts_the_batch_and_writes_nothing(pool: PgPool) {
    for i in 1..=5 {
        insert_payment(&pool, &format!("pi_{i}"), "pending", 3600).await;
    }
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(err(401, "invalid_request_error", "api_key_invalid"))
        .mount(&server)
        .await;

    let e = run_batch(&pool, &gateway(&server), &settings(200), Mode::Write, None)
        .await
        .unwrap_err();

    assert!(matches!(e, RunError::StripeRejected(_)), "{e:?}");
    assert_eq!(e.exit_code(), 78);
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 0);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        0
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn stripe_down_for_most_of_a_batch_abandons_it_without_moving_the_cursor(pool: PgPool) {
    for i in 1..=10 {
        insert_payment(&pool, &format!("pi_{i}"), "pending", 3600).await;
    }
    let server = MockServer::start().await;
    mount(&server, "pi_1", ok("pi_1", "succeeded")).await;
    Mock::given(method("GET"))
        .respond_with(err(503, "api_error", ""))
        .mount(&server)
        .await;

    let e = run_batch(&pool, &gateway(&server), &settings(200), Mode::Write, None)
        .await
        .unwrap_err();

    assert!(
        matches!(
            e,
            RunError::StripeDown {
                failed: 9,
                asked: 10
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.exit_code(), 1);
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 0);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn occasional_failures_are_unverifiable_and_the_cursor_moves_on(pool: PgPool) {
    for i in 1..=10 {
        insert_payment(&pool, &format!("pi_{i}"), "paid", 3600).await;
    }
    let server = MockServer::start().await;
    mount(&server, "pi_4", err(500, "api_error", "")).await;
    Mock::given(method("GET"))
        .respond_with(|r: &wiremock::Request| {
            ok(r.url.path().rsplit('/').next().unwrap(), "succeeded")
        })
        .mount(&server)
        .await;

    let report = run_batch(&pool, &gateway(&server), &settings(200), Mode::Write, None)
        .await
        .unwrap();

    assert_eq!(
        report
            .verdicts
            .get(stripe_reconciler::reconcile::Verdict::Unverifiable),
        1
    );
    // The batch read the table's last rows: the cycle ended (issue 29).
    assert!(report.wrapped);
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 0);
    assert_eq!(verified(&pool, 4).await, (None, false));
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        9
    );
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

    let report = scan_with(&pool, &gateway(&stripe), &settings(20))
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
        cursor(&pool, SCAN_JOB).await,
        0,
        "the cursor moved past the batch (the table's last rows: the cycle ended)"
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

    let err = scan_with(&pool, &gateway(&stripe), &settings(20))
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
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        0
    );
    assert!(cursor(&pool, SCAN_JOB).await <= 0, "the cursor moved");
}

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

    let report = scan_with(&pool, &gw, &s)
        .await
        .expect("Stripe answers the probe: the batch commits");

    assert_eq!(probes(&stripe).await, 1, "Stripe was probed once");
    assert_eq!(report.verdicts.get(Verdict::Unverifiable), 6);
    assert_eq!(report.verdicts.get(Verdict::InSync), 4);
    assert_eq!(
        cursor(&pool, SCAN_JOB).await,
        0,
        "the cursor moved past them (the table's last rows: the cycle ended)"
    );
    for id in &ids[..6] {
        assert_eq!(verified(&pool, *id).await, (None, false));
    }
    for id in &ids[6..] {
        assert_eq!(verified(&pool, *id).await, (Some("succeeded".into()), true));
    }
    // The next batch reaches the end of the table instead of retrying them forever.
    assert!(scan_with(&pool, &gw, &s).await.unwrap().wrapped);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn when_the_probe_fails_too_the_batch_is_abandoned_as_stripe_down(pool: PgPool) {
    let stripe = MockServer::start().await;
    six_failing_of_ten(&pool, &stripe).await;
    mount_probe(&stripe, server_error()).await;

    let err = scan_with(&pool, &gateway(&stripe), &settings(10))
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
    assert_eq!(cursor(&pool, SCAN_JOB).await, 0, "cursor unmoved");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        0
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );
}
