//! Checkout Sessions of the stand-in (docs/checkout-sessions.md), in Stripe's shapes (the
//! session object of `tests/fixtures/checkout_session.json` with its id,
//! states, times and PaymentIntent replaced):
//!
//! - `GET /v1/checkout/sessions/{id}`, with `expand[]=payment_intent` or
//!   `expand[]=payment_intent.latest_charge` (the PaymentIntent as
//!   `GET /v1/payment_intents/{id}` serves it, its latest charge expanded);
//! - `GET /v1/checkout/sessions`, newest first, with `created[gte|gt|lte|lt]`,
//!   `limit` (1 to 100, default 10), `starting_after` and
//!   `expand[]=data.payment_intent[.latest_charge]`;
//! - `POST /standin/checkout/sessions/{id}/{action}` (`complete`,
//!   `complete_unpaid`, `async_payment_succeeded`, `async_payment_failed`,
//!   `expire`): moves the session (creating it, `open`, when unknown) and
//!   records its `checkout.session.*` event without any webhook, on the feed
//!   of the account it lives on. Only the session's event is recorded, not
//!   its PaymentIntent's.
//!
//! Connect as for PaymentIntents: a session on the connected account is
//! served only with its `Stripe-Account` header, and a request with the
//! header sees only that account's sessions (404 otherwise).
//!
//! The seed: when `payments` has a `stripe_checkout_session_id` column,
//! `--seed` adds [`SEEDED`]'s rows after the data set's (no PaymentIntent
//! id, the session id in that column) and counts their expected findings.
//! The stand-in always serves those sessions, whether or not it seeded.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use serde_json::{json, Value};
use sqlx::postgres::PgPoolOptions;
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use super::{Pi, Standin};

const FIXTURE: &str = include_str!("../../tests/fixtures/checkout_session.json");

