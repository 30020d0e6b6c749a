//! Each gateway failure class, against a bare wiremock (not the fake: each
//! test hands the gateway one raw answer, Stripe's or not, or a timeout on
//! the wire, and checks how it is classified), and what a batch does with
//! the ones that stop it: a 404 is classified by its body, and rows that
//! always fail do not stall the scan while Stripe answers the outage probe.

use std::time::Duration;

use crate::support::*;
use stripe_reconciler::reconcile::ExternalStatus;
use stripe_reconciler::stripe::{GatewayError, PaymentIntentId, Unavailable, STRIPE_VERSION};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn id(s: &str) -> PaymentIntentId {
    PaymentIntentId::parse(s).unwrap()
}

async fn read(response: ResponseTemplate) -> (Result<ExternalStatus, GatewayError>, usize) {
    let server = MockServer::start().await;
    mount_bare(&server, "pi_X", response).await;
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
    mount_bare(
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
