//! One fake Stripe for the tests (wiremock) that answers as Stripe does, for
//! every read the job makes:
//!
//! - retrieve `GET /v1/payment_intents/{id}`: the PaymentIntent, its
//!   `latest_charge` expanded only with `expand[]=latest_charge` (the id
//!   otherwise); Stripe's 404 `resource_missing` for an id it does not hold;
//! - list `GET /v1/payment_intents`: `object: list`, `data` newest first
//!   (`created` descending, then id descending), `has_more`, `url`, honouring
//!   `created[gte|gt|lte|lt]`, `limit` (1 to 100, default 10; anything else a
//!   400 as Stripe answers), `starting_after` (an unknown id: 400
//!   `resource_missing`) and `expand[]=data.latest_charge`;
//! - Checkout Sessions (issue 32): retrieve `GET /v1/checkout/sessions/{id}`
//!   and list `GET /v1/checkout/sessions` as above, `payment_intent`
//!   expanded with `expand[]=payment_intent[.latest_charge]` (list:
//!   `data.payment_intent[.latest_charge]`), see `super::session_fake`;
//! - events `GET /v1/events`: newest first, honouring `types[]`,
//!   `created[gte|gt|lte|lt]`, `starting_after` and `limit`;
//! - Connect: a request's `Stripe-Account` header selects that account's own
//!   PaymentIntents and events (none: the platform's); an account the fake
//!   does not hold has none (404 on retrieve, empty pages); a refused account
//!   ([`StripeFake::refuse`]) answers Stripe's 403 "does not have access".
//!
//! Any other path answers Stripe's 404 "Unrecognized request URL".
//!
//! It counts the requests per endpoint (and per account) and the list pages
//! that failed (any answer but 200), so a test can assert how rows were read:
//! [`StripeFake::assert_read_by_list`]. And when a test ends, the fake fails
//! it if a list page failed that the test did not ask to fail
//! ([`StripeFake::fail_list`], [`StripeFake::answer_on`],
//! [`StripeFake::refuse`], [`StripeFake::allow_failed_list_pages`]): no test
//! passes by quietly falling back to one retrieve per row.

use std::collections::{HashMap, VecDeque};
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::PgPool;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use super::{err, payment_intent};

/// Retrieve, `GET /v1/payment_intents/{id}`.
pub const RETRIEVE: &str = "retrieve";
/// List, `GET /v1/payment_intents`.
pub const LIST: &str = "list";
/// Events, `GET /v1/events`.
pub const EVENTS: &str = "events";
/// Checkout Session retrieve, `GET /v1/checkout/sessions/{id}`.
pub const SESSION_RETRIEVE: &str = "session_retrieve";
/// Checkout Session list, `GET /v1/checkout/sessions`.
pub const SESSION_LIST: &str = "session_list";
/// Any other path (Stripe's 404 "Unrecognized request URL").
pub const OTHER: &str = "other";

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    /// [`RETRIEVE`], [`LIST`], [`EVENTS`] or [`OTHER`].
    pub endpoint: &'static str,
    /// `Stripe-Account` (`None`: the platform).
    pub account: Option<String>,
    /// The retrieved id, or the page's `starting_after`.
    pub id: Option<String>,
    /// `created[gte]` and `created[lte]` as sent.
    pub gte: Option<i64>,
    pub lte: Option<i64>,
    pub expand: Vec<String>,
    /// The HTTP status answered.
    pub status: u16,
}

/// What one Stripe account (the platform's or a connected one) holds.
#[derive(Default)]
pub(super) struct Holdings {
    /// PaymentIntent objects, newest first.
    pis: Vec<Value>,
    /// Deleted ids: 404 on retrieve, absent from lists.
    deleted: Vec<String>,
    /// Events, newest first.
    events: Vec<Value>,
    /// Checkout Sessions, newest first; `payment_intent` an id or null
    /// (expanded from `pis` when asked: `super::session_fake`).
    pub(super) sessions: Vec<Value>,
}