/// One seeded session row: the payment as the application holds it and
/// the session as Stripe holds it.
pub struct SeededSession {
    /// `payments.order_id`.
    pub order: &'static str,
    /// `cs_…`, in `payments.stripe_checkout_session_id`.
    pub id: &'static str,
    /// The row's status.
    pub local: &'static str,
    /// On the connected account (seeded only with `--connect-account`).
    pub connected: bool,
    /// The session's `status` and `payment_status`.
    pub status: &'static str,
    pub payment_status: &'static str,
    /// Its PaymentIntent: id, status and payment method.
    pub payment_intent: Option<(&'static str, &'static str, &'static str)>,
    /// The finding the job must record (`None`: in flight, no finding).
    pub expected: Option<&'static str>,
}

/// The seeded session rows, created one second apart after the data set's
/// newest row.
pub const SEEDED: [SeededSession; 5] = [
    // The customer paid; `checkout.session.completed` never arrived.
    SeededSession {
        order: "ord_cs_missed_completed",
        id: "cs_test_DemoMissedCompleted",
        local: "pending",
        connected: false,
        status: "complete",
        payment_status: "paid",
        payment_intent: Some(("pi_DemoSessionMissed", "succeeded", "card")),
        expected: Some("missed_success"),
    },
    // A SEPA debit: the session is complete but the money is not there yet.
    SeededSession {
        order: "ord_cs_async_unpaid",
        id: "cs_test_DemoAsyncUnpaid",
        local: "pending",
        connected: false,
        status: "complete",
        payment_status: "unpaid",
        payment_intent: Some(("pi_DemoSessionAsync", "processing", "sepa_debit")),
        expected: None,
    },
    // The customer never paid; `checkout.session.expired` never arrived.
    SeededSession {
        order: "ord_cs_expired",
        id: "cs_test_DemoExpired",
        local: "pending",
        connected: false,
        status: "expired",
        payment_status: "unpaid",
        payment_intent: None,
        expected: Some("missed_cancel"),
    },
    // The customer is still on the checkout page.
    SeededSession {
        order: "ord_cs_open",
        id: "cs_test_DemoOpen",
        local: "pending",
        connected: false,
        status: "open",
        payment_status: "unpaid",
        payment_intent: None,
        expected: None,
    },
    // A missed `checkout.session.completed` on the connected account.
    SeededSession {
        order: "ord_cs_connected_missed",
        id: "cs_test_DemoConnectedMissed",
        local: "pending",
        connected: true,
        status: "complete",
        payment_status: "paid",
        payment_intent: Some(("pi_DemoSessionConnected", "succeeded", "card")),
        expected: Some("missed_success"),
    },
];

/// Seeded session `j` (1-based) and its row were created `3600 - j`
/// seconds before `anchor` (Unix seconds): after every data set row.
fn seeded_created(anchor: i64, j: usize) -> i64 {
    anchor - 3600 + j as i64
}

/// A Checkout Session as the stand-in holds it.
#[derive(Clone)]
struct Session {
    /// The connected account it lives on (`None`: the platform's).
    account: Option<String>,
    status: &'static str,
    payment_status: &'static str,
    /// Its PaymentIntent's id (its status lives in the events feed's state).
    payment_intent: Option<String>,
    /// The PaymentIntent's payment method.
    method: &'static str,
    /// Unix seconds.
    created: i64,
    /// Unix seconds (24 hours after `created`, Stripe's default).
    expires_at: i64,
}

/// Every session the stand-in knows, by id.
pub struct Sessions {
    all: Mutex<HashMap<String, Session>>,
    fixture: Value,
}

/// How a session's PaymentIntent is rendered.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expand {
    /// Its id.
    Id,
    /// The PaymentIntent object, `latest_charge` an id.
    PaymentIntent,
    /// The PaymentIntent object with its latest charge.
    LatestCharge,
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Sessions {
    /// The [`SEEDED`] sessions (the connected one only with a connected
    /// account), their PaymentIntents set in `standin`'s feed.
    pub fn seeded(standin: &Standin, anchor: i64, connected: Option<&str>) -> Self {
        let mut all = HashMap::new();
        for (j, s) in SEEDED.iter().enumerate() {
            let account = match (s.connected, connected) {
                (false, _) => None,
                (true, Some(a)) => Some(a.to_owned()),
                (true, None) => continue,
            };
            if let Some((pi, status, _)) = s.payment_intent {
                standin
                    .moved
                    .set_payment_intent(pi, status, account.as_deref());
            }
            let created = seeded_created(anchor, j + 1);
            all.insert(
                s.id.to_owned(),
                Session {
                    account,
                    status: s.status,
                    payment_status: s.payment_status,
                    payment_intent: s.payment_intent.map(|(pi, _, _)| pi.to_owned()),
                    method: s.payment_intent.map_or("card", |(_, _, m)| m),
                    created,
                    expires_at: created + 24 * 3600,
                },
            );
        }
        Sessions {
            all: Mutex::new(all),
            fixture: serde_json::from_str(FIXTURE).unwrap_or(Value::Null),
        }
    }

    fn get(&self, id: &str) -> Option<Session> {
        self.all
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// Stripe's session object; its PaymentIntent as `expand` asks, in the
    /// state `GET /v1/payment_intents/{id}` would serve.
    fn object(&self, standin: &Standin, id: &str, s: &Session, expand: Expand) -> Value {
        let mut o = self.fixture.clone();
        o["id"] = Value::from(id);
        o["mode"] = Value::from("payment");
        o["status"] = Value::from(s.status);
        o["payment_status"] = Value::from(s.payment_status);
        o["created"] = Value::from(s.created);
        o["expires_at"] = Value::from(s.expires_at);
        o["amount_subtotal"] = Value::from(1099);
        o["amount_total"] = Value::from(1099);
        o["currency"] = Value::from("usd");
        o["payment_method_types"] = json!([s.method]);
        o["url"] = match s.status {
            "open" => Value::from(format!("https://checkout.stripe.com/c/pay/{id}")),
            _ => Value::Null,
        };
        o["payment_intent"] = match (&s.payment_intent, expand) {
            (None, _) => Value::Null,
            (Some(pi), Expand::Id) => Value::from(pi.as_str()),
            (Some(pi), _) => match standin.current(pi) {
                Ok(p) => {
                    let p = Pi {
                        method: s.method,
                        ..p
                    };
                    standin.payment_intent(pi, &p, expand == Expand::LatestCharge)
                }
                Err(_) => Value::from(pi.as_str()),
            },
        };
        o
    }
}

/// The expansion a read asked for (`prefix`: `""` for a retrieve, `"data."`
/// for a list).
fn expansion(request: &Request, prefix: &str) -> Expand {
    let mut expand = Expand::Id;
    for (k, v) in request.url.query_pairs() {
        if k != "expand[]" {
            continue;
        }
        match v.strip_prefix(prefix) {
            Some("payment_intent.latest_charge") => expand = Expand::LatestCharge,
            Some("payment_intent") if expand == Expand::Id => expand = Expand::PaymentIntent,
            _ => {}
        }
    }
    expand
}

fn no_such(standin: &Standin, id: &str) -> ResponseTemplate {
    standin.envelope(
        404,
        "invalid_request_error",
        "resource_missing",
        &format!("No such checkout.session: '{id}'"),
    )
}

/// `GET /v1/checkout/sessions/{id}` and `GET /v1/checkout/sessions`.
struct Api(Arc<Standin>, Arc<Sessions>);

impl Respond for Api {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let (standin, sessions) = (&*self.0, &*self.1);
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
        if request.url.path().trim_end_matches('/') == "/v1/checkout/sessions" {
            return list(standin, sessions, request, account.as_deref());
        }
        let id = request.url.path().rsplit('/').next().unwrap_or_default();
        match sessions.get(id) {
            Some(s) if s.account == account => {
                let o = sessions.object(standin, id, &s, expansion(request, ""));
                standin.reply(200).set_body_json(o)
            }
            _ => no_such(standin, id),
        }
    }
}

/// The list's filters; `Err` is Stripe's 400 for a bad parameter.
struct ListQuery {
    gte: i64,
    lte: i64,
    limit: usize,
    after: Option<String>,
}

fn list_query(request: &Request) -> Result<ListQuery, String> {
    let mut q = ListQuery {
        gte: i64::MIN,
        lte: i64::MAX,
        limit: 10,
        after: None,
    };
    for (k, v) in request.url.query_pairs() {
        match (k.as_ref(), v.parse::<i64>()) {
            ("created[gte]", Ok(n)) => q.gte = q.gte.max(n),
            ("created[gt]", Ok(n)) => q.gte = q.gte.max(n + 1),
            ("created[lte]", Ok(n)) => q.lte = q.lte.min(n),
            ("created[lt]", Ok(n)) => q.lte = q.lte.min(n - 1),
            ("limit", Ok(n)) if (1..=100).contains(&n) => q.limit = n as usize,
            ("starting_after", _) => q.after = Some(v.into_owned()),
            (key, _) if key.starts_with("created") || key == "limit" => {
                return Err(format!("Invalid integer: {v}"))
            }
            _ => {}
        }
    }
    Ok(q)
}

/// `GET /v1/checkout/sessions`: `account`'s sessions, newest first
/// (`created` descending, then id descending).
fn list(
    standin: &Standin,
    sessions: &Sessions,
    request: &Request,
    account: Option<&str>,
) -> ResponseTemplate {
    let q = match list_query(request) {
        Ok(q) => q,
        Err(message) => {
            return standin.envelope(
                400,
                "invalid_request_error",
                "parameter_invalid_integer",
                &message,
            )
        }
    };
    let mut all: Vec<(String, Session)> = sessions
        .all
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|(_, s)| s.account.as_deref() == account)
        .map(|(id, s)| (id.clone(), s.clone()))
        .collect();
    all.sort_unstable_by(|(a, sa), (b, sb)| sb.created.cmp(&sa.created).then_with(|| b.cmp(a)));
    let from = match &q.after {
        None => 0,
        Some(after) => match all.iter().position(|(id, _)| id == after) {
            Some(i) => i + 1,
            None => {
                return standin.envelope(
                    400,
                    "invalid_request_error",
                    "resource_missing",
                    &format!("No such checkout.session: '{after}'"),
                )
            }
        },
    };
    let mut page: Vec<&(String, Session)> = all[from..]
        .iter()
        .filter(|(_, s)| (q.gte..=q.lte).contains(&s.created))
        .take(q.limit + 1)
        .collect();
    let has_more = page.len() > q.limit;
    page.truncate(q.limit);
    let expand = expansion(request, "data.");
    let data: Vec<Value> = page
        .into_iter()
        .map(|(id, s)| sessions.object(standin, id, s, expand))
        .collect();
    standin.reply(200).set_body_json(json!({
        "object": "list", "data": data, "has_more": has_more, "url": "/v1/checkout/sessions",
    }))
}

