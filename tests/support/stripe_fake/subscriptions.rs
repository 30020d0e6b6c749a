//! Subscriptions in the fake, as Stripe answers them (docs/subscriptions.md;
//! Stripe API reference, "Retrieve a subscription" and "List subscriptions"):
//!
//! - retrieve `GET /v1/subscriptions/{id}`: any subscription the account
//!   holds, canceled ones too; 404 `resource_missing` otherwise;
//! - list `GET /v1/subscriptions`: newest first (`created` descending, then
//!   id descending), `limit` 1 to 100 (default 10), `starting_after`,
//!   `created[gte|gt|lte|lt]`, `customer`, `price`, and Stripe's `status`
//!   rule: **without `status`, `canceled` and `incomplete_expired` ones are
//!   not listed**; `status=all` lists every one, `status=ended` the terminal
//!   ones, one of the eight statuses only that one; any other value is a 400.
//!
//! Connect: the `Stripe-Account` header selects the account's own, as for
//! PaymentIntents. [`subscription`] builds a Stripe-shaped object from
//! Stripe's own fixture (`tests/fixtures/subscription.json`).

use std::ops::Range;

use serde_json::{json, Value};
use wiremock::ResponseTemplate;

use super::holdings::Holdings;
use super::query::{created_range, get, invalid, page, Query};
use super::{key, StripeFake};

/// Subscription retrieve, `GET /v1/subscriptions/{id}`.
pub const SUBSCRIPTION_RETRIEVE: &str = "subscription_retrieve";
/// Subscription list, `GET /v1/subscriptions`.
pub const SUBSCRIPTION_LIST: &str = "subscription_list";

/// Stripe's eight statuses, and those a list leaves out without `status`.
const STATUSES: [&str; 8] = [
    "incomplete",
    "incomplete_expired",
    "trialing",
    "active",
    "past_due",
    "canceled",
    "unpaid",
    "paused",
];
const ENDED: [&str; 2] = ["canceled", "incomplete_expired"];

/// The endpoint of a subscriptions path, if it is one.
pub(super) fn endpoint(path: &str) -> Option<&'static str> {
    match path {
        "/v1/subscriptions" => Some(SUBSCRIPTION_LIST),
        p if p.starts_with("/v1/subscriptions/") && p.matches('/').count() == 3 => {
            Some(SUBSCRIPTION_RETRIEVE)
        }
        _ => None,
    }
}

/// A subscription as Stripe's current API version returns it (its period on
/// the item, no top-level `current_period_end`), in `status`, created at
/// `created` (Unix seconds), billing one item of `price_pro` × 1. A granting
/// or pending one renews 30 days from now; a terminal one ended a day ago
/// (`ended_at`, `canceled_at`), its period ending then.
pub fn subscription(id: &str, status: &str, created: i64) -> Value {
    let mut s: Value =
        serde_json::from_str(include_str!("../../fixtures/subscription.json")).unwrap();
    let now = chrono::Utc::now().timestamp();
    let ended = ENDED.contains(&status);
    let period_end = if ended {
        now - 86_400
    } else {
        now + 30 * 86_400
    };
    s["id"] = json!(id);
    s["status"] = json!(status);
    s["created"] = json!(created);
    s["start_date"] = json!(created);
    s["billing_cycle_anchor"] = json!(created);
    s["cancel_at_period_end"] = json!(false);
    s["cancel_at"] = Value::Null;
    s["trial_end"] = Value::Null;
    s["trial_start"] = Value::Null;
    s["ended_at"] = if ended {
        json!(now - 86_400)
    } else {
        Value::Null
    };
    s["canceled_at"] = s["ended_at"].clone();
    let item = &mut s["items"]["data"][0];
    item["subscription"] = json!(id);
    item["price"]["id"] = json!("price_pro");
    item["plan"]["id"] = json!("price_pro");
    item["quantity"] = json!(1);
    item["current_period_start"] = json!(period_end - 30 * 86_400);
    item["current_period_end"] = json!(period_end);
    s
}

