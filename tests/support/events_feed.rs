//! A fake of Stripe's `GET /v1/events`: Stripe's event shape, newest first,
//! honouring `types[]`, `created[gte|gt|lte|lt]`, `starting_after` and
//! `limit` as Stripe does.

use std::sync::{Arc, Mutex};

use chrono::Utc;
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use super::payment_intent;

/// A Stripe event about `pi`, `secs_ago` old, its object in `status`.
pub fn event(id: &str, pi: &str, status: &str, secs_ago: i64) -> Value {
    let kind = match status {
        "requires_payment_method" => "payment_failed",
        s => s,
    };
    let mut object = payment_intent(pi, status);
    object["metadata"] = json!({"shop_order": format!("order-{pi}")});
    json!({"id": id, "object": "event", "api_version": "2020-08-27",
           "created": Utc::now().timestamp() - secs_ago,
           "type": format!("payment_intent.{kind}"), "data": {"object": object},
           "livemode": false, "pending_webhooks": 1,
           "request": {"id": null, "idempotency_key": null}})
}

/// The query pairs of one request.
pub type Query = Vec<(String, String)>;

/// `GET /v1/events`: newest first, honouring `created[gte|gt|lte|lt]`,
/// `starting_after` and `limit` as Stripe does; remembers every query it was
/// asked.
#[derive(Clone, Default)]
pub struct Feed {
    events: Arc<Mutex<Vec<Value>>>,
    asked: Arc<Mutex<Vec<Query>>>,
}

impl Feed {
    pub fn push(&self, e: Value) {
        let mut events = self.events.lock().unwrap();
        events.push(e);
        events.sort_by_key(|e| std::cmp::Reverse(e["created"].as_i64().unwrap()));
    }
    /// Forgets every event (as if they had slid out of the next window).
    pub fn clear(&self) {
        self.events.lock().unwrap().clear();
    }
    /// Pages asked for so far.
    pub fn pages_asked(&self) -> usize {
        self.asked.lock().unwrap().len()
    }
    pub fn created_gte(&self) -> Vec<i64> {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter_map(|q| q.iter().find(|(k, _)| k == "created[gte]"))
            .map(|(_, v)| v.parse().unwrap())
            .collect()
    }
}

impl Respond for Feed {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let q: Query = req.url.query_pairs().into_owned().collect();
        self.asked.lock().unwrap().push(q.clone());
        let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let bound = |k: &str| get(k).map(|v| v.parse::<i64>().unwrap());
        let gte = [bound("created[gte]"), bound("created[gt]").map(|t| t + 1)]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(i64::MIN);
        let lt = [bound("created[lt]"), bound("created[lte]").map(|t| t + 1)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(i64::MAX);
        let limit: usize = get("limit").map_or(10, |v| v.parse().unwrap());
        let types: Vec<String> = q
            .iter()
            .filter(|(k, _)| k == "types[]")
            .map(|(_, v)| v.clone())
            .collect();
        let all: Vec<Value> = self
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| (gte..lt).contains(&e["created"].as_i64().unwrap()))
            .filter(|e| types.iter().any(|t| e["type"] == t.as_str()))
            .cloned()
            .collect();
        let from = get("starting_after")
            .and_then(|a| {
                all.iter()
                    .position(|e| e["id"] == a.as_str())
                    .map(|i| i + 1)
            })
            .unwrap_or(0);
        let page: Vec<Value> = all.iter().skip(from).take(limit).cloned().collect();
        let has_more = from + page.len() < all.len();
        ResponseTemplate::new(200)
            .insert_header("Request-Id", "req_events")
            .set_body_json(
                json!({"object": "list", "url": "/v1/events", "has_more": has_more, "data": page}),
            )
    }
}

pub async fn stripe_with(feed: &Feed) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/events"))
        .respond_with(feed.clone())
        .mount(&server)
        .await;
    server
}
