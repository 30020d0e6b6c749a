//! Shared test harness: a wiremock Stripe, a gateway pointed at it, payment
//! rows, and queries of what a user would check.
#![allow(dead_code)]

pub mod arrange;
pub mod connected;
mod jobs;
pub mod keyed;
pub mod pgbouncer;
pub mod pushgateway;
pub mod secrets;
pub mod seed_algorithm;
mod steps;
pub mod stripe_fake;
pub mod wait;

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[allow(unused_imports)] // Not every test binary runs a job with a signal.
pub use jobs::{facts, run_job, run_job_until};
use serde_json::Value;
use sqlx::PgPool;
pub use steps::*;
pub use stripe_reconciler::config::{ReadMode, ScanSettings, Settings, Sizing, StripeSettings};
use stripe_reconciler::stripe::{GatewayConfig, RetryPolicy, StripeGateway};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub const API_KEY: &str = "sk_test_4eC39HqLyjWDarjtT1zdp7dc";

/// Stripe's real PaymentIntent example object (shared/stripe).
pub fn payment_intent(id: &str, status: &str) -> Value {
    let mut pi: Value =
        serde_json::from_str(include_str!("../fixtures/payment_intent.json")).unwrap();
    pi["id"] = Value::from(id);
    pi["status"] = Value::from(status);
    // Created an hour ago, like the rows the tests insert (the fixture's
    // 2009 timestamp would make every in-flight PaymentIntent "stuck").
    pi["created"] = Value::from(chrono::Utc::now().timestamp() - 3600);
    // A succeeded PaymentIntent has a latest charge; expanded
    // (`expand[]=latest_charge`), captured whole, nothing refunded or disputed.
    if status == "succeeded" {
        pi["latest_charge"] = clean_charge(id);
    }
    pi
}

/// A Stripe Charge object for PaymentIntent `pi`: 1099 usd, captured whole,
/// not refunded, not disputed (the shape of Stripe's API reference example).
pub fn clean_charge(pi: &str) -> Value {
    serde_json::json!({
        "id": format!("ch_{}", pi.trim_start_matches("pi_")),
        "object": "charge",
        "amount": 1099,
        "amount_captured": 1099,
        "amount_refunded": 0,
        "captured": true,
        "currency": "usd",
        "disputed": false,
        "paid": true,
        "payment_intent": pi,
        "refunded": false,
        "status": "succeeded",
    })
}

pub fn stripe_error(kind: &str, code: &str) -> Value {
    serde_json::json!({"error": {"type": kind, "code": code, "message": "test", "doc_url": "https://stripe.com/docs/error-codes"}})
}

pub fn ok(id: &str, status: &str) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("Request-Id", "req_test123")
        .set_body_json(payment_intent(id, status))
}

/// The summary line a command printed on stdout for `object` (a JSON
/// object whose `"object"` is that word, e.g. `"subscriptions"`); `None`
/// when no line is.
pub fn object_summary(out: &str, object: &str) -> Option<serde_json::Value> {
    out.lines().find_map(|l| {
        serde_json::from_str::<serde_json::Value>(l)
            .ok()
            .filter(|v| v["object"] == object)
    })
}

pub fn err(status: u16, kind: &str, code: &str) -> ResponseTemplate {
    ResponseTemplate::new(status)
        .insert_header("Request-Id", "req_err456")
        .set_body_json(stripe_error(kind, code))
}

/// Mounts `GET /v1/payment_intents/{id}` answering `response` on a bare
/// wiremock server: no `expand[]` rule, no list endpoint, no guard. Only for
/// what docs/testing.md ("Stripe in tests") keeps off the fake (transport
/// faults, answers that are not Stripe's); Stripe's own answers come from
/// [`stripe_fake::StripeFake`] (`set_status`, `add_object`, `fail_object`).
pub async fn mount_bare(server: &MockServer, id: &str, response: ResponseTemplate) {
    Mock::given(method("GET"))
        .and(path(format!("/v1/payment_intents/{id}")))
        .respond_with(response)
        .mount(server)
        .await;
}

/// The settings of an environment with only `DATABASE_URL` (never
/// connected to: the tests pass their own pool): every group at its default.
pub fn default_settings() -> Settings {
    Settings::from_vars([(
        "DATABASE_URL".to_owned(),
        "postgres://test@127.0.0.1/unused".to_owned(),
    )])
    .unwrap()
}

