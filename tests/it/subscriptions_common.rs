//! What the subscriptions tests share: the shared fake Stripe holding
//! subscriptions (retrieve, and list with Stripe's `status` rule: without
//! `status`, no canceled or `incomplete_expired` one is listed) and events,
//! Stripe-shaped subscription objects, the binary's environment, and what
//! a user checks afterwards (open findings, the outbox, the rows).

use std::collections::BTreeSet;

use serde_json::{json, Value};
use sqlx::PgPool;
use wiremock::ResponseTemplate;

use crate::support::stripe_fake::subscriptions::{SUBSCRIPTION_LIST, SUBSCRIPTION_RETRIEVE};
use crate::support::stripe_fake::StripeFake;
use crate::support::*;

/// Now, epoch seconds.
pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// A subscription as Stripe returns it (API version basil: the period on
/// the item): `status`, one item of `price` × `quantity` whose period ends
/// `period_end`, created `created`.
pub fn sub(
    id: &str,
    status: &str,
    created: i64,
    price: &str,
    quantity: i64,
    period_end: i64,
) -> Value {
    json!({
        "id": id, "object": "subscription", "status": status, "created": created,
        "customer": "cus_test", "cancel_at_period_end": false, "cancel_at": null,
        "canceled_at": null, "ended_at": null, "trial_end": null,
        "items": {"object": "list", "has_more": false, "data": [
            {"id": format!("si_{id}"), "object": "subscription_item", "quantity": quantity,
             "current_period_end": period_end, "current_period_start": period_end - 2_592_000,
             "price": {"id": price, "object": "price"}, "plan": {"id": price, "object": "plan"}}
        ]}
    })
}

/// The shared fake Stripe ([`StripeFake`]) holding the tests' subscriptions
/// and events on the platform's own account.
pub struct SubsFake(StripeFake);

impl SubsFake {
    /// A fake holding nothing yet.
    pub async fn start() -> Self {
        SubsFake(StripeFake::start().await)
    }

    /// Holds `s`.
    pub fn add(&self, s: Value) {
        self.0.add_subscription_object(None, s);
    }

    /// Holds the event `evt` of `kind` about `object`, created `created`.
    pub fn event(&self, evt: &str, kind: &str, created: i64, object: Value) {
        self.0.push_event(
            None,
            json!({"id": evt, "object": "event", "type": kind, "created": created,
                   "data": {"object": object}}),
        );
    }

    /// List requests answer HTTP 400 `parameter_unknown` (an older API, a
    /// proxy refusing a parameter).
    pub fn refuse_list(&self) {
        let refused = ResponseTemplate::new(400)
            .set_body_json(stripe_error("invalid_request_error", "parameter_unknown"));
        self.0.answer_on(None, SUBSCRIPTION_LIST, refused);
    }

    /// Retrieve requests seen.
    pub fn retrieves(&self) -> usize {
        self.0.count(SUBSCRIPTION_RETRIEVE)
    }

    /// List requests seen.
    pub fn lists(&self) -> usize {
        self.0.count(SUBSCRIPTION_LIST)
    }

    /// Requests seen, to any endpoint.
    pub fn requests(&self) -> usize {
        self.0.seen().len()
    }

    /// Its base URL.
    pub fn uri(&self) -> String {
        self.0.uri()
    }
}

/// The binary's environment: the database, the fake, the subscriptions
/// table and its columns (`vars`), `mode` as the read mode.
pub fn env(
    pool: &PgPool,
    stripe: &SubsFake,
    mode: &str,
    vars: &[(&'static str, &str)],
) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_READ_MODE", mode.to_owned()),
        ("RECONCILER_BATCH_SIZE", "5".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "20".to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
    ];
    env.extend(vars.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}

/// Runs the binary with `args`; asserts its exit code; returns its output.
pub async fn binary(args: &[&str], env: &[(&'static str, String)], code: i32) -> String {
    let out = reconciler_output(args, env).await;
    let text = all_output(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {text}");
    text
}

/// The demo's `payments` and `migrate` through the binary with `env`.
pub async fn migrate(pool: &PgPool, env: &[(&'static str, String)]) -> String {
    create_demo_payments(pool).await;
    binary(&["migrate"], env, 0).await
}

/// The open subscription findings as `(row key, kind)`.
pub async fn open(pool: &PgPool) -> BTreeSet<(String, String)> {
    sqlx::query_as(
        "SELECT coalesce(subscription_id, stripe_subscription_id), kind FROM reconciliation_findings
          WHERE resolved_at IS NULL",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

/// The rows the outbox's `ApplySubscriptionState` commands name.
pub async fn commanded(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT aggregate_id FROM outbox WHERE event_type = 'ApplySubscriptionState' ORDER BY aggregate_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// `(key, kind)` pairs from string slices.
pub fn pairs(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}
