//! What each Stripe account holds in the fake, and the state every
//! request is answered from.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use serde_json::Value;
use wiremock::ResponseTemplate;

use super::Seen;

/// What one Stripe account (the platform's or a connected one) holds.
#[derive(Default)]
pub(in crate::support) struct Holdings {
    /// PaymentIntent objects, newest first.
    pub(super) pis: Vec<Value>,
    /// Deleted ids: 404 on retrieve, absent from lists.
    pub(super) deleted: Vec<String>,
    /// Events, newest first.
    pub(super) events: Vec<Value>,
    /// Checkout Sessions, newest first; `payment_intent` an id or null
    /// (expanded from `pis` when asked: `sessions`).
    pub(in crate::support) sessions: Vec<Value>,
    /// Subscription objects, newest first (`super::subscriptions`).
    pub(super) subscriptions: Vec<Value>,
}

/// Newest first: `created` descending, then id descending (Stripe's list
/// order).
fn newest_first(a: &Value, b: &Value) -> std::cmp::Ordering {
    b["created"]
        .as_i64()
        .cmp(&a["created"].as_i64())
        .then_with(|| b["id"].as_str().cmp(&a["id"].as_str()))
}

/// Puts `object` into `list` (newest first), replacing one with its id:
/// one binary search, so thousands of objects add in a blink.
pub(super) fn put(list: &mut Vec<Value>, object: Value) {
    list.retain(|x| x["id"] != object["id"]);
    let at = list.partition_point(|x| newest_first(x, &object).is_lt());
    list.insert(at, object);
}

impl Holdings {
    /// The PaymentIntent `id`, if held and not deleted.
    pub(in crate::support) fn pi(&self, id: &str) -> Option<&Value> {
        self.pis
            .iter()
            .find(|p| p["id"] == id)
            .filter(|_| !self.deleted.iter().any(|d| d == id))
    }
}

#[derive(Default)]
pub(super) struct State {
    pub(super) accounts: HashMap<Option<String>, Holdings>,
    /// A platform retrieve of an unknown `pi_...` answers this status
    /// (the PaymentIntent is never listed: the fake does not know it).
    pub(super) any_status: Option<&'static str>,
    pub(super) latency: Duration,
    /// `(account, endpoint, answer)`: answers instead of the holdings.
    pub(super) overrides: Vec<(Option<String>, &'static str, ResponseTemplate)>,
    /// Answers for the next list requests (after the first `skip`), in order.
    pub(super) list_faults: VecDeque<(usize, ResponseTemplate)>,
    pub(super) seen: Vec<Seen>,
    /// The test mounted its own failing answers over the fake (checked on drop).
    pub(super) list_failures_expected: bool,
    /// `Authorization` header → the account whose own key it is.
    pub(super) keys: HashMap<String, String>,
    /// `(endpoint, id, answer)`: a retrieve of that object answers this
    /// instead of the holdings (every account).
    pub(super) object_faults: Vec<(&'static str, String, ResponseTemplate)>,
    /// `(endpoint, n, delay)`: the `n`-th request to `endpoint` (from 1, all
    /// accounts) is answered after `delay`.
    pub(super) slow: Vec<(&'static str, usize, Duration)>,
    /// `(endpoint, n, hook)`: run when the `n`-th request to `endpoint`
    /// arrives, before it is answered.
    pub(super) hooks: Vec<(&'static str, usize, Hook)>,
}

/// What a test runs when a given request arrives.
pub(super) type Hook = std::sync::Arc<dyn Fn() + Send + Sync>;