impl Holdings {
    fn sort(&mut self) {
        self.pis.sort_by(|a, b| {
            b["created"]
                .as_i64()
                .cmp(&a["created"].as_i64())
                .then_with(|| b["id"].as_str().cmp(&a["id"].as_str()))
        });
        self.events
            .sort_by_key(|e| std::cmp::Reverse(e["created"].as_i64().unwrap_or(0)));
        self.sessions.sort_by(|a, b| {
            b["created"]
                .as_i64()
                .cmp(&a["created"].as_i64())
                .then_with(|| b["id"].as_str().cmp(&a["id"].as_str()))
        });
    }

    /// The PaymentIntent `id`, if held and not deleted.
    pub(super) fn pi(&self, id: &str) -> Option<&Value> {
        self.pis
            .iter()
            .find(|p| p["id"] == id)
            .filter(|_| !self.deleted.iter().any(|d| d == id))
    }
}

#[derive(Default)]
struct State {
    accounts: HashMap<Option<String>, Holdings>,
    /// A platform retrieve of an unknown `pi_...` answers this status
    /// (the PaymentIntent is never listed: the fake does not know it).
    any_status: Option<&'static str>,
    latency: Duration,
    /// `(account, endpoint, answer)`: answers instead of the holdings.
    overrides: Vec<(Option<String>, &'static str, ResponseTemplate)>,
    /// Answers for the next list requests (after the first `skip`), in order.
    list_faults: VecDeque<(usize, ResponseTemplate)>,
    seen: Vec<Seen>,
    /// The test made list pages fail on purpose (checked on drop).
    list_failures_expected: bool,
}

/// The fake Stripe (see the module docs). Derefs to its [`MockServer`]
/// (`stripe.uri()`, extra mocks for odd faults).
pub struct StripeFake {
    state: Arc<Mutex<State>>,
    server: MockServer,
}

impl Drop for StripeFake {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let s = self.state();
        let failed: Vec<&Seen> = s
            .seen
            .iter()
            .filter(|x| x.endpoint == LIST && x.status != 200)
            .collect();
        assert!(
            s.list_failures_expected || failed.is_empty(),
            "{} list page(s) failed that the test did not make fail (its rows fell back to retrieves): {failed:#?}",
            failed.len()
        );
    }
}

impl Deref for StripeFake {
    type Target = MockServer;
    fn deref(&self) -> &MockServer {
        &self.server
    }
}

/// Stripe's answer to a request made as an account the platform cannot act
/// for (revoked, or never connected).
pub fn no_access(account: &str) -> ResponseTemplate {
    ResponseTemplate::new(403)
        .insert_header("Request-Id", "req_noaccess")
        .set_body_json(json!({"error": {
            "type": "invalid_request_error",
            "message": format!("The provided key 'sk_test_********************************p7dc' does not have access to account '{account}' (or that account does not exist). Application access may have been revoked."),
        }}))
}

fn key(account: Option<&str>) -> Option<String> {
    account.map(str::to_owned)
}

impl StripeFake {
    /// A fake holding nothing yet.
    pub async fn start() -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(Handler(state.clone()))
            .mount(&server)
            .await;
        StripeFake { state, server }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Every answer takes `latency`.
    pub fn set_latency(&self, latency: Duration) -> &Self {
        self.state().latency = latency;
        self
    }

    /// A platform retrieve of any `pi_...` the fake does not hold answers
    /// `status` (such PaymentIntents are never listed).
    pub fn answer_any(&self, status: &'static str) -> &Self {
        self.state().any_status = Some(status);
        self
    }

    /// Adds a PaymentIntent in `status` created at `created` (Unix seconds)
    /// on `account` (`None`: the platform).
    pub fn add(&self, account: Option<&str>, id: &str, status: &str, created: i64) -> &Self {
        let mut pi = payment_intent(id, status);
        pi["created"] = Value::from(created);
        self.add_object(account, pi)
    }

