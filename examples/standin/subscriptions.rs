//! Subscriptions of the stand-in (docs/subscriptions.md), in Stripe's shape
//! (the object of `tests/fixtures/subscription.json`: its period on the
//! item, no top-level `current_period_end`):
//!
//! - `GET /v1/subscriptions/{id}`: any subscription, canceled ones too; 404
//!   `resource_missing` otherwise;
//! - `GET /v1/subscriptions`: newest first, `created[gte|gt|lte|lt]`,
//!   `limit` (1 to 100, default 10), `starting_after`, and Stripe's `status`
//!   rule: **without `status`, canceled and `incomplete_expired` ones are
//!   not listed**; `status=all` lists every one, `status=ended` the ended
//!   ones, a status only those; any other value is a 400;
//! - `POST /standin/subscriptions/{id}/{status}`: moves a subscription to
//!   one of Stripe's eight statuses (creating it on the account of the
//!   request's `Stripe-Account` when unknown) and records
//!   `customer.subscription.created|updated|deleted` without any webhook: a
//!   missed webhook;
//! - `POST /standin/subscriptions/{id}/invoice.paid` (the subscription
//!   becomes `active`; records `customer.subscription.updated` and
//!   `invoice.paid`) and `/invoice.payment_failed` (`past_due`;
//!   `customer.subscription.updated` and `invoice.payment_failed`); the
//!   invoice names its subscription at `parent.subscription_details.subscription`.
//!
//! `--subscriptions N` serves N generated subscriptions `sub_standin0000001`…
//! on the platform, created one second apart (the newest an hour old), each
//! billing `price_pro` × 1: every 50th (`i % 50 == 0`) `canceled` a day ago,
//! every 50th from 25 `past_due`, the others `active`, renewing 30 days after
//! the start. They are computed, not stored, so a million cost no memory.
//! With `--seed-subscriptions` the stand-in fills the application table
//! `subscriptions` of `DATABASE_URL` (created when absent, which must be
//! empty) with one row per generated subscription, in step with Stripe but
//! for a known mix of drift, and prints the expected findings per kind as
//! one JSON line:
//!
//! - rows `i % 1000 == 500`: `active` locally, canceled at Stripe:
//!   `subscription_missed_cancel`;
//! - rows `i % 1000 == 251`: `canceled` locally, active at Stripe:
//!   `subscription_paid_but_blocked`;
//! - rows `i % 1000 == 777`: a price Stripe does not bill:
//!   `subscription_price_mismatch`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use serde_json::{json, Value};
use sqlx::postgres::PgPoolOptions;
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use super::Standin;

const FIXTURE: &str = include_str!("../../tests/fixtures/subscription.json");
const DAY: i64 = 86_400;
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

/// One subscription as the stand-in holds it.
#[derive(Clone)]
struct Sub {
    id: String,
    status: String,
    created: i64,
    /// The item's `current_period_end`.
    period_end: i64,
    ended_at: Option<i64>,
    account: Option<String>,
}

/// The generated set and the subscriptions moved or created since.
pub struct Subscriptions {
    anchor: i64,
    generated: u64,
    fixture: Value,
    /// Moved or created by `POST`, by id (they win over the generated).
    held: Mutex<HashMap<String, Sub>>,
}

/// The id of generated subscription `i`.
pub fn generated_id(i: u64) -> String {
    format!("sub_standin{i:07}")
}

/// Stripe's status of generated subscription `i`.
pub fn generated_status(i: u64) -> &'static str {
    match i % 50 {
        0 => "canceled",
        25 => "past_due",
        _ => "active",
    }
}

impl Subscriptions {
    /// `n` generated subscriptions relative to `anchor` (Unix seconds).
    pub fn new(anchor: i64, n: u64) -> Self {
        Subscriptions {
            anchor,
            generated: n,
            fixture: serde_json::from_str(FIXTURE).unwrap_or(Value::Null),
            held: Mutex::new(HashMap::new()),
        }
    }

    fn created_of(&self, i: u64) -> i64 {
        self.anchor - (self.generated - i) as i64 - 3600
    }

    fn generated(&self, i: u64) -> Sub {
        let status = generated_status(i);
        let ended = ENDED.contains(&status);
        Sub {
            id: generated_id(i),
            status: status.to_owned(),
            created: self.created_of(i),
            period_end: if ended {
                self.anchor - DAY
            } else {
                self.anchor + 30 * DAY
            },
            ended_at: ended.then_some(self.anchor - DAY),
            account: None,
        }
    }