/// Settings for tests: no grace unless asked, fast everything.
pub fn settings(batch_size: u32) -> Settings {
    let defaults = default_settings();
    Settings {
        scan: ScanSettings {
            batch_size,
            batches_per_run: Sizing::Fixed(10),
            // The tests written before list reads mock only the retrieve
            // endpoint; list-mode tests opt in with `list_settings`.
            read_mode: ReadMode::Retrieve,
            ..defaults.scan
        },
        stripe: StripeSettings {
            rate_limit_rps: 1000,
            max_in_flight: 8,
            http_timeout: Duration::from_secs(2),
            ..StripeSettings::default()
        },
        ..defaults
    }
}

/// A gateway at the mock server with short retry delays.
pub fn gateway(server: &MockServer) -> StripeGateway {
    gateway_with(server, 1000, Duration::from_secs(2))
}

pub fn gateway_with(server: &MockServer, rps: u32, timeout: Duration) -> StripeGateway {
    gateway_at(&server.uri(), rps, timeout)
}

pub fn gateway_at(base: &str, rps: u32, timeout: Duration) -> StripeGateway {
    StripeGateway::new(GatewayConfig {
        base: base.parse().unwrap(),
        api_key: API_KEY.to_owned().into(),
        rate_limit_rps: NonZeroU32::new(rps).unwrap(),
        timeout,
        retry: RetryPolicy {
            max_attempts: 3,
            initial_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(20),
        },
        deadline: None,
    })
    .unwrap()
}

/// Inserts a payment and returns its id. `updated_secs_ago` sets `updated_at`.
pub async fn insert_payment(pool: &PgPool, pi: &str, status: &str, updated_secs_ago: i64) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         VALUES ('order-' || $1, $1, $2, now() - interval '30 days',
                 now() - make_interval(secs => $3))
         RETURNING id",
    )
    .bind(pi)
    .bind(status)
    .bind(updated_secs_ago as f64)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Inserts `n` paid payments `pi_{i}` last updated an hour ago; returns nothing.
pub async fn insert_paid(pool: &PgPool, n: i64) {
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         SELECT 'order-' || i, 'pi_' || i, 'paid', now() - interval '30 days', now() - interval '1 hour'
           FROM generate_series(1, $1) AS i",
    )
    .bind(n)
    .execute(pool)
    .await
    .unwrap();
}

#[derive(Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct FindingRow {
    pub payment_id: i64,
    pub kind: String,
    pub local_status: String,
    pub external_status: Option<String>,
    pub open: bool,
}