    /// Adds a PaymentIntent object as is (its `created` orders it); one with
    /// the same id on the same account is replaced.
    pub fn add_object(&self, account: Option<&str>, pi: Value) -> &Self {
        let mut s = self.state();
        let holdings = s.accounts.entry(key(account)).or_default();
        holdings.pis.retain(|p| p["id"] != pi["id"]);
        holdings.pis.push(pi);
        holdings.sort();
        self
    }

    /// Moves the platform's PaymentIntent `id` to `status`, as Stripe's
    /// example object in that status (its `created` kept).
    pub fn set_status(&self, id: &str, status: &str) -> &Self {
        let created = self
            .state()
            .accounts
            .get(&None)
            .and_then(|h| h.pis.iter().find(|p| p["id"] == id))
            .and_then(|p| p["created"].as_i64())
            .unwrap_or_else(|| chrono::Utc::now().timestamp() - 3600);
        self.add(None, id, status, created)
    }

    /// A deleted PaymentIntent of the platform: 404 `resource_missing`,
    /// never listed.
    pub fn delete(&self, id: &str) {
        self.state()
            .accounts
            .entry(None)
            .or_default()
            .deleted
            .push(id.to_owned());
    }

    /// Adds a Checkout Session object as is on `account` (`None`: the
    /// platform); one with the same id on the same account is replaced. Its
    /// `payment_intent` (an id) is expanded from the account's
    /// PaymentIntents when a request asks ([`super::session_fake`]).
    pub fn add_session(&self, account: Option<&str>, session: Value) -> &Self {
        let mut s = self.state();
        let holdings = s.accounts.entry(key(account)).or_default();
        holdings.sessions.retain(|x| x["id"] != session["id"]);
        holdings.sessions.push(session);
        holdings.sort();
        self
    }

    /// Adds an event to `account`'s feed (`None`: the platform's).
    pub fn push_event(&self, account: Option<&str>, event: Value) -> &Self {
        let mut s = self.state();
        let holdings = s.accounts.entry(key(account)).or_default();
        holdings.events.push(event);
        holdings.sort();
        self
    }

    /// The test expects list pages to fail (by a fault it mounted itself).
    pub fn allow_failed_list_pages(&self) -> &Self {
        self.state().list_failures_expected = true;
        self
    }

    /// Every request made as `account` answers Stripe's 403 no-access.
    pub fn refuse(&self, account: &str) -> &Self {
        for endpoint in [RETRIEVE, LIST, EVENTS] {
            self.answer_on(Some(account), endpoint, no_access(account));
        }
        self
    }

    /// Every `endpoint` request made as `account` answers `response`.
    pub fn answer_on(
        &self,
        account: Option<&str>,
        endpoint: &'static str,
        response: ResponseTemplate,
    ) -> &Self {
        let mut s = self.state();
        s.list_failures_expected |= endpoint == LIST;
        s.overrides.push((key(account), endpoint, response));
        self
    }

    /// The list request after `skip` more list requests answers `response`
    /// instead (faults queue up in order).
    pub fn fail_list(&self, skip: usize, response: ResponseTemplate) -> &Self {
        let mut s = self.state();
        s.list_failures_expected = true;
        s.list_faults.push_back((skip, response));
        self
    }