    fn number(&self, id: &str) -> Option<u64> {
        let n: u64 = id.strip_prefix("sub_standin")?.parse().ok()?;
        (1..=self.generated).contains(&n).then_some(n)
    }

    fn get(&self, id: &str) -> Option<Sub> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.get(id)
            .cloned()
            .or_else(|| self.number(id).map(|i| self.generated(i)))
    }

    fn object(&self, s: &Sub) -> Value {
        let mut o = self.fixture.clone();
        o["id"] = json!(s.id);
        o["status"] = json!(s.status);
        o["created"] = json!(s.created);
        o["start_date"] = json!(s.created);
        o["billing_cycle_anchor"] = json!(s.created);
        o["cancel_at_period_end"] = json!(false);
        o["cancel_at"] = Value::Null;
        o["trial_end"] = Value::Null;
        o["trial_start"] = Value::Null;
        o["ended_at"] = json!(s.ended_at);
        o["canceled_at"] = json!(s.ended_at);
        o["livemode"] = json!(false);
        let item = &mut o["items"]["data"][0];
        item["subscription"] = json!(s.id);
        item["price"]["id"] = json!("price_pro");
        item["plan"]["id"] = json!("price_pro");
        item["quantity"] = json!(1);
        item["current_period_start"] = json!(s.period_end - 30 * DAY);
        item["current_period_end"] = json!(s.period_end);
        o
    }
}

/// Whether a subscription's status is shown.
type Shown<'a> = Box<dyn Fn(&str) -> bool + 'a>;

/// Which subscriptions a list shows, by its `status` parameter.
fn shown(status: Option<&str>) -> Result<Shown<'_>, String> {
    match status {
        None => Ok(Box::new(|s| !ENDED.contains(&s))),
        Some("all") => Ok(Box::new(|_| true)),
        Some("ended") => Ok(Box::new(|s| ENDED.contains(&s))),
        Some(one) if STATUSES.contains(&one) => Ok(Box::new(move |s| s == one)),
        Some(other) => Err(format!(
            "Invalid status: must be one of {}, all or ended ({other})",
            STATUSES.join(", ")
        )),
    }
}

/// A list request's parameters.
struct ListQuery {
    gte: i64,
    lt: i64,
    limit: usize,
    after: Option<String>,
    status: Option<String>,
}

fn list_query(request: &Request) -> Result<ListQuery, String> {
    let mut q = ListQuery {
        gte: i64::MIN,
        lt: i64::MAX,
        limit: 10,
        after: None,
        status: None,
    };
    for (k, v) in request.url.query_pairs() {
        let n = v.parse::<i64>();
        match (k.as_ref(), n) {
            ("created[gte]", Ok(n)) => q.gte = q.gte.max(n),
            ("created[gt]", Ok(n)) => q.gte = q.gte.max(n + 1),
            ("created[lte]", Ok(n)) => q.lt = q.lt.min(n + 1),
            ("created[lt]", Ok(n)) => q.lt = q.lt.min(n),
            ("limit", Ok(n)) if (1..=100).contains(&n) => q.limit = n as usize,
            ("starting_after", _) => q.after = Some(v.into_owned()),
            ("status", _) => q.status = Some(v.into_owned()),
            (key, _) if key.starts_with("created") || key == "limit" => {
                return Err(format!("Invalid {key}: {v}"))
            }
            _ => {}
        }
    }
    Ok(q)
}

