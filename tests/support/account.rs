//! A wiremock Stripe account that serves both reads the way Stripe does:
//! `GET /v1/payment_intents/{id}` and the list `GET /v1/payment_intents`
//! (newest first, `created[gte]`/`created[lte]`, `limit`, `starting_after`,
//! `object: list`, `data`, `has_more`, `url`). Records every request.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use super::{err, payment_intent};

/// One request the account received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    /// `list` or `retrieve`.
    pub endpoint: &'static str,
    /// The retrieved id, or the list's `starting_after`.
    pub id: Option<String>,
    pub gte: Option<i64>,
    pub lte: Option<i64>,
    pub expand: Vec<String>,
}

#[derive(Default)]
struct State {
    /// PaymentIntent objects, newest first.
    pis: Vec<Value>,
    /// Deleted ids: 404 on retrieve, absent from lists.
    deleted: Vec<String>,
    /// Answers for the next list requests (after the first `skip`), in order.
    list_faults: VecDeque<(usize, ResponseTemplate)>,
    seen: Vec<Seen>,
    list_requests: usize,
}

#[derive(Clone, Default)]
pub struct Account {
    state: Arc<Mutex<State>>,
    pub latency: Duration,
}

impl Account {
    /// An account whose every answer takes `latency`.
    pub fn with_latency(latency: Duration) -> Self {
        Account {
            latency,
            ..Account::default()
        }
    }

    /// Adds a PaymentIntent created at `created` (Unix seconds).
    pub fn add(&self, id: &str, status: &str, created: i64) -> &Self {
        let mut pi = payment_intent(id, status);
        pi["created"] = Value::from(created);
        self.add_object(pi)
    }

    /// Adds a PaymentIntent object as is (its `created` orders it).
    pub fn add_object(&self, pi: Value) -> &Self {
        let mut s = self.state.lock().unwrap();
        s.pis.push(pi);
        s.pis.sort_by(|a, b| {
            b["created"]
                .as_i64()
                .cmp(&a["created"].as_i64())
                .then_with(|| b["id"].as_str().cmp(&a["id"].as_str()))
        });
        self
    }

    /// A deleted PaymentIntent: 404 `resource_missing`, never listed.
    pub fn delete(&self, id: &str) {
        self.state.lock().unwrap().deleted.push(id.to_owned());
    }

    /// The list request after `skip` more list requests answers `response`
    /// instead (faults queue up in order).
    pub fn fail_list(&self, skip: usize, response: ResponseTemplate) {
        self.state
            .lock()
            .unwrap()
            .list_faults
            .push_back((skip, response));
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    pub fn count(&self, endpoint: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.endpoint == endpoint)
            .count()
    }

    pub fn retrieved(&self) -> Vec<String> {
        self.seen()
            .into_iter()
            .filter(|s| s.endpoint == "retrieve")
            .filter_map(|s| s.id)
            .collect()
    }

    pub async fn serve(&self) -> MockServer {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path_regex("^/v1/payment_intents(/[^/]+)?/?$"))
            .respond_with(self.clone())
            .mount(&server)
            .await;
        server
    }
}

impl Respond for Account {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let mut s = self.state.lock().unwrap();
        let query: Vec<(String, String)> = req.url.query_pairs().into_owned().collect();
        let get = |k: &str| query.iter().find(|(q, _)| q == k).map(|(_, v)| v.clone());
        let expand = query
            .iter()
            .filter(|(k, _)| k == "expand[]")
            .map(|(_, v)| v.clone())
            .collect();
        let path = req.url.path().trim_end_matches('/').to_owned();
        let response = if path == "/v1/payment_intents" {
            let gte = get("created[gte]").and_then(|v| v.parse().ok());
            let lte = get("created[lte]").and_then(|v| v.parse().ok());
            let after = get("starting_after");
            s.seen.push(Seen {
                at: Instant::now(),
                endpoint: "list",
                id: after.clone(),
                gte,
                lte,
                expand,
            });
            s.list_requests += 1;
            let fault = match s.list_faults.front_mut() {
                Some((0, _)) => s.list_faults.pop_front().map(|(_, r)| r),
                Some((skip, _)) => {
                    *skip -= 1;
                    None
                }
                None => None,
            };
            if let Some(fault) = fault {
                return fault.set_delay(self.latency);
            }
            let limit: usize = get("limit").and_then(|v| v.parse().ok()).unwrap_or(10);
            let in_window: Vec<&Value> = s
                .pis
                .iter()
                .filter(|pi| {
                    let c = pi["created"].as_i64().unwrap_or(0);
                    gte.map_or(true, |g| c >= g) && lte.map_or(true, |l| c <= l)
                })
                .filter(|pi| !s.deleted.iter().any(|d| pi["id"] == d.as_str()))
                .collect();
            let start = match &after {
                Some(a) => match in_window.iter().position(|pi| pi["id"] == a.as_str()) {
                    Some(p) => p + 1,
                    None => return err(400, "invalid_request_error", "resource_missing"),
                },
                None => 0,
            };
            let data: Vec<Value> = in_window
                .iter()
                .skip(start)
                .take(limit)
                .map(|pi| (*pi).clone())
                .collect();
            let has_more = in_window.len() > start + data.len();
            ResponseTemplate::new(200)
                .insert_header("Request-Id", "req_list")
                .set_body_json(serde_json::json!({
                    "object": "list", "data": data, "has_more": has_more,
                    "url": "/v1/payment_intents",
                }))
        } else {
            let id = path.rsplit('/').next().unwrap_or_default().to_owned();
            s.seen.push(Seen {
                at: Instant::now(),
                endpoint: "retrieve",
                id: Some(id.clone()),
                gte: None,
                lte: None,
                expand,
            });
            match s.pis.iter().find(|pi| pi["id"] == id.as_str()) {
                Some(pi) if !s.deleted.contains(&id) => ResponseTemplate::new(200)
                    .insert_header("Request-Id", "req_one")
                    .set_body_json(pi.clone()),
                _ => err(404, "invalid_request_error", "resource_missing"),
            }
        };
        response.set_delay(self.latency)
    }
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