    /// Adds, on the platform, the PaymentIntent of every row of the test's
    /// `payments` table not yet held, in `status`, created when its row was
    /// (`created_at`): what list mode's windows look for.
    pub async fn mirror(&self, pool: &PgPool, status: &str) -> &Self {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT stripe_payment_intent_id, floor(extract(epoch FROM created_at))::bigint
               FROM payments WHERE stripe_payment_intent_id LIKE 'pi\\_%'",
        )
        .fetch_all(pool)
        .await
        .unwrap();
        for (id, created) in rows {
            let held = self
                .state()
                .accounts
                .get(&None)
                .is_some_and(|h| h.pis.iter().any(|p| p["id"] == id.as_str()));
            if !held {
                self.add(None, &id, status, created);
            }
        }
        self
    }

    /// Every request received, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state().seen.clone()
    }

    /// Requests to `endpoint`, all accounts.
    pub fn count(&self, endpoint: &str) -> usize {
        self.state()
            .seen
            .iter()
            .filter(|s| s.endpoint == endpoint)
            .count()
    }

    /// Requests to `endpoint` made as `account` (`None`: the platform).
    pub fn count_on(&self, account: Option<&str>, endpoint: &str) -> usize {
        self.state()
            .seen
            .iter()
            .filter(|s| s.endpoint == endpoint && s.account.as_deref() == account)
            .count()
    }

    /// List pages of a `created` window (not the `limit=1` outage probe).
    pub fn window_pages(&self) -> usize {
        self.state()
            .seen
            .iter()
            .filter(|s| s.endpoint == LIST && s.gte.is_some())
            .count()
    }

    /// List requests answered with anything but 200.
    pub fn failed_list_pages(&self) -> usize {
        self.state()
            .seen
            .iter()
            .filter(|s| s.endpoint == LIST && s.status != 200)
            .count()
    }

    /// Ids retrieved one by one, in order.
    pub fn retrieved(&self) -> Vec<String> {
        self.state()
            .seen
            .iter()
            .filter(|s| s.endpoint == RETRIEVE)
            .filter_map(|s| s.id.clone())
            .collect()
    }

    /// `Stripe-Account` of every request (`None`: absent).
    pub fn accounts_asked(&self) -> Vec<Option<String>> {
        self.state()
            .seen
            .iter()
            .map(|s| s.account.clone())
            .collect()
    }

    /// The run read through list pages (the default read mode) and none
    /// failed, so no row fell back to a retrieve because a page failed; at
    /// most `retrieves` rows were retrieved one by one (those no page held).
    pub fn assert_read_by_list(&self, retrieves: usize) {
        let seen = self.seen();
        let pages = self.window_pages();
        assert!(pages > 0, "no list page was requested: {seen:#?}");
        assert_eq!(
            self.failed_list_pages(),
            0,
            "a list page failed (rows fell back to retrieves): {seen:#?}"
        );
        let retrieved = self.retrieved();
        assert!(
            retrieved.len() <= retrieves,
            "{} retrieves after {pages} list pages (at most {retrieves} expected): {retrieved:?}",
            retrieved.len()
        );
    }
}

/// Answers every request from the shared state.
struct Handler(Arc<Mutex<State>>);

/// The query pairs of one request.
type Query = Vec<(String, String)>;

fn get(q: &Query, k: &str) -> Option<String> {
    q.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

fn all(q: &Query, k: &str) -> Vec<String> {
    q.iter()
        .filter(|(n, _)| n == k)
        .map(|(_, v)| v.clone())
        .collect()
}

/// Stripe's 400 for a query parameter it cannot use.
fn invalid(code: &str, message: &str) -> Box<ResponseTemplate> {
    Box::new(
        ResponseTemplate::new(400)
            .insert_header("Request-Id", "req_invalid")
            .set_body_json(
                json!({"error": {"type": "invalid_request_error", "code": code,
            "message": message, "doc_url": format!("https://stripe.com/docs/error-codes/{code}")}}),
            ),
    )
}

/// `[gte, lt)` from `created[gte|gt|lte|lt]`, or Stripe's 400.
fn created_range(q: &Query) -> Result<(i64, i64), Box<ResponseTemplate>> {
    let (mut gte, mut lt) = (i64::MIN, i64::MAX);
    for (k, v) in q {
        let Some(op) = k.strip_prefix("created[").and_then(|r| r.strip_suffix(']')) else {
            continue;
        };
        let n: i64 = v.parse().map_err(|_| {
            invalid(
                "parameter_invalid_integer",
                &format!("Invalid integer: {v}"),
            )
        })?;
        match op {
            "gte" => gte = gte.max(n),
            "gt" => gte = gte.max(n.saturating_add(1)),
            "lte" => lt = lt.min(n.saturating_add(1)),
            "lt" => lt = lt.min(n),
            _ => {
                return Err(invalid(
                    "parameter_unknown",
                    &format!("Received unknown parameter: {k}"),
                ))
            }
        }
    }
    Ok((gte, lt))
}

/// `limit`: 1 to 100, default 10.
fn limit(q: &Query) -> Result<usize, Box<ResponseTemplate>> {
    match get(q, "limit") {
        None => Ok(10),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=100).contains(&n) => Ok(n),
            _ => Err(invalid(
                "parameter_invalid_integer",
                &format!("Invalid limit: must be between 1 and 100 ({v})"),
            )),
        },
    }
}