/// A Stripe event of `event_type` (`customer.subscription.deleted`,
/// `invoice.paid`, …) about the subscription `sub` (a subscription object),
/// `secs_ago` old: a `customer.subscription.*` event carries the
/// subscription, an `invoice.*` one an invoice naming it at
/// `parent.subscription_details.subscription`, as Stripe's current API
/// version does.
pub fn subscription_event(id: &str, event_type: &str, sub: &Value, secs_ago: i64) -> Value {
    let created = chrono::Utc::now().timestamp() - secs_ago;
    let object = if event_type.starts_with("invoice.") {
        let paid = event_type == "invoice.paid";
        json!({"id": format!("in_{}", sub["id"].as_str().unwrap_or_default().trim_start_matches("sub_")),
               "object": "invoice", "created": created, "currency": "usd",
               "amount_due": 2000, "amount_paid": if paid { 2000 } else { 0 },
               "status": if paid { "paid" } else { "open" },
               "parent": {"type": "subscription_details",
                          "subscription_details": {"subscription": sub["id"], "metadata": {}}}})
    } else {
        sub.clone()
    };
    json!({"id": id, "object": "event", "api_version": "2025-03-31.basil", "created": created,
           "type": event_type, "data": {"object": object}, "livemode": false,
           "pending_webhooks": 1, "request": {"id": null, "idempotency_key": null}})
}

impl StripeFake {
    /// Adds [`subscription`]`(id, status, created)` on `account` (`None`:
    /// the platform).
    pub fn add_subscription(
        &self,
        account: Option<&str>,
        id: &str,
        status: &str,
        created: i64,
    ) -> &Self {
        self.add_subscription_object(account, subscription(id, status, created))
    }

    /// Adds a subscription object as is (its `created` orders it); one with
    /// the same id on the same account is replaced.
    pub fn add_subscription_object(&self, account: Option<&str>, sub: Value) -> &Self {
        let mut s = self.state();
        let holdings = s.accounts.entry(key(account)).or_default();
        holdings.subscriptions.retain(|x| x["id"] != sub["id"]);
        holdings.subscriptions.push(sub);
        holdings.sort();
        self
    }

    /// The platform's subscription `id` as the fake holds it (for a test
    /// that changes a field and adds it back).
    pub fn subscription(&self, id: &str) -> Option<Value> {
        let s = self.state();
        let held = s.accounts.get(&None)?;
        held.subscriptions.iter().find(|x| x["id"] == id).cloned()
    }
}

/// Which subscriptions a list shows, by its `status` parameter.
enum Shown {
    /// No `status`: every one but the ended ones.
    NotEnded,
    /// `status=all`.
    All,
    /// `status=ended`.
    Ended,
    /// One of the eight statuses.
    One(String),
}

impl Shown {
    /// The parameter read; Stripe's 400 for a value it does not take.
    fn parse(q: &Query) -> Result<Self, Box<ResponseTemplate>> {
        match get(q, "status").as_deref() {
            None => Ok(Shown::NotEnded),
            Some("all") => Ok(Shown::All),
            Some("ended") => Ok(Shown::Ended),
            Some(one) if STATUSES.contains(&one) => Ok(Shown::One(one.to_owned())),
            Some(other) => Err(invalid(
                "parameter_invalid_string",
                &format!(
                    "Invalid status: must be one of {}, all or ended ({other})",
                    STATUSES.join(", ")
                ),
            )),
        }
    }

    fn shows(&self, status: &str) -> bool {
        match self {
            Shown::NotEnded => !ENDED.contains(&status),
            Shown::All => true,
            Shown::Ended => ENDED.contains(&status),
            Shown::One(one) => one == status,
        }
    }
}

fn bills(sub: &Value, price: &str) -> bool {
    sub["items"]["data"]
        .as_array()
        .is_some_and(|items| items.iter().any(|i| i["price"]["id"] == price))
}

/// The answer to a subscriptions request: the body of a 200, or the error
/// Stripe gives.
pub(super) fn answer(
    holdings: &Holdings,
    endpoint: &'static str,
    path: &str,
    q: &Query,
) -> Result<Value, Box<ResponseTemplate>> {
    if endpoint == SUBSCRIPTION_RETRIEVE {
        let id = path.rsplit('/').next().unwrap_or_default();
        return holdings
            .subscriptions
            .iter()
            .find(|s| s["id"] == id)
            .cloned()
            .ok_or_else(|| {
                Box::new(crate::support::err(
                    404,
                    "invalid_request_error",
                    "resource_missing",
                ))
            });
    }
    let (gte, lt): (i64, i64) = created_range(q)?;
    let window: Range<i64> = gte..lt;
    let shown = Shown::parse(q)?;
    let customer = get(q, "customer");
    let price = get(q, "price");
    let items: Vec<&Value> = holdings
        .subscriptions
        .iter()
        .filter(|s| window.contains(&s["created"].as_i64().unwrap_or(0)))
        .filter(|s| shown.shows(s["status"].as_str().unwrap_or_default()))
        .filter(|s| {
            customer
                .as_ref()
                .map_or(true, |c| s["customer"] == c.as_str())
        })
        .filter(|s| price.as_ref().map_or(true, |p| bills(s, p)))
        .collect();
    page(&items, q, "/v1/subscriptions").map_err(|e| e as Box<ResponseTemplate>)
}