impl Subscriptions {
    /// The page of `GET /v1/subscriptions` as `account`: the generated ones
    /// (the platform's) merged with the held ones, newest first.
    fn list(&self, q: &ListQuery, account: Option<&str>) -> Result<Value, (u16, String)> {
        let show = shown(q.status.as_deref()).map_err(|m| (400, m))?;
        let key = |s: &Sub| {
            (
                std::cmp::Reverse(s.created),
                std::cmp::Reverse(s.id.clone()),
            )
        };
        let from = match &q.after {
            Some(id) => match self.get(id) {
                Some(s) => Some(key(&s)),
                None => return Err((400, format!("No such subscription: '{id}'"))),
            },
            None => None,
        };
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut extra: Vec<Sub> = held
            .values()
            .filter(|s| s.account.as_deref() == account)
            .cloned()
            .collect();
        if account.is_none() {
            // The generated ones in the window, newest first: one more than a
            // page of those the list shows (their `created` is base + i).
            let base = self.created_of(0);
            let lo = q.gte.saturating_sub(base).max(1);
            let hi = q.lt.saturating_sub(base).min(self.generated as i64 + 1);
            let mut i = hi;
            let mut taken = 0;
            while i > lo && taken <= q.limit {
                i -= 1;
                let s = self.generated(i as u64);
                let before = from.as_ref().map_or(true, |f| key(&s) > *f);
                if held.contains_key(&s.id) || !before || !show(&s.status) {
                    continue;
                }
                taken += 1;
                extra.push(s);
            }
        }
        let mut items: Vec<Sub> = extra
            .into_iter()
            .filter(|s| (q.gte..q.lt).contains(&s.created) && show(&s.status))
            .filter(|s| from.as_ref().map_or(true, |f| key(s) > *f))
            .collect();
        items.sort_by_key(key);
        let has_more = items.len() > q.limit;
        let data: Vec<Value> = items.iter().take(q.limit).map(|s| self.object(s)).collect();
        Ok(
            json!({"object": "list", "data": data, "has_more": has_more, "url": "/v1/subscriptions"}),
        )
    }
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// An `invoice` object naming `sub` as Stripe's current API version does.
fn invoice(sub: &str, paid: bool, created: i64) -> Value {
    json!({
        "id": format!("in_{}", sub.trim_start_matches("sub_")), "object": "invoice",
        "amount_due": 2000, "amount_paid": if paid { 2000 } else { 0 }, "created": created,
        "currency": "usd", "livemode": false, "status": if paid { "paid" } else { "open" },
        "parent": {"type": "subscription_details",
                   "subscription_details": {"subscription": sub, "metadata": {}}},
    })
}

impl Subscriptions {
    /// `POST /standin/subscriptions/{id}/{action}` made as `account`.
    fn act(
        &self,
        feed: &super::events::Feed,
        id: &str,
        action: &str,
        account: Option<&str>,
    ) -> ResponseTemplate {
        let (status, invoice_event) = match action {
            "invoice.paid" => ("active", Some("invoice.paid")),
            "invoice.payment_failed" => ("past_due", Some("invoice.payment_failed")),
            s if STATUSES.contains(&s) => (s, None),
            _ => return ResponseTemplate::new(400),
        };
        let at = now();
        let known = self.get(id);
        if known
            .as_ref()
            .is_some_and(|s| s.account.as_deref() != account)
        {
            return ResponseTemplate::new(404).set_body_json(json!({"error": {
                "type": "invalid_request_error", "code": "resource_missing",
                "message": format!("No such subscription: '{id}'")}}));
        }
        let created_new = known.is_none();
        let mut sub = known.unwrap_or(Sub {
            id: id.to_owned(),
            status: String::new(),
            created: at,
            period_end: at + 30 * DAY,
            ended_at: None,
            account: account.map(str::to_owned),
        });
        sub.status = status.to_owned();
        if ENDED.contains(&status) {
            sub.ended_at = Some(at);
            sub.period_end = sub.period_end.min(at);
        } else {
            sub.ended_at = None;
            sub.period_end = sub.period_end.max(at + 30 * DAY);
        }
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), sub.clone());
        let event_type = match (created_new, ENDED.contains(&status), status) {
            (true, _, _) => "customer.subscription.created",
            (false, true, _) => "customer.subscription.deleted",
            (false, false, "paused") => "customer.subscription.paused",
            _ => "customer.subscription.updated",
        };
        let owner = account.map(str::to_owned);
        feed.record_on(owner.clone(), event_type, at, self.object(&sub));
        if let Some(kind) = invoice_event {
            feed.record_on(owner, kind, at, invoice(id, kind == "invoice.paid", at));
        }
        ResponseTemplate::new(200).set_body_json(
            json!({"subscription": id, "status": status, "event": event_type, "created": at}),
        )
    }
}

/// `GET /v1/subscriptions[/{id}]` and `POST /standin/subscriptions/{id}/{action}`.
struct Api(Arc<Standin>, Arc<Subscriptions>);