/// One page of `items` (newest first) after `starting_after`.
fn page(items: &[&Value], q: &Query, url: &str) -> Result<Value, Box<ResponseTemplate>> {
    let limit = limit(q)?;
    let from = match get(q, "starting_after") {
        Some(after) => match items.iter().position(|o| o["id"] == after.as_str()) {
            Some(p) => p + 1,
            None => {
                return Err(invalid(
                    "resource_missing",
                    &format!("No such object: '{after}'"),
                ))
            }
        },
        None => 0,
    };
    let data: Vec<Value> = items
        .iter()
        .skip(from)
        .take(limit)
        .map(|o| (*o).clone())
        .collect();
    let has_more = items.len() > from + data.len();
    Ok(json!({"object": "list", "data": data, "has_more": has_more, "url": url}))
}

/// `latest_charge` as Stripe sends it unexpanded: the charge's id.
fn collapse_charge(mut pi: Value) -> Value {
    if let Some(id) = pi["latest_charge"].get("id").cloned() {
        pi["latest_charge"] = id;
    }
    pi
}

impl Handler {
    fn answer(
        &self,
        s: &State,
        req: &Request,
        endpoint: &'static str,
        account: &Option<String>,
        q: &Query,
    ) -> ResponseTemplate {
        if let Some((_, _, r)) = s
            .overrides
            .iter()
            .rev()
            .find(|(a, e, _)| a == account && *e == endpoint)
        {
            return r.clone();
        }
        let empty = Holdings::default();
        let holdings = s.accounts.get(account).unwrap_or(&empty);
        let ok = |body: Value, id: &str| {
            ResponseTemplate::new(200)
                .insert_header("Request-Id", id)
                .set_body_json(body)
        };
        let path = req.url.path().trim_end_matches('/');
        match endpoint {
            RETRIEVE => {
                let id = path.rsplit('/').next().unwrap_or_default();
                let expanded = all(q, "expand[]").iter().any(|e| e == "latest_charge");
                let pi = holdings
                    .pis
                    .iter()
                    .find(|p| p["id"] == id)
                    .filter(|_| !holdings.deleted.iter().any(|d| d == id))
                    .cloned()
                    .or_else(|| {
                        let known = s.accounts.values().any(|h| h.pis.iter().any(|p| p["id"] == id));
                        match s.any_status {
                            Some(status) if account.is_none() && !known => {
                                Some(payment_intent(id, status))
                            }
                            _ => None,
                        }
                    });
                match pi {
                    Some(pi) if expanded => ok(pi, "req_retrieve"),
                    Some(pi) => ok(collapse_charge(pi), "req_retrieve"),
                    None => err(404, "invalid_request_error", "resource_missing"),
                }
            }
            LIST => {
                let (gte, lt) = match created_range(q) {
                    Ok(r) => r,
                    Err(e) => return *e,
                };
                let expanded = all(q, "expand[]").iter().any(|e| e == "data.latest_charge");
                let items: Vec<&Value> = holdings
                    .pis
                    .iter()
                    .filter(|p| (gte..lt).contains(&p["created"].as_i64().unwrap_or(0)))
                    .filter(|p| !holdings.deleted.iter().any(|d| p["id"] == d.as_str()))
                    .collect();
                match page(&items, q, "/v1/payment_intents") {
                    Ok(mut body) => {
                        if !expanded {
                            if let Some(data) = body["data"].as_array_mut() {
                                for pi in data.iter_mut() {
                                    *pi = collapse_charge(pi.take());
                                }
                            }
                        }
                        ok(body, "req_list")
                    }
                    Err(e) => *e,
                }
            }
            SESSION_RETRIEVE | SESSION_LIST => {
                let (gte, lt) = match created_range(q) {
                    Ok(r) => r,
                    Err(e) => return *e,
                };
                let expand = all(q, "expand[]");
                if endpoint == SESSION_RETRIEVE {
                    let id = path.rsplit('/').next().unwrap_or_default();
                    return match super::session_fake::retrieve(holdings, id, &expand) {
                        Some(body) => ok(body, "req_session"),
                        None => err(404, "invalid_request_error", "resource_missing"),
                    };
                }
                let items = super::session_fake::listed(holdings, gte..lt, &expand);
                let refs: Vec<&Value> = items.iter().collect();
                match page(&refs, q, "/v1/checkout/sessions") {
                    Ok(body) => ok(body, "req_session_list"),
                    Err(e) => *e,
                }
            }
            EVENTS => {
                let (gte, lt) = match created_range(q) {
                    Ok(r) => r,
                    Err(e) => return *e,
                };
                let types = all(q, "types[]");
                let items: Vec<&Value> = holdings
                    .events
                    .iter()
                    .filter(|e| (gte..lt).contains(&e["created"].as_i64().unwrap_or(0)))
                    .filter(|e| types.is_empty() || types.iter().any(|t| e["type"] == t.as_str()))
                    .collect();
                match page(&items, q, "/v1/events") {
                    Ok(body) => ok(body, "req_events"),
                    Err(e) => *e,
                }
            }
            _ => ResponseTemplate::new(404).set_body_json(json!({"error": {
                "type": "invalid_request_error",
                "message": format!("Unrecognized request URL (GET: {path}). Please see https://stripe.com/docs or we can help at https://support.stripe.com/."),
            }})),
        }
    }
}

