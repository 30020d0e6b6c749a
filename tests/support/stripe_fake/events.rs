//! Events in the fake, as Stripe answers `GET /v1/events` (Stripe API
//! reference, "List all events"): newest first (`created` descending, then
//! id descending), `limit` 1 to 100 (default 10, anything else a 400),
//! `starting_after` (an unknown id: 400 `resource_missing`), `has_more`,
//! `created[gte|gt|lte|lt]`, and `types[]` (one or more types; none: every
//! type), each account's own feed selected by `Stripe-Account` as for
//! PaymentIntents.
//!
//! [`event`] builds a `payment_intent.*` event in Stripe's shape; a
//! [`Feed`] is a handle on one account's feed in the fake (what the events
//! tests push, and the pages they read back).

use std::sync::{Arc, Mutex, MutexGuard};

use chrono::Utc;
use serde_json::{json, Value};
use wiremock::ResponseTemplate;

use super::holdings::{put, Holdings, State};
use super::query::{all, created_range, page, Query};
use super::{key, StripeFake, EVENTS};
use crate::support::payment_intent;

/// A Stripe event about PaymentIntent `pi`, `secs_ago` old, its object
/// Stripe's example PaymentIntent in `status` (`metadata.shop_order` is
/// `order-{pi}`); its type `payment_intent.{status}` (`payment_failed` for
/// `requires_payment_method`).
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

/// The body of a `GET /v1/events` page from `holdings`, or Stripe's 400.
pub(super) fn answer(holdings: &Holdings, q: &Query) -> Result<Value, Box<ResponseTemplate>> {
    let (gte, lt) = created_range(q)?;
    let types = all(q, "types[]");
    let items: Vec<&Value> = holdings
        .events
        .iter()
        .filter(|e| (gte..lt).contains(&e["created"].as_i64().unwrap_or(0)))
        .filter(|e| types.is_empty() || types.iter().any(|t| e["type"] == t.as_str()))
        .collect();
    page(&items, q, "/v1/events")
}

/// One account's events feed in a [`StripeFake`] (`None`: the platform's):
/// a handle a test keeps, clones and passes around.
#[derive(Clone)]
pub struct Feed {
    state: Arc<Mutex<State>>,
    account: Option<String>,
}

impl StripeFake {
    /// The platform's events feed.
    pub fn feed(&self) -> Feed {
        self.feed_of(None)
    }

    /// `account`'s events feed (`None`: the platform's).
    pub fn feed_of(&self, account: Option<&str>) -> Feed {
        Feed {
            state: self.state.clone(),
            account: key(account),
        }
    }
}

impl Feed {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Adds an event (its `created` orders it; one with its id is replaced).
    pub fn push(&self, e: Value) {
        let mut s = self.state();
        put(
            &mut s.accounts.entry(self.account.clone()).or_default().events,
            e,
        );
    }

    /// Forgets every event of the feed (as if they had slid out of the next
    /// window).
    pub fn clear(&self) {
        if let Some(h) = self.state().accounts.get_mut(&self.account) {
            h.events.clear();
        }
    }

    /// Event pages asked of this feed so far (any answer).
    pub fn pages_asked(&self) -> usize {
        self.state()
            .seen
            .iter()
            .filter(|x| x.endpoint == EVENTS && x.account == self.account)
            .count()
    }

    /// `created[gte]` of every page asked of this feed, in order (a page
    /// asked without one is left out).
    pub fn created_gte(&self) -> Vec<i64> {
        self.state()
            .seen
            .iter()
            .filter(|x| x.endpoint == EVENTS && x.account == self.account)
            .filter_map(|x| x.gte)
            .collect()
    }
}
