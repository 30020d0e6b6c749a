//! A notification receiver that answers with a redirect (a moved or
//! retired webhook, a login page in front of it) has not received the
//! message: the findings stay unposted and the next run posts them.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

const HOOK: &str = "/services/T000/B000/sekret-hook-token";

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_redirect_is_not_a_delivery_and_the_next_run_posts_again(pool: PgPool) {
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;
    let receiver = MockServer::start().await;
    let env = vec![
        ("DATABASE_URL", database_url(&pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_BATCHES_PER_RUN", "1".to_owned()),
        ("RECONCILER_NOTIFY_URL", format!("{}{HOOK}", receiver.uri())),
        ("RECONCILER_NOTIFY_FORMAT", "json".to_owned()),
    ];
    // A payment the scan leaves alone (in grace) with a money finding.
    let payment = insert_payment(&pool, "pi_Moved", "paid", 0).await;
    sqlx::query(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status, details)
         VALUES ($1, 'disputed', 'paid', 'succeeded', $2)",
    )
    .bind(payment)
    .bind(json!({"amount": 500, "currency": "usd"}))
    .execute(&pool)
    .await
    .unwrap();

    let moved = Mock::given(method("POST"))
        .and(path(HOOK))
        .respond_with(
            ResponseTemplate::new(302).insert_header("Location", "https://example.com/login"),
        )
        .mount_as_scoped(&receiver)
        .await;
    let out = reconciler_output(&["run"], &env).await;
    assert!(out.status.success(), "{out:?}");
    assert!(!format!("{out:?}").contains("sekret-hook-token"), "{out:?}");
    drop(moved);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_notified").await,
        0,
        "a 302 is not a delivery: the finding must wait for the next run"
    );

    Mock::given(method("POST"))
        .and(path(HOOK))
        .respond_with(ResponseTemplate::new(200))
        .mount(&receiver)
        .await;
    let out = reconciler_output(&["run"], &env).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_notified").await,
        1
    );
}