impl Respond for Api {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let (standin, subs) = (&*self.0, &*self.1);
        let auth = request
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if auth != Some(format!("Bearer {}", standin.api_key).as_str()) {
            return standin.envelope(
                401,
                "invalid_request_error",
                "api_key_invalid",
                "Invalid API Key provided.",
            );
        }
        let account = match standin.moved.acting_as(request) {
            Ok(account) => account,
            Err(refused) => return standin.no_access(&refused),
        };
        let account = account.as_deref();
        let path = request.url.path().trim_end_matches('/');
        let parts: Vec<&str> = path.rsplit('/').take(2).collect();
        if path.starts_with("/standin/") {
            let (Some(action), Some(id)) = (parts.first(), parts.get(1)) else {
                return ResponseTemplate::new(400);
            };
            return subs.act(&standin.moved, id, action, account);
        }
        if path == "/v1/subscriptions" {
            return match list_query(request)
                .map_err(|m| (400, m))
                .and_then(|q| subs.list(&q, account))
            {
                Ok(body) => standin.reply(200).set_body_json(body),
                Err((status, message)) => standin.envelope(
                    status,
                    "invalid_request_error",
                    "parameter_invalid",
                    &message,
                ),
            };
        }
        let id = parts.first().copied().unwrap_or_default();
        match subs.get(id) {
            Some(s) if s.account.as_deref() == account => {
                standin.reply(200).set_body_json(subs.object(&s))
            }
            _ => standin.envelope(
                404,
                "invalid_request_error",
                "resource_missing",
                &format!("No such subscription: '{id}'"),
            ),
        }
    }
}

/// Mounts the subscription endpoints.
pub async fn mount(server: &MockServer, standin: Arc<Standin>, subs: Arc<Subscriptions>) {
    Mock::given(method("GET"))
        .and(path_regex("^/v1/subscriptions(/[^/]+)?/?$"))
        .respond_with(super::Guarded(Api(Arc::clone(&standin), Arc::clone(&subs))))
        .mount(server)
        .await;
    Mock::given(method("POST"))
        .and(path_regex("^/standin/subscriptions/[^/]+/[a-z_.]+$"))
        .respond_with(Api(standin, subs))
        .mount(server)
        .await;
}

/// The application's row for generated subscription `i`: its status word,
/// its price, and the finding the job must record (`None`: in step).
fn seeded_row(i: u64) -> (&'static str, &'static str, Option<&'static str>) {
    match i % 1000 {
        500 => ("active", "price_pro", Some("subscription_missed_cancel")),
        251 => (
            "canceled",
            "price_pro",
            Some("subscription_paid_but_blocked"),
        ),
        777 => (
            generated_status(i),
            "price_basic",
            Some("subscription_price_mismatch"),
        ),
        _ => (generated_status(i), "price_pro", None),
    }
}

/// Fills the application's `subscriptions` table (created when absent; it
/// must be empty) with one row per generated subscription and returns the
/// expected findings per kind.
pub async fn seed_database(subs: &Subscriptions) -> anyhow::Result<BTreeMap<String, u64>> {
    let url = std::env::var("DATABASE_URL").context("--seed-subscriptions needs DATABASE_URL")?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .context("connecting")?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS subscriptions (
             id bigserial PRIMARY KEY, stripe_subscription_id text, status text NOT NULL,
             stripe_price text, current_period_end timestamptz, ends_at timestamptz,
             created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now())",
    )
    .execute(&pool)
    .await
    .context("creating subscriptions")?;
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM subscriptions")
        .fetch_one(&pool)
        .await?;
    anyhow::ensure!(
        held == 0,
        "--seed-subscriptions needs an empty subscriptions table ({held} rows)"
    );
    let mut expected = BTreeMap::new();
    let updated = subs.anchor - 2 * 3600;
    for chunk in (1..=subs.generated).collect::<Vec<_>>().chunks(10_000) {
        let (mut ids, mut words, mut prices, mut ends, mut periods, mut created) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for &i in chunk {
            let (word, price, finding) = seeded_row(i);
            let s = subs.generated(i);
            if let Some(kind) = finding {
                *expected.entry(kind.to_owned()).or_insert(0) += 1;
            }
            ids.push(s.id);
            words.push(word);
            prices.push(price);
            ends.push(if ENDED.contains(&word) {
                s.ended_at
            } else {
                None
            });
            periods.push(s.period_end);
            created.push(s.created);
        }
        sqlx::query(
            "INSERT INTO subscriptions (stripe_subscription_id, status, stripe_price, ends_at,
                                        current_period_end, created_at, updated_at)
             SELECT id, word, price, to_timestamp(ends), to_timestamp(period), to_timestamp(created),
                    to_timestamp($7)
               FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[], $6::int8[])
                    AS t(id, word, price, ends, period, created)",
        )
        .bind(&ids)
        .bind(&words)
        .bind(&prices)
        .bind(&ends)
        .bind(&periods)
        .bind(&created)
        .bind(updated)
        .execute(&pool)
        .await
        .context("seeding subscriptions")?;
    }
    Ok(expected)
}