/// `POST /standin/checkout/sessions/{id}/{action}`.
struct Move(Arc<Standin>, Arc<Sessions>);

/// What an action does: the session's `status` and `payment_status`, its
/// PaymentIntent's status and method (`None`: left as it is), and the
/// event Stripe sends.
type Action = (
    &'static str,
    &'static str,
    Option<(&'static str, &'static str)>,
    &'static str,
);

fn action(name: &str) -> Option<Action> {
    Some(match name {
        "complete" => (
            "complete",
            "paid",
            Some(("succeeded", "card")),
            "checkout.session.completed",
        ),
        "complete_unpaid" => (
            "complete",
            "unpaid",
            Some(("processing", "sepa_debit")),
            "checkout.session.completed",
        ),
        "async_payment_succeeded" => (
            "complete",
            "paid",
            Some(("succeeded", "sepa_debit")),
            "checkout.session.async_payment_succeeded",
        ),
        "async_payment_failed" => (
            "complete",
            "unpaid",
            Some(("requires_payment_method", "sepa_debit")),
            "checkout.session.async_payment_failed",
        ),
        "expire" => ("expired", "unpaid", None, "checkout.session.expired"),
        _ => return None,
    })
}

impl Respond for Move {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let (standin, sessions) = (&*self.0, &*self.1);
        let parts: Vec<&str> = request.url.path().rsplit('/').take(2).collect();
        let (Some(name), Some(id)) = (parts.first(), parts.get(1)) else {
            return ResponseTemplate::new(400);
        };
        let Some((status, payment_status, pi, event_type)) = action(name) else {
            return ResponseTemplate::new(400);
        };
        let account = match standin.moved.acting_as(request) {
            Ok(account) => account,
            Err(refused) => return standin.no_access(&refused),
        };
        let created = now();
        let mut all = sessions.all.lock().unwrap_or_else(|p| p.into_inner());
        let s = all.entry((*id).to_owned()).or_insert_with(|| Session {
            account: account.clone(),
            status: "open",
            payment_status: "unpaid",
            payment_intent: None,
            method: "card",
            created: created - 60,
            expires_at: created - 60 + 24 * 3600,
        });
        if s.account != account {
            return no_such(standin, id);
        }
        s.status = status;
        s.payment_status = payment_status;
        if let Some((pi_status, method)) = pi {
            // A session's PaymentIntent: `pi_` and the session id's letters
            // and digits.
            let pi = s.payment_intent.get_or_insert_with(|| {
                let tail = id.trim_start_matches("cs_").trim_start_matches("test_");
                format!("pi_{}", tail.replace('_', ""))
            });
            standin
                .moved
                .set_payment_intent(pi, pi_status, account.as_deref());
            s.method = method;
        } else if let Some(pi) = &s.payment_intent {
            // Expiry cancels a PaymentIntent that did not take the money.
            if standin.moved.status_of(pi) != Some("succeeded") {
                standin
                    .moved
                    .set_payment_intent(pi, "canceled", account.as_deref());
            }
        }
        let s = s.clone();
        drop(all);
        let object = sessions.object(standin, id, &s, Expand::Id);
        standin
            .moved
            .record_on(account, event_type, created, object);
        ResponseTemplate::new(200).set_body_json(json!({
            "checkout_session": id, "payment_intent": s.payment_intent,
            "event": event_type, "created": created,
        }))
    }
}

