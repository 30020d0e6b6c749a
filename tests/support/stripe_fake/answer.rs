//! The fake's answer to each request, as Stripe gives it (see the module
//! docs of `stripe_fake`), and the record of the request.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wiremock::{Request, Respond, ResponseTemplate};

use super::holdings::{Holdings, State};
use super::query::{all, created_range, get, page, Query};
use super::status::status_of;
use super::subscriptions::{self, SUBSCRIPTION_LIST, SUBSCRIPTION_RETRIEVE};
use super::{
    events, sessions, Seen, EVENTS, LIST, OTHER, RETRIEVE, SESSION_LIST, SESSION_RETRIEVE,
};
use crate::support::{err, payment_intent};

/// Answers every request from the shared state.
pub(super) struct Handler(pub(super) Arc<Mutex<State>>);

/// `latest_charge` as Stripe sends it unexpanded: the charge's id.
pub(in crate::support) fn collapse_charge(mut pi: Value) -> Value {
    if let Some(id) = pi["latest_charge"].get("id").cloned() {
        pi["latest_charge"] = id;
    }
    pi
}

impl Handler {
    /// The test's own answer for this request, if it arranged one.
    fn forced(
        s: &mut State,
        endpoint: &'static str,
        account: &Option<String>,
        object: &str,
    ) -> Option<ResponseTemplate> {
        if let Some((_, _, r)) = s
            .object_faults
            .iter()
            .find(|(e, id, _)| *e == endpoint && id == object)
        {
            return Some(r.clone());
        }
        if endpoint == LIST {
            match s.list_faults.front_mut() {
                Some((0, _)) => return s.list_faults.pop_front().map(|(_, r)| r),
                Some((skip, _)) => *skip -= 1,
                None => {}
            }
        }
        s.overrides
            .iter()
            .rev()
            .find(|(a, e, _)| a == account && *e == endpoint)
            .map(|(_, _, r)| r.clone())
    }

    fn answer(
        &self,
        s: &State,
        req: &Request,
        endpoint: &'static str,
        account: &Option<String>,
        q: &Query,
    ) -> ResponseTemplate {
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
                        let known = s.accounts.values().any(|h| {
                            h.pis.iter().any(|p| p["id"] == id) || h.deleted.iter().any(|d| d == id)
                        });
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
                    return match sessions::retrieve(holdings, id, &expand) {
                        Some(body) => ok(body, "req_session"),
                        None => err(404, "invalid_request_error", "resource_missing"),
                    };
                }
                let items = sessions::listed(holdings, gte..lt, &expand);
                let refs: Vec<&Value> = items.iter().collect();
                match page(&refs, q, "/v1/checkout/sessions") {
                    Ok(body) => ok(body, "req_session_list"),
                    Err(e) => *e,
                }
            }
            SUBSCRIPTION_RETRIEVE | SUBSCRIPTION_LIST => {
                match subscriptions::answer(holdings, endpoint, path, q) {
                    Ok(body) => ok(body, "req_subscription"),
                    Err(e) => *e,
                }
            }
            EVENTS => match events::answer(holdings, q) {
                Ok(body) => ok(body, "req_events"),
                Err(e) => *e,
            },
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
        let header = |name: &str| {
            req.headers
                .get(name)
                .map(|v| v.to_str().unwrap_or("<not text>").to_owned())
        };
        let account = header("stripe-account")
            .or_else(|| header("authorization").and_then(|k| s.keys.get(&k).cloned()));
        let path = req.url.path().trim_end_matches('/');
        let endpoint = match path {
            "/v1/payment_intents" => LIST,
            "/v1/events" => EVENTS,
            "/v1/checkout/sessions" => SESSION_LIST,
            p if p.starts_with("/v1/checkout/sessions/") && p.matches('/').count() == 4 => {
                SESSION_RETRIEVE
            }
            p if p.starts_with("/v1/payment_intents/") && p.matches('/').count() == 3 => RETRIEVE,
            p => subscriptions::endpoint(p).unwrap_or(OTHER),
        };
        let nth = 1 + s.seen.iter().filter(|x| x.endpoint == endpoint).count();
        let object = path.rsplit('/').next().unwrap_or_default();
        let fault = Self::forced(&mut s, endpoint, &account, object);
        let forced = fault.is_some();
        let response = fault.unwrap_or_else(|| self.answer(&s, req, endpoint, &account, &q));
        let created = |k: &str| get(&q, k).and_then(|v| v.parse().ok());
        let seen = Seen {
            at: Instant::now(),
            endpoint,
            account,
            id: match endpoint {
                RETRIEVE | SESSION_RETRIEVE | SUBSCRIPTION_RETRIEVE => {
                    path.rsplit('/').next().map(str::to_owned)
                }
                _ => get(&q, "starting_after"),
            },
            gte: created("created[gte]"),
            lte: created("created[lte]"),
            expand: all(&q, "expand[]"),
            list_status: get(&q, "status").filter(|_| endpoint == SUBSCRIPTION_LIST),
            status: status_of(&response),
            forced,
        };
        s.seen.push(seen);
        let hooks: Vec<_> = s
            .hooks
            .iter()
            .filter(|(e, n, _)| *e == endpoint && *n == nth)
            .map(|(_, _, hook)| hook.clone())
            .collect();
        let delay = s
            .slow
            .iter()
            .filter(|(e, n, _)| *e == endpoint && *n == nth)
            .map(|(_, _, d)| *d)
            .fold(s.latency, Duration::max);
        // The state is unlocked while the hooks run: the test's `seen()`,
        // `count()` and arrangements go on while a hook waits.
        drop(s);
        for hook in hooks {
            hook();
        }
        response.set_delay(delay)
    }
}