impl Respond for Handler {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let mut s = self.0.lock().unwrap();
        let q: Query = req.url.query_pairs().into_owned().collect();
        let account = req
            .headers
            .get("stripe-account")
            .map(|v| v.to_str().unwrap_or("<not text>").to_owned());
        let path = req.url.path().trim_end_matches('/');
        let endpoint = match path {
            "/v1/payment_intents" => LIST,
            "/v1/events" => EVENTS,
            "/v1/checkout/sessions" => SESSION_LIST,
            p if p.starts_with("/v1/checkout/sessions/") && p.matches('/').count() == 4 => {
                SESSION_RETRIEVE
            }
            p if p.starts_with("/v1/payment_intents/") && p.matches('/').count() == 3 => RETRIEVE,
            _ => OTHER,
        };
        let fault = if endpoint == LIST {
            match s.list_faults.front_mut() {
                Some((0, _)) => s.list_faults.pop_front().map(|(_, r)| r),
                Some((skip, _)) => {
                    *skip -= 1;
                    None
                }
                None => None,
            }
        } else {
            None
        };
        let response = fault.unwrap_or_else(|| self.answer(&s, req, endpoint, &account, &q));
        let created = |k: &str| get(&q, k).and_then(|v| v.parse().ok());
        let seen = Seen {
            at: Instant::now(),
            endpoint,
            account,
            id: match endpoint {
                RETRIEVE | SESSION_RETRIEVE => path.rsplit('/').next().map(str::to_owned),
                _ => get(&q, "starting_after"),
            },
            gte: created("created[gte]"),
            lte: created("created[lte]"),
            expand: all(&q, "expand[]"),
            status: status_of(&response),
        };
        s.seen.push(seen);
        response.set_delay(s.latency)
    }
}

/// The HTTP status a template answers (wiremock keeps it private; its
/// `Debug` shows it).
fn status_of(r: &ResponseTemplate) -> u16 {
    let text = format!("{r:?}");
    text.split("status_code: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
