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
//! - Checkout Sessions (docs/checkout-sessions.md): retrieve `GET /v1/checkout/sessions/{id}`
//!   and list `GET /v1/checkout/sessions` as above, `payment_intent`
//!   expanded with `expand[]=payment_intent[.latest_charge]` (list:
//!   `data.payment_intent[.latest_charge]`), see `sessions`;
//! - Subscriptions (docs/subscriptions.md): retrieve `GET /v1/subscriptions/{id}`
//!   and list `GET /v1/subscriptions` with Stripe's `status` rule (without
//!   `status=all` canceled ones are not listed), see `subscriptions`;
//! - events `GET /v1/events`: newest first, honouring `types[]`,
//!   `created[gte|gt|lte|lt]`, `starting_after` and `limit` as above, see
//!   `events` (a [`Feed`] is one account's feed, as a test fills and reads
//!   it);
//! - Connect: a request's `Stripe-Account` header selects that account's own
//!   PaymentIntents, sessions and events (none: the platform's); an account
//!   the fake does not hold has none (404 on retrieve, empty pages); a
//!   refused account ([`StripeFake::refuse`]) answers Stripe's 403 "does not
//!   have access" on every endpoint, the other accounts unaffected;
//! - separate Stripe accounts with their own secret keys (one release per
//!   account, docs/connect.md): [`StripeFake::own_key`] makes a request
//!   authenticated with that key (`Authorization: Bearer`) and no
//!   `Stripe-Account` header read that account's holdings.
//!
//! Any other path answers Stripe's 404 "Unrecognized request URL".
//!
//! It counts the requests per endpoint (and per account) and the list pages
//! that failed (any answer but 200), so a test can assert how rows were read:
//! [`StripeFake::assert_read_by_list`]. And when a test ends, the fake fails
//! it if a page of ANY list endpoint (PaymentIntents, Checkout Sessions,
//! events) failed that the test did not make fail itself: only a request
//! answered by a fault the test arranged ([`StripeFake::fail_list`], or
//! [`StripeFake::answer_on`] and [`StripeFake::refuse`] for the account and
//! endpoint they name) may fail; [`StripeFake::allow_failed_list_pages`] is
//! for a test that mounts its own wiremock answers over the fake. No test
//! passes by quietly falling back to one retrieve per row.
//!
//! - `holdings`: what each account holds, and the fake's shared state.
//! - `arrange`: what a test puts into the fake (PaymentIntents, sessions,
//!   events, deletions, faults).
//! - `observe`: what a test reads back (the requests seen, per endpoint).
//! - `answer`: the answer to each request, as Stripe gives it.
//! - `query`: a request's query parameters and Stripe's 400s for them (the
//!   demo's stand-in serves its events feed with them too).
//! - `status`: the HTTP status of an answer (the guards read it).
//! - `sessions`: Checkout Session objects and their expansion.
//! - `subscriptions`: subscriptions held, retrieved and listed.
//! - `events`: the events feeds, and Stripe's event shape.
//!
//! Timing, where a test needs it: [`StripeFake::set_latency`] (every
//! answer), [`StripeFake::answer_slowly`] (the n-th request to one
//! endpoint), [`StripeFake::on_request`] (something the test does when the
//! n-th request arrives), [`StripeFake::hold_request`] (the n-th request
//! left unanswered until the test, having acted, releases it). Hooks and
//! holds run with the fake's state unlocked, but on wiremock's one server
//! thread: while one waits, no other request to that fake is answered.

mod answer;
mod arrange;
pub mod events;
mod holdings;
mod observe;
mod query;
mod sessions;
mod status;
pub mod subscriptions;

use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

pub(in crate::support) use answer::collapse_charge;
use answer::Handler;
#[allow(unused_imports)] // Not every test binary reads events.
pub use events::{event, Feed};
pub(in crate::support) use holdings::Holdings;
use holdings::State;
pub use observe::Seen;
#[allow(unused_imports)] // Not every test binary builds Checkout Sessions.
pub use sessions::checkout_session;
#[allow(unused_imports)] // Not every test binary reads subscriptions.
pub use subscriptions::{
    subscription, subscription_event, SUBSCRIPTION_LIST, SUBSCRIPTION_RETRIEVE,
};

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

/// The endpoints that answer Stripe list pages (the drop guard's scope).
pub const LISTS: [&str; 4] = [LIST, SESSION_LIST, EVENTS, SUBSCRIPTION_LIST];

/// Every Stripe endpoint the fake answers (what a refused account or a
/// rejected key fails on).
pub const ENDPOINTS: [&str; 7] = [
    RETRIEVE,
    LIST,
    EVENTS,
    SESSION_RETRIEVE,
    SESSION_LIST,
    SUBSCRIPTION_RETRIEVE,
    SUBSCRIPTION_LIST,
];

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
            .filter(|x| LISTS.contains(&x.endpoint) && x.status != 200 && !x.forced)
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
}