/// Mounts the session routes on `server`.
pub async fn mount(server: &MockServer, standin: Arc<Standin>, sessions: Arc<Sessions>) {
    Mock::given(method("GET"))
        .and(path_regex("^/v1/checkout/sessions(/[^/]+)?/?$"))
        .respond_with(super::Guarded(Api(
            Arc::clone(&standin),
            Arc::clone(&sessions),
        )))
        .mount(server)
        .await;
    Mock::given(method("POST"))
        .and(path_regex(
            "^/standin/checkout/sessions/cs_[A-Za-z0-9_]+/[a-z_]+$",
        ))
        .respond_with(Move(standin, sessions))
        .mount(server)
        .await;
}

/// Adds [`SEEDED`]'s rows to the `payments` table of `DATABASE_URL` when it
/// has a `stripe_checkout_session_id` column (the PaymentIntent id NULL),
/// and counts their findings into `expected`. Without the column it does
/// nothing.
///
/// # Errors
/// The database's, e.g. a `stripe_payment_intent_id` that is `NOT NULL`.
pub async fn seed_database(
    anchor: i64,
    connected: Option<&str>,
    expected: &mut BTreeMap<String, u64>,
) -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL").context("--seed needs DATABASE_URL")?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .context("connecting")?;
    let has: Vec<String> = sqlx::query_scalar(
        "SELECT attname::text FROM pg_attribute WHERE attrelid = 'payments'::regclass
            AND attname IN ('stripe_checkout_session_id', 'amount_cents', 'currency') AND NOT attisdropped",
    )
    .fetch_all(&pool)
    .await?;
    if !has.iter().any(|c| c == "stripe_checkout_session_id") {
        return Ok(());
    }
    for (j, s) in SEEDED.iter().enumerate() {
        let account = match (s.connected, connected) {
            (false, _) => None,
            (true, Some(a)) => Some(a),
            (true, None) => continue,
        };
        sqlx::query(
            "INSERT INTO payments (order_id, stripe_payment_intent_id, stripe_checkout_session_id, status,
                                   created_at, updated_at)
             VALUES ($1, NULL, $2, $3, to_timestamp($4), to_timestamp($4))",
        )
        .bind(s.order)
        .bind(s.id)
        .bind(s.local)
        .bind(seeded_created(anchor, j + 1) as f64)
        .execute(&pool)
        .await
        .context("inserting Checkout Session rows (stripe_payment_intent_id must allow NULL)")?;
        if let Some(a) = account {
            sqlx::query("UPDATE payments SET stripe_account = $2 WHERE order_id = $1")
                .bind(s.order)
                .bind(a)
                .execute(&pool)
                .await
                .context("--connect-account needs a stripe_account text column in payments")?;
        }
        if has.len() == 3 {
            sqlx::query(
                "UPDATE payments SET amount_cents = 1099, currency = 'usd' WHERE order_id = $1",
            )
            .bind(s.order)
            .execute(&pool)
            .await
            .context("setting amounts")?;
        }
        if let Some(kind) = s.expected {
            *expected.entry(kind.to_owned()).or_default() += 1;
        }
    }
    Ok(())
}
