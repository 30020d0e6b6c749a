//! STRIPE_API_BASE answering a redirect (docs/scan.md, "Guards"): a configuration error
//! (exit 78) naming the Location's host, and the key never sent there; a live
//! key over plain `http://` is warned about once, without the key.

use crate::support::*;
use sqlx::PgPool;
use stripe_reconciler::stripe::{GatewayError, PaymentIntentId};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Where a redirect points: a server on 127.0.0.2, so the host named in the
/// error is the Location's, not the base's (127.0.0.1), and a followed
/// redirect would arrive here and be counted.
async fn redirect_target() -> MockServer {
    let listener = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    let target = MockServer::builder().listener(listener).start().await;
    Mock::given(method("GET"))
        .respond_with(ok("pi_X", "succeeded"))
        .mount(&target)
        .await;
    target
}

/// A base that answers every request with a 302 to `target`.
async fn redirecting_to(target: &MockServer) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(302)
                .insert_header(
                    "Location",
                    format!("{}/v1/payment_intents/pi_X", target.uri()).as_str(),
                )
                .insert_header("Request-Id", "req_redirect"),
        )
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn a_redirect_is_a_configuration_error_naming_the_location_host() {
    let target = redirect_target().await;
    let base = redirecting_to(&target).await;

    let r = gateway(&base)
        .payment_intent(&PaymentIntentId::parse("pi_X").unwrap())
        .await;

    let Err(e @ GatewayError::Redirected { status: 302, .. }) = r else {
        panic!("expected a redirect error, got {r:?}");
    };
    assert!(
        matches!(&e, GatewayError::Redirected { location_host: Some(h), .. } if h == "127.0.0.2"),
        "{e:?}"
    );
    assert!(e.to_string().contains("redirect to 127.0.0.2"), "{e}");
    assert_eq!(requests(&base).await, 1, "a redirect is final, not retried");
    assert_eq!(requests(&target).await, 0, "the redirect was followed");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn run_against_a_redirecting_base_exits_78_and_sends_the_key_nowhere_else(pool: PgPool) {
    insert_paid(&pool, 3).await;
    let target = redirect_target().await;
    let base = redirecting_to(&target).await;
    let env = [
        ("DATABASE_URL", database_url(&pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", base.uri()),
    ];

    let out = reconciler_output(&["run"], &env).await;

    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(78), "{text}");
    assert!(text.contains("redirect to 127.0.0.2"), "{text}");
    assert!(!text.contains(API_KEY), "the key leaked:\n{text}");
    assert!(requests(&base).await > 0);
    assert_eq!(requests(&target).await, 0, "the key went to the Location");
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 0);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_live_key_over_plain_http_is_warned_about_once_without_the_key(pool: PgPool) {
    const LIVE_KEY: &str = "sk_live_Distinctive51Key0123456789";
    let stripe = stripe_answering("succeeded", std::time::Duration::ZERO).await;
    let run = |key: &str| {
        let env = [
            ("DATABASE_URL", database_url(&pool)),
            ("STRIPE_API_KEY", key.to_owned()),
            ("STRIPE_API_BASE", stripe.uri()),
        ];
        async move {
            let out = reconciler_output(&["run"], &env).await;
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            (out.status.code(), text)
        }
    };

    let (code, live) = run(LIVE_KEY).await;
    assert_eq!(code, Some(0), "a warning, not a refusal:\n{live}");
    assert_eq!(live.matches("is a live key").count(), 1, "{live}");
    assert!(!live.contains(LIVE_KEY), "the key leaked:\n{live}");

    let (code, test) = run(API_KEY).await;
    assert_eq!(code, Some(0), "{test}");
    assert!(!test.contains("is a live key"), "{test}");
}
