//! What the subscriptions tests share: a Stripe holding subscriptions
//! (retrieve, and list with Stripe's `status` rule: without `status`, no
//! canceled or `incomplete_expired` one is listed), Stripe-shaped
//! subscription objects, the binary's environment, and what a user checks
//! afterwards (open findings, the outbox, the rows).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use sqlx::PgPool;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

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

/// What the fake saw.
#[derive(Debug, Default)]
struct Seen {
    retrieves: usize,
    lists: usize,
    list_without_status_all: usize,
}

/// A Stripe holding subscriptions.
#[derive(Clone, Default)]
pub struct SubsFake {
    subs: Arc<Mutex<Vec<Value>>>,
    events: Arc<Mutex<Vec<Value>>>,
    seen: Arc<Mutex<Seen>>,
    /// List requests answer 400 `parameter_unknown` (an older API, a proxy).
    refuse_list: Arc<Mutex<bool>>,
}

impl SubsFake {
    /// Holds `s`.
    pub fn add(&self, s: Value) {
        self.subs.lock().unwrap().push(s);
    }

    /// Holds the event `evt` of `kind` about `object`, created `created`.
    pub fn event(&self, evt: &str, kind: &str, created: i64, object: Value) {
        self.events.lock().unwrap().push(json!({
            "id": evt, "object": "event", "type": kind, "created": created,
            "data": {"object": object}
        }));
    }

    /// `GET /v1/events`: newest first, only `types[]`, from `created[gte]`.
    fn list_events(&self, req: &Request) -> ResponseTemplate {
        let types: Vec<String> = req
            .url
            .query_pairs()
            .filter(|(k, _)| k == "types[]")
            .map(|(_, v)| v.into())
            .collect();
        let gte = req
            .url
            .query_pairs()
            .find(|(k, _)| k == "created[gte]")
            .and_then(|(_, v)| v.parse::<i64>().ok())
            .unwrap_or(i64::MIN);
        let mut data: Vec<Value> = self
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| {
                types.iter().any(|t| e["type"] == t.as_str())
                    && e["created"].as_i64().unwrap_or(0) >= gte
            })
            .cloned()
            .collect();
        data.sort_by_key(|e| std::cmp::Reverse(e["created"].as_i64()));
        ResponseTemplate::new(200).set_body_json(
            json!({"object": "list", "url": "/v1/events", "has_more": false, "data": data}),
        )
    }

    /// List requests answer HTTP 400 from now on.
    pub fn refuse_list(&self) {
        *self.refuse_list.lock().unwrap() = true;
    }

    /// Retrieve requests seen.
    pub fn retrieves(&self) -> usize {
        self.seen.lock().unwrap().retrieves
    }

    /// List requests seen, and those without `status=all`.
    pub fn lists(&self) -> (usize, usize) {
        let s = self.seen.lock().unwrap();
        (s.lists, s.list_without_status_all)
    }

    /// Serves it.
    pub async fn serve(&self) -> MockServer {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(self.clone())
            .mount(&server)
            .await;
        server
    }

    fn list(&self, req: &Request) -> ResponseTemplate {
        let q: Vec<(String, String)> = req
            .url
            .query_pairs()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let all = get("status").as_deref() == Some("all");
        {
            let mut seen = self.seen.lock().unwrap();
            seen.lists += 1;
            seen.list_without_status_all += usize::from(!all);
        }
        if *self.refuse_list.lock().unwrap() {
            return ResponseTemplate::new(400)
                .set_body_json(stripe_error("invalid_request_error", "parameter_unknown"));
        }
        let num = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
        let (gte, lte) = (
            num("created[gte]").unwrap_or(i64::MIN),
            num("created[lte]").unwrap_or(i64::MAX),
        );
        let limit = num("limit").unwrap_or(10) as usize;
        let mut data: Vec<Value> = self
            .subs
            .lock()
            .unwrap()
            .iter()
            .filter(|s| {
                let c = s["created"].as_i64().unwrap_or(0);
                let ended = matches!(
                    s["status"].as_str(),
                    Some("canceled" | "incomplete_expired")
                );
                c >= gte && c <= lte && (all || !ended)
            })
            .cloned()
            .collect();
        data.sort_by_key(|s| {
            std::cmp::Reverse((s["created"].as_i64(), s["id"].as_str().map(str::to_owned)))
        });
        if let Some(after) = get("starting_after") {
            let Some(at) = data.iter().position(|s| s["id"] == after.as_str()) else {
                return ResponseTemplate::new(400)
                    .set_body_json(stripe_error("invalid_request_error", "resource_missing"));
            };
            data.drain(..=at);
        }
        let has_more = data.len() > limit;
        data.truncate(limit);
        ResponseTemplate::new(200).set_body_json(json!({"object": "list", "url": "/v1/subscriptions", "has_more": has_more, "data": data}))
    }
}

impl Respond for SubsFake {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let path = req.url.path();
        if path == "/v1/subscriptions" {
            return self.list(req);
        }
        if path == "/v1/events" {
            return self.list_events(req);
        }
        if let Some(id) = path.strip_prefix("/v1/subscriptions/") {
            self.seen.lock().unwrap().retrieves += 1;
            let found = self
                .subs
                .lock()
                .unwrap()
                .iter()
                .find(|s| s["id"] == id)
                .cloned();
            return match found {
                Some(s) => ResponseTemplate::new(200).set_body_json(s),
                None => ResponseTemplate::new(404)
                    .set_body_json(stripe_error("invalid_request_error", "resource_missing")),
            };
        }
        ResponseTemplate::new(404).set_body_json(json!({"error": {"type": "invalid_request_error", "message": format!("Unrecognized request URL (GET: {path})")}}))
    }
}

/// The binary's environment: the database, the fake, the subscriptions
/// table and its columns (`vars`), `mode` as the read mode.
pub fn env(
    pool: &PgPool,
    stripe: &MockServer,
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
