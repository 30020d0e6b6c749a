//! The steps the integration tests share: a batch, a rescan, a drain of the
//! outbox, and the reads of what a user would check afterwards.

use serde_json::{json, Value};
use sqlx::PgPool;
use stripe_reconciler::config::Settings;
use stripe_reconciler::repair::{drain, RepairOptions, RepairReport};
use stripe_reconciler::scan::{run_batch, BatchReport, Mode, RunError, ScanGroups};
use stripe_reconciler::stripe::StripeGateway;
use tokio_util::sync::CancellationToken;
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::gateway;

/// The scan's job name (`RECONCILER_JOB`'s default: docs/configuration.md).
pub const SCAN_JOB: &str = "payments-vs-stripe";

/// One write-mode batch through `gw`; the error is the test's to inspect.
pub async fn scan_with(
    pool: &PgPool,
    gw: &StripeGateway,
    s: &Settings,
) -> Result<BatchReport, RunError> {
    let facts = super::facts(pool, s).await;
    run_batch(pool, gw, &ScanGroups::of(s, &facts), Mode::Write, None).await
}

/// One write-mode batch against the mock Stripe, expected to commit.
pub async fn scan(pool: &PgPool, stripe: &MockServer, s: &Settings) -> BatchReport {
    scan_with(pool, &gateway(stripe), s).await.unwrap()
}

/// Scans the whole table again from the start.
pub async fn rescan(pool: &PgPool, stripe: &MockServer, s: &Settings) -> BatchReport {
    sqlx::query("UPDATE reconciliation_cursor SET last_id = 0")
        .execute(pool)
        .await
        .unwrap();
    scan(pool, stripe, s).await
}

/// A retry of the cycle: the scan's cursor goes back to the start WITHOUT a
/// wrap (`cycle_started_at` unchanged), as after a rolled-back or repeated run.
pub async fn rewind_cursor(pool: &PgPool) {
    sqlx::query("UPDATE reconciliation_cursor SET last_id = 0 WHERE job = $1")
        .bind(SCAN_JOB)
        .execute(pool)
        .await
        .unwrap();
}

/// Forgets everything the reconciler wrote (findings, outbox, cursor, runs,
/// unverifiable streaks, payment state), keeping `payments`: the next scan
/// starts a first cycle over the same rows.
pub async fn forget_scan_state(pool: &PgPool) {
    sqlx::raw_sql(
        "TRUNCATE reconciliation_findings, outbox, reconciliation_cursor, reconciliation_runs,
                  reconciliation_unverifiable RESTART IDENTITY CASCADE;
         TRUNCATE reconciliation_payment_state",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// Drains the outbox with the default options, expected to succeed.
pub async fn drain_all(pool: &PgPool) -> RepairReport {
    drain(pool, RepairOptions::default(), &CancellationToken::new())
        .await
        .unwrap()
}

/// Stripe (the one fake) holds the PaymentIntent `body` (a full Stripe
/// object) on the platform, replacing one with its id: retrieved with its
/// `latest_charge` expanded only when asked, listed by its `created`.
pub async fn mount_pi(stripe: &super::stripe_fake::StripeFake, body: &Value) {
    stripe.add_object(None, body.clone());
}

/// A finding of one payment, as the review queue shows it.
#[derive(Debug, sqlx::FromRow)]
pub struct Finding {
    pub id: i64,
    pub kind: String,
    pub external_status: Option<String>,
    pub open: bool,
    pub resolution: Option<String>,
    pub details: Option<Value>,
}

/// Every finding of `payment`, oldest first.
pub async fn findings_of(pool: &PgPool, payment: i64) -> Vec<Finding> {
    sqlx::query_as(
        "SELECT id, kind, external_status, resolved_at IS NULL AS open, resolution, details
           FROM reconciliation_findings WHERE payment_id = $1 ORDER BY id",
    )
    .bind(payment)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// `(status, version)` of a payment.
pub async fn status_of(pool: &PgPool, payment: i64) -> (String, i64) {
    sqlx::query_as("SELECT status, version FROM payments WHERE id = $1")
        .bind(payment)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// `count` with one bigint parameter.
pub async fn count_for(pool: &PgPool, sql: &str, id: i64) -> i64 {
    sqlx::query_scalar(sql)
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Requests the mock received for paths ending in `suffix`.
pub async fn reads_of(stripe: &MockServer, suffix: &str) -> usize {
    stripe
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path().ends_with(suffix))
        .count()
}

/// An application `payments` table that predates the reconciler and has no
/// UNIQUE constraint on `stripe_payment_intent_id`, then the migrations.
pub async fn payments_without_unique(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE payments (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text NOT NULL,
             status text NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
             version bigint NOT NULL DEFAULT 0,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now())",
    )
    .execute(pool)
    .await
    .unwrap();
    stripe_reconciler::MIGRATOR.run(pool).await.unwrap();
}

/// The name of the test's own database.
pub fn database_name(pool: &PgPool) -> String {
    pool.connect_options()
        .get_database()
        .expect("test database name")
        .to_owned()
}

/// What the binary printed, stdout then stderr.
pub fn all_output(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Stripe's answer to `GET /v1/payment_intents?limit=1` (the outage probe).
pub async fn mount_probe(server: &MockServer, response: ResponseTemplate) {
    Mock::given(method("GET"))
        .and(path("/v1/payment_intents"))
        .and(query_param("limit", "1"))
        .respond_with(response)
        .mount(server)
        .await;
}

/// An empty PaymentIntent list: Stripe answers the outage probe.
pub fn empty_list() -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("Request-Id", "req_probe1")
        .set_body_json(
            json!({"object": "list", "data": [], "has_more": false, "url": "/v1/payment_intents"}),
        )
}

/// Stripe's 500 `api_error`.
pub fn server_error() -> ResponseTemplate {
    ResponseTemplate::new(500)
        .insert_header("Request-Id", "req_500")
        .set_body_json(
            json!({"error": {"type": "api_error", "message": "An unknown error occurred"}}),
        )
}