pub async fn findings(pool: &PgPool) -> Vec<FindingRow> {
    sqlx::query_as(
        "SELECT payment_id, kind, local_status, external_status, resolved_at IS NULL AS open
           FROM reconciliation_findings ORDER BY payment_id, id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[derive(Debug, PartialEq, sqlx::FromRow)]
pub struct OutboxRow {
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: String,
    pub payload: Value,
}

pub async fn outbox(pool: &PgPool) -> Vec<OutboxRow> {
    sqlx::query_as(
        "SELECT aggregate_type, aggregate_id, event_type, payload FROM outbox ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// `(observed_external_status, last_reconciled_at IS NOT NULL)` of a payment.
pub async fn verified(pool: &PgPool, payment_id: i64) -> (Option<String>, bool) {
    sqlx::query_as("SELECT s.observed_external_status, coalesce(s.last_reconciled_at IS NOT NULL, false) FROM payments p LEFT JOIN reconciliation_payment_state s ON s.payment_id = p.id WHERE p.id = $1")
        .bind(payment_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

pub async fn cursor(pool: &PgPool, job: &str) -> i64 {
    sqlx::query_scalar("SELECT last_id FROM reconciliation_cursor WHERE job = $1")
        .bind(job)
        .fetch_optional(pool)
        .await
        .unwrap()
        .unwrap_or(-1)
}

/// Cursor rows a committed phase 3 has touched: a batch inside the table
/// leaves its position (`last_key`), a batch that read the table's last
/// rows puts `last_id` back to 0 but stamps the cycle
/// (`last_cycle_completed_at`). So 0 until phase 3 commits, whichever batch
/// it is (`last_id <= 0` alone is also what a cycle's end leaves).
pub async fn phase_3_commits(pool: &PgPool) -> i64 {
    count(
        pool,
        "SELECT count(*) FROM reconciliation_cursor
          WHERE last_key IS NOT NULL OR last_cycle_completed_at IS NOT NULL",
    )
    .await
}

pub async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// A connection URL for the test's own database, for running the real binary.
pub fn database_url(pool: &PgPool) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL must be set for the tests");
    let mut url = url::Url::parse(&base).unwrap();
    url.set_path(
        pool.connect_options()
            .get_database()
            .expect("test database name"),
    );
    url.to_string()
}

/// The real binary with a clean environment: only PATH and `env`.
pub fn reconciler(args: &[&str], env: &[(&str, String)]) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_stripe-reconciler"));
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    cmd
}

/// Runs the binary to completion off the async runtime.
pub async fn reconciler_output(args: &[&str], env: &[(&str, String)]) -> std::process::Output {
    let mut cmd = reconciler(args, env);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// The one fake Stripe ([`stripe_fake::StripeFake`]) answering a retrieve
/// of any `pi_...` it does not hold in `status` (`expand[]` honoured, list
/// pages empty), every answer after `delay`: for runs in retrieve mode.
pub async fn stripe_answering(status: &'static str, delay: Duration) -> stripe_fake::StripeFake {
    let stripe = stripe_fake::StripeFake::start().await;
    stripe.answer_any(status).set_latency(delay);
    stripe
}

/// The shared fake Stripe ([`stripe_fake::StripeFake`]) for a run of the
/// real binary in its default read mode (`list`): it holds the PaymentIntent
/// of every row already in `pool`'s `payments`, in `status`, created when its
/// row was, so list pages find them; a retrieve of any other `pi_...` answers
/// `status` too. Every answer takes `delay`.
pub async fn stripe_mirroring(
    pool: &PgPool,
    status: &'static str,
    delay: Duration,
) -> stripe_fake::StripeFake {
    let stripe = stripe_fake::StripeFake::start().await;
    stripe.answer_any(status).set_latency(delay);
    stripe.mirror(pool, status).await;
    stripe
}

/// How many requests the mock server received.
pub async fn requests(server: &MockServer) -> usize {
    server.received_requests().await.map_or(0, |r| r.len())
}

/// Answers `succeeded` after `delay` and records when each request arrived.
pub struct Recording {
    arrivals: Arc<Mutex<Vec<Instant>>>,
    delay: Duration,
}

impl Respond for Recording {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        self.arrivals.lock().unwrap().push(Instant::now());
        ok(req.url.path().rsplit('/').next().unwrap(), "succeeded").set_delay(self.delay)
    }
}

pub async fn recording_stripe(delay: Duration) -> (MockServer, Arc<Mutex<Vec<Instant>>>) {
    let server = MockServer::start().await;
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    Mock::given(method("GET"))
        .respond_with(Recording {
            arrivals: arrivals.clone(),
            delay,
        })
        .mount(&server)
        .await;
    (server, arrivals)
}

/// The most arrivals inside any window of `width`.
pub fn max_in_window(arrivals: &[Instant], width: Duration) -> usize {
    let mut sorted = arrivals.to_vec();
    sorted.sort();
    (0..sorted.len())
        .map(|i| {
            sorted[i..]
                .iter()
                .take_while(|t| **t - sorted[i] < width)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The demo's `payments` table, as migration 0001 creates it on an empty
/// database for `#[sqlx::test(migrator = ...)]` (the binary's `migrate`
/// never creates the application's table: docs/schema.md).
pub const DEMO_PAYMENTS: &str = "CREATE TABLE payments (
    id                       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id                 text        NOT NULL,
    stripe_payment_intent_id text        NOT NULL UNIQUE,
    status                   text        NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
    version                  bigint      NOT NULL DEFAULT 0,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now()
)";

/// Creates the demo's `payments` ([`DEMO_PAYMENTS`]) in an empty database,
/// as the demo script does before `migrate`.
pub async fn create_demo_payments(pool: &PgPool) {
    sqlx::raw_sql(DEMO_PAYMENTS).execute(pool).await.unwrap();
}

/// A payment created at `created` (Unix seconds), last updated an hour ago.
pub async fn insert_at(pool: &sqlx::PgPool, pi: &str, status: &str, created: i64) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         VALUES ('order-' || $1 || '-' || $3, $1, $2, to_timestamp($3), now() - interval '1 hour')
         RETURNING id",
    )
    .bind(pi)
    .bind(status)
    .bind(created as f64)
    .fetch_one(pool)
    .await
    .unwrap()
}
