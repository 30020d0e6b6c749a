//! What a test puts into the fake: PaymentIntents, Checkout Sessions,
//! events, deletions, and the faults it answers instead.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use wiremock::ResponseTemplate;

use super::holdings::put;
use super::{key, no_access, StripeFake, ENDPOINTS};
use crate::support::payment_intent;

/// A request the fake holds unanswered ([`StripeFake::hold_request`]).
pub struct Held {
    arrivals: tokio::sync::mpsc::UnboundedReceiver<()>,
    release: std::sync::mpsc::Sender<()>,
}

impl Held {
    /// Waits until the held request has arrived (panics after
    /// `wait::PATIENCE`, so a run that never asks fails instead of hanging).
    pub async fn arrived(&mut self) {
        tokio::time::timeout(crate::support::wait::PATIENCE, self.arrivals.recv())
            .await
            .expect("the held request arrives");
    }

    /// Lets the fake answer the held request.
    pub fn release(self) {
        let _ = self.release.send(());
    }
}

impl StripeFake {
    /// Every answer takes `latency`.
    pub fn set_latency(&self, latency: Duration) -> &Self {
        self.state().latency = latency;
        self
    }

    /// The `n`-th request to `endpoint` (counted from 1 over every account)
    /// is answered after `delay` (on top of nothing else: the longer of it
    /// and [`Self::set_latency`]'s).
    pub fn answer_slowly(&self, endpoint: &'static str, n: usize, delay: Duration) -> &Self {
        self.state().slow.push((endpoint, n, delay));
        self
    }

    /// Runs `hook` when the `n`-th request to `endpoint` (counted from 1 over
    /// every account) arrives, before it is answered (a signal in the middle
    /// of a run's reads). The fake's state is unlocked while it runs, but
    /// wiremock answers on one thread through a blocking `Respond`: until
    /// the hook returns, no other request to this fake is answered.
    pub fn on_request(
        &self,
        endpoint: &'static str,
        n: usize,
        hook: impl Fn() + Send + Sync + 'static,
    ) -> &Self {
        self.state().hooks.push((endpoint, n, Arc::new(hook)));
        self
    }

    /// Holds the `n`-th request to `endpoint` (counted from 1 over every
    /// account) when it arrives, unanswered, until the test releases it
    /// ([`Held`]): the test acts while that read is in flight, whatever the
    /// machine's speed. The hold blocks the fake's only server thread
    /// (wiremock's `Respond` cannot wait asynchronously): while it lasts,
    /// every other request to this fake waits too (requests to another fake
    /// do not); the test's `seen()` and `count()` answer.
    pub fn hold_request(&self, endpoint: &'static str, n: usize) -> Held {
        let (arrived, arrivals) = tokio::sync::mpsc::unbounded_channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let released = Mutex::new(released);
        self.on_request(endpoint, n, move || {
            let _ = arrived.send(());
            // A test that fails before releasing drops its `Held`: the
            // request is answered then.
            let _ = released
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(120));
        });
        Held { arrivals, release }
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
        put(&mut holdings.pis, pi);
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
    /// PaymentIntents when a request asks ([`sessions`]).
    pub fn add_session(&self, account: Option<&str>, session: Value) -> &Self {
        let mut s = self.state();
        let holdings = s.accounts.entry(key(account)).or_default();
        put(&mut holdings.sessions, session);
        self
    }

    /// A separate Stripe account with its own secret key: a request
    /// authenticated with `api_key` and no `Stripe-Account` header reads (and
    /// is counted as) `account`'s holdings; any other key reads the
    /// platform's.
    pub fn own_key(&self, api_key: &str, account: &str) -> &Self {
        self.state()
            .keys
            .insert(format!("Bearer {api_key}"), account.to_owned());
        self
    }

    /// Adds an event to `account`'s feed (`None`: the platform's).
    pub fn push_event(&self, account: Option<&str>, event: Value) -> &Self {
        let mut s = self.state();
        let holdings = s.accounts.entry(key(account)).or_default();
        put(&mut holdings.events, event);
        self
    }

    /// The test expects list pages to fail by wiremock answers it mounted
    /// itself over the fake (the fake's own faults need no permission).
    pub fn allow_failed_list_pages(&self) -> &Self {
        self.state().list_failures_expected = true;
        self
    }

    /// Every request made as `account` answers Stripe's 403 no-access (the
    /// other accounts answer as before; only this account's failed list
    /// pages are excused by the drop guard).
    pub fn refuse(&self, account: &str) -> &Self {
        for endpoint in ENDPOINTS {
            self.answer_on(Some(account), endpoint, no_access(account));
        }
        self
    }

    /// Every request made with the platform's key, at every endpoint,
    /// answers `response`: a rejected key (401) or Stripe down (500). The
    /// list pages so failed are ones the test asked for.
    pub fn answer_every_request(&self, response: &ResponseTemplate) -> &Self {
        for endpoint in ENDPOINTS {
            self.answer_on(None, endpoint, response.clone());
        }
        self
    }

    /// Every `endpoint` request made as `account` answers `response` (a
    /// failed list page so answered is one the test asked for).
    pub fn answer_on(
        &self,
        account: Option<&str>,
        endpoint: &'static str,
        response: ResponseTemplate,
    ) -> &Self {
        let mut s = self.state();
        s.overrides.push((key(account), endpoint, response));
        self
    }

    /// Every retrieve of object `id` at `endpoint` ([`RETRIEVE`],
    /// [`SESSION_RETRIEVE`], …), on any account, answers `response` until
    /// [`Self::heal`] (a PaymentIntent Stripe keeps failing for).
    pub fn fail_object(
        &self,
        endpoint: &'static str,
        id: &str,
        response: ResponseTemplate,
    ) -> &Self {
        self.state()
            .object_faults
            .push((endpoint, id.to_owned(), response));
        self
    }

    /// Object `id` is answered from the holdings again.
    pub fn heal(&self, id: &str) -> &Self {
        self.state().object_faults.retain(|(_, x, _)| x != id);
        self
    }

    /// The list request after `skip` more list requests answers `response`
    /// instead (faults queue up in order; a page so answered is one the test
    /// asked for).
    pub fn fail_list(&self, skip: usize, response: ResponseTemplate) -> &Self {
        let mut s = self.state();
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
}
