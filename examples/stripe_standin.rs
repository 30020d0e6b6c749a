//! A local Stripe stand-in for development, the demo and the benchmark.
//! Not part of the production binary (it is an example, built from dev-dependencies).
//!
//! It speaks Stripe's real shapes: `GET /v1/payment_intents/{id}` answers the
//! PaymentIntent example object from Stripe's OpenAPI fixtures with the id and
//! status replaced, errors come as `{"error": {...}}` envelopes, and every
//! response carries a `Request-Id` header. A missing or wrong Bearer key gets 401.
//! `GET /v1/payment_intents` lists them as Stripe does (`object: list`,
//! `data`, `has_more`, `url`), newest first, with the `created[gte|gt|lte|lt]`
//! filters, `limit` (1 to 100, default 10), `starting_after`/`ending_before`
//! and `expand[]=data.latest_charge`. Each PaymentIntent's `created` is its
//! seeded row's `created_at` give or take two seconds (the rows are one
//! second apart, the newest an hour old); a deleted one is not listed, and
//! one that always fails comes without a status (its row falls back to a
//! retrieve, which answers 500). Where it differs from the tests' fake
//! (`tests/support/stripe_fake/`) docs/testing.md says; like the fake it
//! guards its list pages ([`Guarded`]): one failed that the demo did not
//! arrange is reported on stderr, and the demo scripts fail on it.
//!
//! It also serves the events feed, `GET /v1/events` (Stripe's event shape,
//! newest first, `types[]`, `created[gte|gt|lte|lt]`, `starting_after` (an
//! unknown id: 400), `limit` (1 to 100, default 10, else 400)), from
//! `--events N` generated events and from
//! `POST /standin/payment_intents/{id}/{status}`, which moves a PaymentIntent
//! at "Stripe" and records its event without any webhook: a missed webhook.
//! `POST /standin/payment_intents/{id}/refund` (or `/dispute`) refunds in
//! full (or disputes) its latest charge, leaving the PaymentIntent's status
//! as it was, and records `charge.refunded` (or `charge.dispute.created`)
//! with the Charge (or Dispute) object naming the PaymentIntent.
//!
//! Checkout Sessions (docs/checkout-sessions.md, `standin/sessions.rs`): `GET
//! /v1/checkout/sessions/{id}` and `GET /v1/checkout/sessions` with their
//! PaymentIntent expanded, and `POST /standin/checkout/sessions/{id}/{action}`
//! (`complete`, `complete_unpaid`, `async_payment_succeeded`,
//! `async_payment_failed`, `expire`), which records the `checkout.session.*`
//! event. A table with a `stripe_checkout_session_id` column gets five
//! session rows after the data set's (see `sessions::SEEDED`).
//!
//! Subscriptions (docs/subscriptions.md, `standin/subscriptions.rs`): `GET
//! /v1/subscriptions/{id}` and `GET /v1/subscriptions` with Stripe's `status`
//! rule (canceled ones only with `status=all` or `ended`), `--subscriptions N`
//! generated ones, `--seed-subscriptions` to fill the application's
//! `subscriptions` table, and `POST /standin/subscriptions/{id}/{status}`
//! (or `/invoice.paid`, `/invoice.payment_failed`), which records the
//! `customer.subscription.*` and `invoice.*` events without any webhook.
//!
//! ```text
//! stripe_standin [--listen 127.0.0.1:12111] [--api-key sk_test_standin]
//!                [--seed ROWS] [--latency-ms 0] [--events N]
//!                [--connect-account acct_...] [--revoked-account acct_...]
//!                [--subscriptions N] [--seed-subscriptions] [--anchor UNIX]
//! ```
//!
//! Connect (docs/connect.md): with `--connect-account acct_…` every tenth row (the
//! rows numbered 3, 13, 23, ...; the data set's drift falls on some of them)
//! is a PaymentIntent of that connected account: it is served only to a
//! request with `Stripe-Account: acct_…`, and a request with the header sees
//! only that account's PaymentIntents (404 otherwise, like Stripe). A
//! `Stripe-Account` naming any other account, or `--revoked-account`,
//! answers Stripe's 403 "does not have access to account". The seed writes
//! the account id into the table's `stripe_account` column. Each account has
//! its own events feed, as at Stripe: an event about a connected account's
//! PaymentIntent (or its charge) carries `account: acct_…` and is listed
//! only to `GET /v1/events` with that account's header; the platform's feed
//! (no header) lists only the platform's. A `POST /standin/...` with
//! `Stripe-Account` moves that account's PaymentIntent, or creates the id on
//! it when no seed row or earlier `POST` knows it; a PaymentIntent of
//! another account answers 404, a refused account 403 (also on the feed).
//!
//! With `--seed ROWS` it also fills `payments` in `DATABASE_URL` (which must be
//! empty) with a deterministic data set of ROWS payments and a known mix of
//! drift, and prints the expected findings per kind as one JSON line. Stripe's
//! answers come from the same data set, so the demo can compare exactly.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const FIXTURE: &str = include_str!("../tests/fixtures/payment_intent.json");

// The tests' fake's rules for list queries (`created[…]`, `limit`,
// `starting_after`, Stripe's 400s) and its reading of an answer's status:
// the same code, so the stand-in's events feed cannot drift from the fake's.
#[allow(dead_code)] // Not every rule is one the stand-in serves.
#[path = "../tests/support/stripe_fake/query.rs"]
mod query;
#[path = "standin/sessions.rs"]
mod sessions;
#[path = "../tests/support/stripe_fake/status.rs"]
mod status;
#[path = "standin/subscriptions.rs"]
mod subscriptions;

/// What Stripe knows about one id.
#[derive(Clone)]
enum Remote {
    Status(&'static str),
    /// A PaymentIntent with more than a status: its age, charge, amount, method.
    Detailed(Pi),
    Missing,
    Broken,
}

/// The money and timing of a PaymentIntent the stand-in serves.
#[derive(Clone, Copy)]
struct Pi {
    status: &'static str,
    /// Seconds before now that it was `created`.
    age: i64,
    /// `amount` in minor units.
    amount: i64,
    /// `amount_refunded` of its latest charge.
    refunded: i64,
    disputed: bool,
    method: &'static str,
    manual_capture: bool,
}

impl Pi {
    const fn new(status: &'static str) -> Self {
        Pi {
            status,
            age: 3600,
            amount: 1099,
            refunded: 0,
            disputed: false,
            method: "card",
            manual_capture: false,
        }
    }
}

const DAY: i64 = 24 * 3600;

/// One seeded payment: local row plus what Stripe will answer.
struct Seed {
    pi: String,
    local: &'static str,
    recent: bool,
    remote: Remote,
    expected_kind: Option<String>,
    /// The row's amount (minor units) and currency, when the table has them.
    amount: i64,
    currency: &'static str,
}

/// The data set: per mille buckets of the row number, so any size keeps the mix.
fn seed_row(i: u64) -> Seed {
    let pi = format!("pi_3Demo{i:010}");
    let row = |local, remote, kind: Option<&str>| Seed {
        pi: pi.clone(),
        local,
        recent: false,
        remote,
        expected_kind: kind.map(str::to_owned),
        amount: 1099,
        currency: if i % 2 == 0 { "usd" } else { "USD" },
    };
    let detailed = |local, pi: Pi, kind: &str| row(local, Remote::Detailed(pi), Some(kind));
    match i % 1000 {
        0..=14 => row(
            "pending",
            Remote::Status("succeeded"),
            Some("missed_success"),
        ),
        15..=22 => row("pending", Remote::Status("canceled"), Some("missed_cancel")),
        23..=25 => row(
            "paid",
            Remote::Status("requires_payment_method"),
            Some("paid_locally_not_externally"),
        ),
        26 => row(
            "failed",
            Remote::Status("succeeded"),
            Some("unexpected:failed->succeeded"),
        ),
        27..=28 => row("paid", Remote::Missing, Some("missing_externally")),
        29 => Seed {
            pi: format!("pi_{i}/../../v1/customers"),
            ..row(
                "pending",
                Remote::Missing,
                Some("invalid_payment_intent_id"),
            )
        },
        30..=31 => row("paid", Remote::Broken, None),
        32..=41 => Seed {
            recent: true,
            ..row("pending", Remote::Status("processing"), None)
        },
        42..=91 => row("pending", Remote::Status("processing"), None),
        92..=141 => row("failed", Remote::Status("requires_payment_method"), None),
        142..=241 => row("failed", Remote::Status("canceled"), None),
        242..=341 => row("pending", Remote::Status("requires_payment_method"), None),
        // Two rows holding one PaymentIntent (a table without the UNIQUE
        // constraint): both pending, Stripe succeeded; neither may be repaired.
        342 => row(
            "pending",
            Remote::Status("succeeded"),
            Some("duplicate_payment_intent"),
        ),
        343 => Seed {
            pi: format!("pi_3Demo{:010}", i - 1),
            ..row(
                "pending",
                Remote::Status("succeeded"),
                Some("duplicate_payment_intent"),
            )
        },
        // Money Stripe did not keep: never repaired to paid.
        344 => detailed(
            "pending",
            Pi {
                refunded: 1099,
                ..Pi::new("succeeded")
            },
            "refunded",
        ),
        345 => detailed(
            "paid",
            Pi {
                refunded: 500,
                ..Pi::new("succeeded")
            },
            "refunded",
        ),
        346 => detailed(
            "pending",
            Pi {
                disputed: true,
                ..Pi::new("succeeded")
            },
            "disputed",
        ),
        347 => detailed(
            "paid",
            Pi {
                disputed: true,
                ..Pi::new("succeeded")
            },
            "disputed",
        ),
        // A zero-decimal currency stored 100x (JPY 1,099 stored as 109,900).
        348 => Seed {
            amount: 109_900,
            ..row("paid", Remote::Status("succeeded"), Some("amount_mismatch"))
        },
        349 => Seed {
            currency: "eur",
            ..row(
                "paid",
                Remote::Status("succeeded"),
                Some("currency_mismatch"),
            )
        },
        // Deadlines: an authorisation 6 days old, a SEPA debit processing
        // for 20 days, a checkout waiting for the customer for 40 days.
        350 => detailed(
            "pending",
            Pi {
                age: 6 * DAY,
                manual_capture: true,
                ..Pi::new("requires_capture")
            },
            "authorization_expiring",
        ),
        351 => detailed(
            "pending",
            Pi {
                age: 20 * DAY,
                method: "sepa_debit",
                ..Pi::new("processing")
            },
            "stuck_processing",
        ),
        352 => detailed(
            "pending",
            Pi {
                age: 40 * DAY,
                ..Pi::new("requires_action")
            },
            "abandoned",
        ),
        _ => row("paid", Remote::Status("succeeded"), None),
    }
}

/// Row `i` is a PaymentIntent of the connected account (with
/// `--connect-account`): the rows numbered 3, 13, 23, ... but 343, whose
/// PaymentIntent is row 342's (a duplicate belongs to one account).
fn on_connected_account(i: u64) -> bool {
    i % 10 == 3 && i % 1000 != 343
}

/// The row number of a seeded PaymentIntent id (`pi_3Demo` and ten digits).
fn seed_number(pi: &str) -> Option<u64> {
    let digits = pi.strip_prefix("pi_3Demo")?;
    (digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Stripe's 403 body for a `Stripe-Account` the platform cannot act as
/// (revoked, or not connected to it), on every endpoint.
fn no_access_body(account: &str) -> Value {
    serde_json::json!({"error": {
        "type": "invalid_request_error",
        "message": format!("The provided key 'sk_test_*******************standin' does not have access to account '{account}' (or that account does not exist). Application access may have been revoked."),
    }})
}

struct Standin {
    api_key: String,
    known: HashMap<String, Remote>,
    /// Statuses moved by `POST /standin/...` (they win over `known`), and
    /// which account each PaymentIntent lives on.
    moved: std::sync::Arc<events::Feed>,
    /// Each listed PaymentIntent's `created` (Unix seconds).
    created: HashMap<String, i64>,
    /// Listed ids, newest first (`created` descending, then id descending).
    order: Vec<String>,
    /// Position of each id in `order`.
    position: HashMap<String, usize>,
    fixture: Value,
    latency: Duration,
    requests: AtomicU64,
}

impl Standin {
    fn envelope(&self, status: u16, kind: &str, code: &str, message: &str) -> ResponseTemplate {
        self.reply(status).set_body_json(serde_json::json!({
            "error": {"type": kind, "code": code, "message": message,
                      "doc_url": format!("https://stripe.com/docs/error-codes/{code}")}
        }))
    }

    /// Stripe's answer to a `Stripe-Account` the platform cannot act as.
    fn no_access(&self, account: &str) -> ResponseTemplate {
        self.reply(403).set_body_json(no_access_body(account))
    }

    /// Whether `id` is served to a request made as `account` (`None`: the
    /// platform, no `Stripe-Account`): only on the account it lives on.
    fn visible(&self, id: &str, account: Option<&str>) -> bool {
        self.moved.owner(id).as_deref() == account
    }

    fn reply(&self, status: u16) -> ResponseTemplate {
        let n = self.requests.fetch_add(1, Ordering::Relaxed);
        ResponseTemplate::new(status)
            .insert_header("Request-Id", format!("req_standin{n:012}").as_str())
            .set_delay(self.latency)
    }
}

impl Standin {
    /// Stripe's example PaymentIntent with this id, status, age and money;
    /// `latest_charge` is the Charge object when `expand[]=latest_charge` was
    /// asked, its id otherwise, and null before any charge.
    fn payment_intent(&self, id: &str, p: &Pi, expanded: bool) -> Value {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let mut pi = self.fixture.clone();
        pi["id"] = Value::from(id);
        pi["status"] = Value::from(p.status);
        pi["created"] = Value::from(self.created.get(id).copied().unwrap_or(now - p.age));
        pi["amount"] = Value::from(p.amount);
        pi["payment_method_types"] = serde_json::json!([p.method]);
        pi["capture_method"] = Value::from(if p.manual_capture {
            "manual"
        } else {
            "automatic"
        });
        let charged = matches!(p.status, "succeeded" | "requires_capture" | "processing");
        pi["amount_received"] = Value::from(if p.status == "succeeded" { p.amount } else { 0 });
        let charge_id = format!("ch_{}", id.trim_start_matches("pi_"));
        pi["latest_charge"] = match (charged, expanded) {
            (false, _) => Value::Null,
            (true, false) => Value::from(charge_id),
            (true, true) => serde_json::json!({
                "id": charge_id, "object": "charge", "amount": p.amount,
                "amount_captured": if p.status == "succeeded" { p.amount } else { 0 },
                "amount_refunded": p.refunded, "captured": p.status == "succeeded",
                "currency": "usd", "disputed": p.disputed, "paid": true,
                "payment_intent": id, "refunded": p.refunded >= p.amount,
                "status": if p.status == "processing" { "pending" } else { "succeeded" },
                "created": now - p.age,
            }),
        };
        pi
    }
}

/// `GET /v1/payment_intents`: Stripe's list endpoint over the data set.
impl Standin {
    fn list(&self, request: &Request, account: Option<&str>) -> ResponseTemplate {
        let mut gte = i64::MIN;
        let mut lte = i64::MAX;
        let mut limit = 10usize;
        let (mut after, mut before, mut expanded) = (None, None, false);
        for (k, v) in request.url.query_pairs() {
            let number = v.parse::<i64>();
            match (k.as_ref(), number) {
                ("created[gte]", Ok(n)) => gte = gte.max(n),
                ("created[gt]", Ok(n)) => gte = gte.max(n + 1),
                ("created[lte]", Ok(n)) => lte = lte.min(n),
                ("created[lt]", Ok(n)) => lte = lte.min(n - 1),
                ("limit", Ok(n)) if (1..=100).contains(&n) => limit = n as usize,
                ("starting_after", _) => after = Some(v.into_owned()),
                ("ending_before", _) => before = Some(v.into_owned()),
                ("expand[]", _) if v == "data.latest_charge" => expanded = true,
                (key, _) if key.starts_with("created") || key == "limit" => {
                    return self.envelope(
                        400,
                        "invalid_request_error",
                        "parameter_invalid_integer",
                        &format!("Invalid integer: {v}"),
                    )
                }
                _ => {}
            }
        }
        // A cursor id Stripe does not know is a 400 `resource_missing`.
        for id in [&after, &before].into_iter().flatten() {
            if !self.position.contains_key(id) {
                return self.envelope(
                    400,
                    "invalid_request_error",
                    "resource_missing",
                    &format!("No such payment_intent: '{id}'"),
                );
            }
        }
        let after = after.map(|id| self.position[&id]);
        let before = before.map(|id| self.position[&id]);
        // Newest first: `order` is sorted by `created` descending.
        let in_window = |i: &usize| {
            let id = &self.order[*i];
            let c = self.created[id];
            c >= gte && c <= lte && self.visible(id, account)
        };
        let (page, has_more): (Vec<usize>, bool) = match before {
            Some(b) => {
                // The `limit` objects just newer than `b`, still newest first.
                let newer: Vec<usize> = (0..b).rev().filter(in_window).take(limit + 1).collect();
                let has_more = newer.len() > limit;
                let mut page: Vec<usize> = newer.into_iter().take(limit).collect();
                page.reverse();
                (page, has_more)
            }
            None => {
                let from = after.map_or(0, |a| a + 1);
                let mut page: Vec<usize> = (from..self.order.len())
                    .filter(in_window)
                    .take(limit + 1)
                    .collect();
                let has_more = page.len() > limit;
                page.truncate(limit);
                (page, has_more)
            }
        };
        let data: Vec<Value> = page
            .into_iter()
            .map(|i| {
                let id = &self.order[i];
                // As a retrieve would serve it: moved by a POST, refunded,
                // disputed.
                match self.current(id) {
                    Ok(pi) => self.payment_intent(id, &pi, expanded),
                    // A PaymentIntent Stripe cannot serve whole: no status.
                    Err(_) => {
                        let mut pi = self.payment_intent(id, &Pi::new("succeeded"), expanded);
                        pi.as_object_mut().map(|o| o.remove("status"));
                        pi
                    }
                }
            })
            .collect();
        self.reply(200).set_body_json(serde_json::json!({
            "object": "list", "data": data, "has_more": has_more, "url": "/v1/payment_intents",
        }))
    }
}

/// Why the stand-in serves no PaymentIntent for an id.
enum Unserved {
    /// Seeded to fail (a 500 on retrieve, no status in a list).
    Broken,
    /// Unknown: Stripe's 404.
    Missing,
}

impl Standin {
    /// The PaymentIntent `id` as it is now, for a retrieve and a list alike:
    /// a status a `POST` moved it to wins over the seed, and a refund or a
    /// dispute posted since lives on the charge (the PaymentIntent's status
    /// stays as it was; Stripe API reference).
    fn current(&self, id: &str) -> Result<Pi, Unserved> {
        let mut pi = match (self.moved.status_of(id), self.known.get(id)) {
            (Some(status), _) | (None, Some(&Remote::Status(status))) => Pi::new(status),
            (None, Some(Remote::Detailed(pi))) => *pi,
            (None, Some(Remote::Broken)) => return Err(Unserved::Broken),
            (None, Some(Remote::Missing) | None) => return Err(Unserved::Missing),
        };
        let money = self.moved.money_of(id);
        if money.refunded {
            pi.refunded = pi.amount;
        }
        pi.disputed |= money.disputed;
        Ok(pi)
    }
}

/// Answers both routes with one shared data set.
struct Shared(Arc<Standin>);

impl Respond for Shared {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        self.0.respond(request)
    }
}

impl Respond for Standin {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let auth = request
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if auth != Some(format!("Bearer {}", self.api_key).as_str()) {
            return self.envelope(
                401,
                "invalid_request_error",
                "api_key_invalid",
                "Invalid API Key provided.",
            );
        }
        let account = match self.moved.acting_as(request) {
            Ok(account) => account,
            Err(refused) => return self.no_access(&refused),
        };
        let account = account.as_deref();
        if request.url.path().trim_end_matches('/') == "/v1/payment_intents" {
            return self.list(request, account);
        }
        let id = request.url.path().rsplit('/').next().unwrap_or_default();
        if !self.visible(id, account) {
            return self.envelope(
                404,
                "invalid_request_error",
                "resource_missing",
                &format!("No such payment_intent: '{id}'"),
            );
        }
        let expanded = request
            .url
            .query_pairs()
            .any(|(k, v)| k == "expand[]" && v == "latest_charge");
        let pi = match self.current(id) {
            Ok(pi) => pi,
            Err(Unserved::Broken) => {
                return self.envelope(500, "api_error", "", "An unknown error occurred.")
            }
            Err(Unserved::Missing) => {
                return self.envelope(
                    404,
                    "invalid_request_error",
                    "resource_missing",
                    &format!("No such payment_intent: '{id}'"),
                )
            }
        };
        self.reply(200)
            .set_body_json(self.payment_intent(id, &pi, expanded))
    }
}

/// A local Stripe stand-in: serves GET /v1/payment_intents/{id} with Stripe's
/// shapes, for the demo, the benchmark and running the job by hand.
#[derive(Debug, clap::Parser)]
#[command(name = "stripe_standin")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:12111")]
    listen: String,
    /// The Bearer key it accepts (anything else gets 401).
    #[arg(long, default_value = "sk_test_standin")]
    api_key: String,
    /// Fill the empty `payments` table of DATABASE_URL with ROWS payments and
    /// a known mix of drift; print the expected findings per kind (one JSON line).
    #[arg(long, value_name = "ROWS")]
    seed: Option<u64>,
    /// Delay before every answer, in milliseconds.
    #[arg(long = "latency-ms", default_value_t = 0, value_name = "MS")]
    latency_ms: u64,
    /// Generate N PaymentIntent events over the data set's first rows, created
    /// over the last N/10 seconds (one event per PaymentIntent, in its status).
    #[arg(long, default_value_t = 0, value_name = "N")]
    events: u64,
    /// Connect: every tenth row's PaymentIntent (rows 3, 13, 23, ...) lives
    /// on this connected account (served only with `Stripe-Account`); the
    /// seed writes it into the table's `stripe_account` column.
    #[arg(long, value_name = "ACCT")]
    connect_account: Option<String>,
    /// Connect: an account the platform lost access to (403 to every read).
    #[arg(long, value_name = "ACCT")]
    revoked_account: Option<String>,
    /// Serve N generated subscriptions (`standin/subscriptions.rs`).
    #[arg(long, default_value_t = 0, value_name = "N")]
    subscriptions: u64,
    /// Fill the application table `subscriptions` of DATABASE_URL with a row
    /// per generated subscription and a known mix of drift; print the
    /// expected findings per kind (one JSON line).
    #[arg(long)]
    seed_subscriptions: bool,
    /// The data set's "now" in Unix seconds (default: the start of this
    /// process): every `created` is relative to it, so a benchmark can build
    /// the application's table in SQL in step with the generated objects.
    #[arg(long, value_name = "UNIX")]
    anchor: Option<i64>,
}

/// Row `i` of `rows` was created `rows - i + 3600` seconds before `anchor`;
/// its PaymentIntent within two seconds of that.
fn created_at(anchor: i64, rows: u64, i: u64) -> i64 {
    let jitter = (i.wrapping_mul(7919) % 5) as i64 - 2;
    anchor - (rows - i) as i64 - 3600 + jitter
}

async fn seed_database(
    rows: u64,
    anchor: chrono::DateTime<chrono::Utc>,
    connect_account: Option<&str>,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let url = std::env::var("DATABASE_URL").context("--seed needs DATABASE_URL")?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .context("connecting")?;
    let existing: i64 = sqlx::query_scalar("SELECT count(*) FROM payments")
        .fetch_one(&pool)
        .await?;
    if existing > 0 {
        bail!("payments already has {existing} rows; --seed needs an empty table");
    }
    // An application table with amount and currency columns gets them filled.
    let money_columns: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_attribute WHERE attrelid = 'payments'::regclass
            AND attname IN ('amount_cents', 'currency') AND NOT attisdropped",
    )
    .fetch_one(&pool)
    .await?;
    let mut expected = BTreeMap::new();
    for chunk_start in (1..=rows).step_by(5000) {
        let chunk: Vec<Seed> = (chunk_start..=(chunk_start + 4999).min(rows))
            .map(seed_row)
            .collect();
        let pis: Vec<&str> = chunk.iter().map(|s| s.pi.as_str()).collect();
        let locals: Vec<&str> = chunk.iter().map(|s| s.local).collect();
        let recent: Vec<bool> = chunk.iter().map(|s| s.recent).collect();
        let numbers: Vec<i64> = (chunk_start..chunk_start + chunk.len() as u64)
            .map(|n| n as i64)
            .collect();
        let amounts: Vec<i64> = chunk.iter().map(|s| s.amount).collect();
        let currencies: Vec<&str> = chunk.iter().map(|s| s.currency).collect();
        sqlx::query(
            "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
             SELECT 'ord_' || n, pi, st,
                    $6::timestamptz - make_interval(secs => ($5 - n)::float8 + 3600),
                    CASE WHEN recent THEN now() ELSE $6::timestamptz - make_interval(secs => ($5 - n)::float8 + 3600) END
               FROM unnest($1::text[], $2::text[], $3::bool[], $4::bigint[]) AS v(pi, st, recent, n)
              ORDER BY n",
        )
        .bind(&pis)
        .bind(&locals)
        .bind(&recent)
        .bind(&numbers)
        .bind(rows as i64)
        .bind(anchor)
        .execute(&pool)
        .await
        .context("inserting payments")?;
        if let Some(account) = connect_account {
            sqlx::query(
                "UPDATE payments SET stripe_account = $2
                  WHERE order_id = ANY(SELECT 'ord_' || n FROM unnest($1::bigint[]) AS n)",
            )
            .bind(
                numbers
                    .iter()
                    .copied()
                    .filter(|&n| on_connected_account(n as u64))
                    .collect::<Vec<i64>>(),
            )
            .bind(account)
            .execute(&pool)
            .await
            .context("--connect-account needs a stripe_account text column in payments")?;
        }
        if money_columns == 2 {
            sqlx::query(
                "UPDATE payments p SET amount_cents = v.amount, currency = v.currency
                   FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS v(n, amount, currency)
                  WHERE p.order_id = 'ord_' || v.n",
            )
            .bind(&numbers)
            .bind(&amounts)
            .bind(&currencies)
            .execute(&pool)
            .await
            .context("setting amounts")?;
        }
        for s in &chunk {
            if money_columns < 2
                && matches!(
                    s.expected_kind.as_deref(),
                    Some("amount_mismatch" | "currency_mismatch")
                )
            {
                // Without the columns nothing is compared: Stripe and the row agree.
                continue;
            }
            if let Some(kind) = &s.expected_kind {
                *expected.entry(kind.clone()).or_default() += 1;
            }
        }
    }
    Ok(expected)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let latency = Duration::from_millis(args.latency_ms);
    let mut known = HashMap::new();
    let anchor = match args.anchor {
        Some(at) => chrono::DateTime::from_timestamp(at, 0).context("--anchor out of range")?,
        None => chrono::Utc::now(),
    };
    if let Some(rows) = args.seed {
        let mut expected = seed_database(rows, anchor, args.connect_account.as_deref()).await?;
        sessions::seed_database(
            anchor.timestamp(),
            args.connect_account.as_deref(),
            &mut expected,
        )
        .await?;
        println!(
            "{}",
            serde_json::json!({"rows": rows, "expected_findings": expected})
        );
    }
    // Stripe's answers come from the same data set as the seed (any size up to
    // 1M rows is known, whether or not this process seeded the database).
    let known_rows = args.seed.unwrap_or(1_000_000);
    let mut created = HashMap::new();
    for i in 1..=known_rows {
        let s = seed_row(i);
        let at = match &s.remote {
            Remote::Missing => None,
            Remote::Detailed(p) if p.age != Pi::new("").age => Some(anchor.timestamp() - p.age),
            _ => Some(created_at(anchor.timestamp(), known_rows, i)),
        };
        if let Some(at) = at {
            created.entry(s.pi.clone()).or_insert(at);
        }
        known.insert(s.pi, s.remote);
    }
    let mut order: Vec<String> = created.keys().cloned().collect();
    order.sort_unstable_by(|a, b| created[b].cmp(&created[a]).then_with(|| b.cmp(a)));
    let position = order
        .iter()
        .enumerate()
        .map(|(i, id)| (id.clone(), i))
        .collect();
    let listener = std::net::TcpListener::bind(&args.listen)
        .with_context(|| format!("binding {}", args.listen))?;
    let server = MockServer::builder()
        .listener(listener)
        .disable_request_recording()
        .start()
        .await;
    let connected = args.connect_account.clone();
    let feed = std::sync::Arc::new(events::Feed::new(
        known_rows,
        args.connect_account,
        args.revoked_account,
    ));
    events::generate(&feed, args.events, known_rows, |i| {
        let s = seed_row(i);
        let status = match s.remote {
            Remote::Status(st) => st,
            Remote::Detailed(p) => p.status,
            Remote::Missing | Remote::Broken => "succeeded",
        };
        (s.pi, status)
    });
    let fixture: Value = serde_json::from_str(FIXTURE)?;
    events::mount(&server, feed.clone(), args.api_key.clone(), fixture.clone()).await;
    let standin = Arc::new(Standin {
        api_key: args.api_key,
        known,
        moved: feed,
        created,
        order,
        position,
        fixture,
        latency,
        requests: AtomicU64::new(0),
    });
    let subs = Arc::new(subscriptions::Subscriptions::new(
        anchor.timestamp(),
        args.subscriptions,
    ));
    if args.seed_subscriptions {
        let expected = subscriptions::seed_database(&subs).await?;
        println!(
            "{}",
            serde_json::json!({"subscriptions": args.subscriptions, "expected_findings": expected})
        );
    }
    subscriptions::mount(&server, Arc::clone(&standin), subs).await;
    let seeded = sessions::Sessions::seeded(&standin, anchor.timestamp(), connected.as_deref());
    sessions::mount(&server, Arc::clone(&standin), Arc::new(seeded)).await;
    mount_payment_intents(&server, standin).await;
    eprintln!("stripe stand-in listening on {}", server.uri());
    tokio::signal::ctrl_c().await?;
    Ok(())
}

/// What the stand-in writes on stderr for a list page it failed that the
/// demo did not arrange: the demo scripts fail when their stand-in's log
/// holds it (`standin_guard` in `scripts/lib.sh`). The stand-in's own rule
/// for "arranged": a refused account's 403 (`--revoked-account`, an unknown
/// `Stripe-Account`); any other failed list page (a 400 for a query Stripe
/// would refuse, a 401) would have let rows fall back to retrieves unseen.
pub(crate) const UNASKED_LIST_FAILURE: &str =
    "stand-in guard: a list page failed that the demo did not arrange";

/// The guard of the stand-in's list endpoints (the tests' fake has the same
/// one, and fails the test): wraps an endpoint's answers and reports, on
/// stderr, every list page ([`LIST_PATHS`]) answered with anything but 200
/// or an arranged 403.
pub(crate) struct Guarded<R>(pub(crate) R);

/// The list endpoints the guard watches.
const LIST_PATHS: [&str; 4] = [
    "/v1/payment_intents",
    "/v1/checkout/sessions",
    "/v1/subscriptions",
    "/v1/events",
];

impl<R: Respond> Respond for Guarded<R> {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let response = self.0.respond(request);
        let path = request.url.path().trim_end_matches('/');
        let status = status::status_of(&response);
        if LIST_PATHS.contains(&path) && status != 200 && status != 403 {
            eprintln!("{UNASKED_LIST_FAILURE}: {status} for {}", request.url);
        }
        response
    }
}

/// `GET /v1/payment_intents/{id}` and `GET /v1/payment_intents`.
async fn mount_payment_intents(server: &MockServer, standin: Arc<Standin>) {
    Mock::given(method("GET"))
        .and(path_regex("^/v1/payment_intents/[^/]+$"))
        .respond_with(Shared(Arc::clone(&standin)))
        .mount(server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex("^/v1/payment_intents/?$"))
        .respond_with(Guarded(Shared(standin)))
        .mount(server)
        .await;
}

/// The events feed of the stand-in (kept apart from the retrieve path).
mod events {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use serde_json::{json, Value};
    use wiremock::matchers::{method, path, path_regex};
    use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

    /// Events (oldest first) and the statuses and money they moved, and
    /// which account each PaymentIntent lives on (Connect).
    #[derive(Default)]
    pub struct Feed {
        events: Mutex<Vec<Value>>,
        moved: Mutex<HashMap<String, &'static str>>,
        money: Mutex<HashMap<String, Money>>,
        /// Rows of the data set (its ids `pi_3Demo…` up to this number).
        rows: u64,
        /// `--connect-account`: the one connected account.
        connected: Option<String>,
        /// `--revoked-account`: an account the platform lost access to.
        revoked: Option<String>,
        /// PaymentIntents a `POST /standin/...` with `Stripe-Account`
        /// created on that account.
        created_on: Mutex<HashMap<String, String>>,
    }

    /// What `POST /standin/payment_intents/{id}/refund` or `/dispute` did to
    /// a PaymentIntent's latest charge.
    #[derive(Clone, Copy, Default)]
    pub struct Money {
        /// Refunded in full.
        pub refunded: bool,
        /// Disputed.
        pub disputed: bool,
    }

    const STATUSES: [&str; 7] = [
        "requires_payment_method",
        "requires_confirmation",
        "requires_action",
        "processing",
        "requires_capture",
        "canceled",
        "succeeded",
    ];

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
    }

    /// The event type Stripe sends when a PaymentIntent enters `status`.
    fn event_type(status: &str) -> &'static str {
        match status {
            "succeeded" => "payment_intent.succeeded",
            "canceled" => "payment_intent.canceled",
            "processing" => "payment_intent.processing",
            "requires_action" => "payment_intent.requires_action",
            "requires_capture" => "payment_intent.amount_capturable_updated",
            _ => "payment_intent.payment_failed",
        }
    }

    impl Feed {
        /// The state of a data set of `rows` rows, with the connected and
        /// the revoked account of the command line.
        pub fn new(rows: u64, connected: Option<String>, revoked: Option<String>) -> Self {
            Feed {
                rows,
                connected,
                revoked,
                ..Feed::default()
            }
        }

        /// The account a request acts as: `Ok(None)` without
        /// `Stripe-Account` (the platform), `Ok(Some(acct))` for the
        /// connected account, `Err(header)` for any other account or the
        /// revoked one (Stripe answers 403 "does not have access").
        pub fn acting_as(&self, request: &Request) -> Result<Option<String>, String> {
            let Some(value) = request.headers.get("stripe-account") else {
                return Ok(None);
            };
            let a = value.to_str().unwrap_or("<not text>");
            if self.connected.as_deref() != Some(a) || self.revoked.as_deref() == Some(a) {
                return Err(a.to_owned());
            }
            Ok(Some(a.to_owned()))
        }

        /// The connected account `pi` lives on (`None`: the platform's own):
        /// a seeded row's by its number (rows 3, 13, 23, ...), a
        /// PaymentIntent created by a `POST` with `Stripe-Account` on that
        /// account.
        pub fn owner(&self, pi: &str) -> Option<String> {
            if let Some(i) = super::seed_number(pi).filter(|i| (1..=self.rows).contains(i)) {
                return self
                    .connected
                    .clone()
                    .filter(|_| super::on_connected_account(i));
            }
            self.created_on
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(pi)
                .cloned()
        }

        /// Whether a `POST` made as `account` may move `pi`: it must live
        /// on that account (Stripe answers 404 otherwise). A PaymentIntent
        /// no seed row or earlier `POST` knows is created on `account`.
        fn place(&self, pi: &str, account: Option<&str>) -> bool {
            let owner = self.owner(pi);
            if owner.is_some() || account.is_none() {
                return owner.as_deref() == account;
            }
            let seeded = super::seed_number(pi).is_some_and(|i| (1..=self.rows).contains(&i));
            let on_platform = seeded
                || self.status_of(pi).is_some()
                || self
                    .money
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains_key(pi);
            if on_platform {
                return false;
            }
            if let Some(a) = account {
                self.created_on
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(pi.to_owned(), a.to_owned());
            }
            true
        }

        /// The status a `POST` moved this PaymentIntent to, if any.
        pub fn status_of(&self, id: &str) -> Option<&'static str> {
            self.moved
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(id)
                .copied()
        }

        /// Sets a PaymentIntent's status at "Stripe" without an event (a
        /// Checkout Session's), on `account` (`None`: the
        /// platform's): retrieves then serve it like a moved one.
        pub fn set_payment_intent(&self, pi: &str, status: &'static str, account: Option<&str>) {
            self.moved
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(pi.to_owned(), status);
            if let Some(a) = account {
                self.created_on
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(pi.to_owned(), a.to_owned());
            }
        }

        /// What was done to this PaymentIntent's charge.
        pub fn money_of(&self, id: &str) -> Money {
            self.money
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(id)
                .copied()
                .unwrap_or_default()
        }

        fn record(&self, pi: &str, status: &'static str, created: i64, object: Value) {
            self.record_typed(pi, event_type(status), created, object);
        }

        /// Records an event about `pi`'s PaymentIntent (or its charge). An
        /// event of a connected account's PaymentIntent carries Stripe's
        /// `account` attribute and is served on that account's feed only.
        fn record_typed(&self, pi: &str, event_type: &str, created: i64, object: Value) {
            self.record_on(self.owner(pi), event_type, created, object);
        }

        /// Records an event on `account`'s feed (`None`: the platform's).
        pub fn record_on(
            &self,
            account: Option<String>,
            event_type: &str,
            created: i64,
            object: Value,
        ) {
            let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
            let n = events.len();
            let mut event = json!({
                "id": format!("evt_standin{n:010}"), "object": "event",
                "api_version": "2024-06-20", "created": created,
                "data": {"object": object}, "livemode": false, "pending_webhooks": 1,
                "request": {"id": null, "idempotency_key": null},
                "type": event_type,
            });
            if let Some(a) = account {
                event["account"] = Value::from(a);
            }
            events.push(event);
        }
    }

    fn object(fixture: &Value, pi: &str, status: &str, created: i64) -> Value {
        let mut o = fixture.clone();
        o["id"] = Value::from(pi);
        o["status"] = Value::from(status);
        o["created"] = Value::from(created - 60);
        o
    }

    /// `n` events over rows 1..=n of the data set (`row(i)` gives the id and
    /// status), created over the last n/10 seconds, oldest first.
    pub fn generate(feed: &Feed, n: u64, rows: u64, row: impl Fn(u64) -> (String, &'static str)) {
        let fixture: Value = serde_json::from_str(super::FIXTURE).unwrap_or(Value::Null);
        let start = now() - (n / 10) as i64;
        for i in 1..=n.min(rows) {
            let (pi, status) = row(i);
            let created = start + (i / 10) as i64;
            feed.record(&pi, status, created, object(&fixture, &pi, status, created));
        }
    }

    struct List(std::sync::Arc<Feed>, String);

    impl Respond for List {
        fn respond(&self, req: &Request) -> ResponseTemplate {
            let auth = req
                .headers
                .get("authorization")
                .and_then(|v| v.to_str().ok());
            if auth != Some(format!("Bearer {}", self.1).as_str()) {
                return ResponseTemplate::new(401).set_body_json(json!({"error": {
                    "type": "invalid_request_error", "code": "api_key_invalid",
                    "message": "Invalid API Key provided."}}));
            }
            // Each account has its own feed: the platform's without
            // `Stripe-Account`, a connected account's with its header.
            let account = match self.0.acting_as(req) {
                Ok(account) => account,
                Err(refused) => {
                    return ResponseTemplate::new(403)
                        .insert_header("Request-Id", "req_standin_events")
                        .set_body_json(super::no_access_body(&refused))
                }
            };
            let q: Vec<(String, String)> = req.url.query_pairs().into_owned().collect();
            // Stripe's rules, the tests' fake's own code (`query`):
            // `created[gte|gt|lte|lt]` (the events job reads its window in
            // `created[gte]`/`created[lt]` slices), `limit` 1 to 100 (default
            // 10), `starting_after` an id of the list; anything else a 400.
            let (gte, lt) = match super::query::created_range(&q) {
                Ok(range) => range,
                Err(e) => return *e,
            };
            let types: Vec<&str> = q
                .iter()
                .filter(|(k, _)| k == "types[]")
                .map(|(_, v)| v.as_str())
                .collect();
            let events = self.0.events.lock().unwrap_or_else(|p| p.into_inner());
            let matching: Vec<&Value> = events
                .iter()
                .rev()
                .filter(|e| e.get("account").and_then(Value::as_str) == account.as_deref())
                .filter(|e| (gte..lt).contains(&e["created"].as_i64().unwrap_or(0)))
                .filter(|e| types.is_empty() || types.iter().any(|t| e["type"] == *t))
                .collect();
            match super::query::page(&matching, &q, "/v1/events") {
                Ok(body) => ResponseTemplate::new(200)
                    .insert_header("Request-Id", "req_standin_events")
                    .set_body_json(body),
                Err(e) => *e,
            }
        }
    }

    /// The Charge (`charge.refunded`) or Dispute (`charge.dispute.created`)
    /// object of an event about `pi`'s charge, in Stripe's shape: it names
    /// its PaymentIntent in `payment_intent`.
    fn money_object(pi: &str, money: Money, dispute: bool, created: i64) -> Value {
        let charge = format!("ch_{}", pi.trim_start_matches("pi_"));
        if dispute {
            return json!({
                "id": format!("dp_{}", pi.trim_start_matches("pi_")), "object": "dispute",
                "amount": 1099, "balance_transactions": [], "charge": charge, "created": created,
                "currency": "usd", "evidence_details": {"due_by": created + 7 * 86_400,
                "has_evidence": false, "past_due": false, "submission_count": 0},
                "is_charge_refundable": false, "livemode": false, "metadata": {},
                "payment_intent": pi, "reason": "fraudulent", "status": "needs_response",
            });
        }
        json!({
            "id": charge, "object": "charge", "amount": 1099, "amount_captured": 1099,
            "amount_refunded": 1099, "captured": true, "created": created - 60,
            "currency": "usd", "disputed": money.disputed, "livemode": false, "metadata": {},
            "paid": true, "payment_intent": pi, "refunded": true, "status": "succeeded",
        })
    }

    /// `POST /standin/payment_intents/{id}/refund` or `/dispute`: the charge
    /// is refunded in full or disputed, and its event recorded.
    fn move_money(feed: &Feed, pi: &str, dispute: bool) -> ResponseTemplate {
        let money = {
            let mut all = feed.money.lock().unwrap_or_else(|p| p.into_inner());
            let m = all.entry(pi.to_owned()).or_default();
            if dispute {
                m.disputed = true;
            } else {
                m.refunded = true;
            }
            *m
        };
        let created = now();
        let event_type = if dispute {
            "charge.dispute.created"
        } else {
            "charge.refunded"
        };
        feed.record_typed(
            pi,
            event_type,
            created,
            money_object(pi, money, dispute, created),
        );
        ResponseTemplate::new(200)
            .set_body_json(json!({"payment_intent": pi, "event": event_type, "created": created}))
    }

    struct Move(std::sync::Arc<Feed>, Value);

    impl Respond for Move {
        fn respond(&self, req: &Request) -> ResponseTemplate {
            let parts: Vec<&str> = req.url.path().rsplit('/').take(2).collect();
            let (Some(status), Some(pi)) = (parts.first(), parts.get(1)) else {
                return ResponseTemplate::new(400);
            };
            let money = matches!(*status, "refund" | "dispute");
            let known_status = STATUSES.iter().find(|s| *s == status);
            if !money && known_status.is_none() {
                return ResponseTemplate::new(400);
            }
            // Made as a connected account (`Stripe-Account`), it moves that
            // account's PaymentIntent, or creates one there.
            let account = match self.0.acting_as(req) {
                Ok(account) => account,
                Err(refused) => {
                    return ResponseTemplate::new(403)
                        .set_body_json(super::no_access_body(&refused))
                }
            };
            if !self.0.place(pi, account.as_deref()) {
                return ResponseTemplate::new(404).set_body_json(json!({"error": {
                    "type": "invalid_request_error", "code": "resource_missing",
                    "message": format!("No such payment_intent: '{pi}'")}}));
            }
            let Some(status) = known_status else {
                return move_money(&self.0, pi, *status == "dispute");
            };
            self.0
                .moved
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert((*pi).to_owned(), status);
            let created = now();
            self.0
                .record(pi, status, created, object(&self.1, pi, status, created));
            ResponseTemplate::new(200)
                .set_body_json(json!({"payment_intent": pi, "status": status, "created": created}))
        }
    }

    /// `GET /v1/events` and `POST /standin/payment_intents/{id}/{status}`.
    pub async fn mount(
        server: &MockServer,
        feed: std::sync::Arc<Feed>,
        api_key: String,
        fixture: Value,
    ) {
        Mock::given(method("GET"))
            .and(path("/v1/events"))
            .respond_with(super::Guarded(List(feed.clone(), api_key)))
            .mount(server)
            .await;
        Mock::given(method("POST"))
            .and(path_regex(
                "^/standin/payment_intents/pi_[A-Za-z0-9]+/[a-z_]+$",
            ))
            .respond_with(Move(feed, fixture))
            .mount(server)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;
    use std::time::Duration;

    use clap::Parser;
    use serde_json::Value;
    use wiremock::MockServer;

    use super::{events, sessions, Args, Standin, FIXTURE};

    const ACCOUNT: &str = "acct_1StandinTest";
    const REVOKED: &str = "acct_1StandinRevoked";

    /// A stand-in of 100 seeded rows (row 13 on the connected account).
    async fn server() -> MockServer {
        let server = MockServer::start().await;
        let feed = Arc::new(events::Feed::new(
            100,
            Some(ACCOUNT.into()),
            Some(REVOKED.into()),
        ));
        let fixture: Value = serde_json::from_str(FIXTURE).unwrap();
        events::mount(
            &server,
            feed.clone(),
            "sk_test_standin".into(),
            fixture.clone(),
        )
        .await;
        let standin = Standin {
            api_key: "sk_test_standin".into(),
            known: HashMap::new(),
            moved: feed,
            created: HashMap::new(),
            order: Vec::new(),
            position: HashMap::new(),
            fixture,
            latency: Duration::ZERO,
            requests: AtomicU64::new(0),
        };
        let standin = Arc::new(standin);
        let seeded = sessions::Sessions::seeded(&standin, 1_700_000_000, Some(ACCOUNT));
        sessions::mount(&server, Arc::clone(&standin), Arc::new(seeded)).await;
        super::mount_payment_intents(&server, standin).await;
        server
    }

    async fn call(
        server: &MockServer,
        post: bool,
        path: &str,
        account: Option<&str>,
    ) -> (u16, Value) {
        let url = format!("{}{path}", server.uri());
        let client = reqwest::Client::new();
        let mut request = if post {
            client.post(url)
        } else {
            client.get(url)
        };
        request = request.bearer_auth("sk_test_standin");
        if let Some(a) = account {
            request = request.header("Stripe-Account", a);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// The PaymentIntent each event of a feed is about, oldest first.
    async fn feed(server: &MockServer, account: Option<&str>) -> Vec<String> {
        let (status, list) = call(server, false, "/v1/events?limit=100", account).await;
        assert_eq!(status, 200, "{list}");
        let mut intents: Vec<String> = list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                assert_eq!(e.get("account").and_then(Value::as_str), account, "{e}");
                let o = &e["data"]["object"];
                o.get("payment_intent")
                    .unwrap_or(&o["id"])
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        intents.reverse();
        intents
    }

    /// The feed keeps Stripe's list rules, the tests' fake's own
    /// (`query`): a `limit` out of 1..=100, an unknown `starting_after` and
    /// a `created` bound that is not a number are Stripe's 400s, and a page
    /// after the last id of the one before goes on.
    #[tokio::test]
    async fn the_feed_answers_stripes_400s_and_pages_on() {
        let server = server().await;
        for bad in [
            "/v1/events?limit=0",
            "/v1/events?limit=101",
            "/v1/events?starting_after=evt_none",
            "/v1/events?created[gte]=yesterday",
        ] {
            let (status, body) = call(&server, false, bad, None).await;
            assert_eq!(status, 400, "{bad}: {body}");
            assert_eq!(body["error"]["type"], "invalid_request_error", "{bad}");
        }
        call(
            &server,
            true,
            "/standin/payment_intents/pi_Feed1/succeeded",
            None,
        )
        .await;
        call(
            &server,
            true,
            "/standin/payment_intents/pi_Feed2/canceled",
            None,
        )
        .await;
        let (status, first) = call(&server, false, "/v1/events?limit=1", None).await;
        assert_eq!(
            (status, first["has_more"].as_bool()),
            (200, Some(true)),
            "{first}"
        );
        let after = first["data"][0]["id"].as_str().unwrap().to_owned();
        let path = format!("/v1/events?limit=1&starting_after={after}");
        let (status, next) = call(&server, false, &path, None).await;
        assert_eq!(
            (status, next["has_more"].as_bool()),
            (200, Some(false)),
            "{next}"
        );
        assert_ne!(next["data"][0]["id"], first["data"][0]["id"]);
    }

    #[tokio::test]
    async fn a_connected_accounts_events_are_served_only_on_its_feed() {
        let s = server().await;
        let post = |path: &'static str, account| {
            let s = &s;
            async move { call(s, true, path, account).await.0 }
        };
        assert_eq!(
            post(
                "/standin/payment_intents/pi_Connected/succeeded",
                Some(ACCOUNT)
            )
            .await,
            200
        );
        assert_eq!(
            post("/standin/payment_intents/pi_Platform/succeeded", None).await,
            200
        );
        // Row 13 lives on the account: the platform cannot move it.
        assert_eq!(
            post("/standin/payment_intents/pi_3Demo0000000013/refund", None).await,
            404
        );
        assert_eq!(
            post(
                "/standin/payment_intents/pi_3Demo0000000013/refund",
                Some(ACCOUNT)
            )
            .await,
            200
        );
        // Nor the account a platform PaymentIntent.
        assert_eq!(
            post("/standin/payment_intents/pi_Platform/refund", Some(ACCOUNT)).await,
            404
        );
        assert_eq!(
            post("/standin/payment_intents/pi_Connected/canceled", None).await,
            404
        );

        assert_eq!(feed(&s, None).await, ["pi_Platform"]);
        assert_eq!(
            feed(&s, Some(ACCOUNT)).await,
            ["pi_Connected", "pi_3Demo0000000013"]
        );

        // The PaymentIntent itself: only with the header, as for seeded rows.
        let (status, pi) = call(&s, false, "/v1/payment_intents/pi_Connected", Some(ACCOUNT)).await;
        assert_eq!(
            (status, pi["status"].as_str()),
            (200, Some("succeeded")),
            "{pi}"
        );
        assert_eq!(
            call(&s, false, "/v1/payment_intents/pi_Connected", None)
                .await
                .0,
            404
        );
        assert_eq!(
            call(&s, false, "/v1/payment_intents/pi_Platform", Some(ACCOUNT))
                .await
                .0,
            404
        );
    }

    #[tokio::test]
    async fn a_revoked_or_unknown_accounts_feed_is_refused_like_its_payment_intents() {
        let s = server().await;
        for account in [REVOKED, "acct_1NotConnected"] {
            let (status, body) = call(&s, false, "/v1/events", Some(account)).await;
            let (pi_status, pi_body) = call(
                &s,
                false,
                "/v1/payment_intents/pi_3Demo0000000013",
                Some(account),
            )
            .await;
            assert_eq!((status, &body), (403, &pi_body), "{account}");
            assert_eq!(pi_status, 403);
            let message = body["error"]["message"].as_str().unwrap();
            assert!(
                message.contains(&format!("does not have access to account '{account}'")),
                "{message}"
            );
            let (status, _) = call(
                &s,
                true,
                "/standin/payment_intents/pi_New/succeeded",
                Some(account),
            )
            .await;
            assert_eq!(status, 403, "{account}");
        }
    }

    /// The ids of a list's items, in its order.
    fn ids(list: &Value) -> Vec<&str> {
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["id"].as_str().unwrap())
            .collect()
    }

    #[tokio::test]
    async fn sessions_are_served_with_their_payment_intent_on_their_account_only() {
        let s = server().await;
        let (status, cs) = call(
            &s,
            false,
            "/v1/checkout/sessions/cs_test_DemoMissedCompleted?expand[]=payment_intent.latest_charge",
            None,
        )
        .await;
        assert_eq!(status, 200, "{cs}");
        assert_eq!(
            (
                &cs["object"],
                &cs["mode"],
                &cs["status"],
                &cs["payment_status"]
            ),
            (
                &Value::from("checkout.session"),
                &Value::from("payment"),
                &Value::from("complete"),
                &Value::from("paid")
            )
        );
        let pi = &cs["payment_intent"];
        assert_eq!(pi["id"], "pi_DemoSessionMissed", "{cs}");
        assert_eq!(pi["status"], "succeeded");
        assert_eq!(
            pi["latest_charge"]["payment_intent"],
            "pi_DemoSessionMissed"
        );
        // Not expanded: the id; the async one's PaymentIntent is processing.
        let (_, cs) = call(
            &s,
            false,
            "/v1/checkout/sessions/cs_test_DemoMissedCompleted",
            None,
        )
        .await;
        assert_eq!(cs["payment_intent"], "pi_DemoSessionMissed");
        let (_, cs) = call(
            &s,
            false,
            "/v1/checkout/sessions/cs_test_DemoAsyncUnpaid?expand[]=payment_intent.latest_charge",
            None,
        )
        .await;
        assert_eq!(cs["payment_status"], "unpaid");
        assert_eq!(cs["payment_intent"]["status"], "processing");
        assert_eq!(
            cs["payment_intent"]["payment_method_types"][0],
            "sepa_debit"
        );
        // The connected account's session: only with its header.
        let connected = "/v1/checkout/sessions/cs_test_DemoConnectedMissed";
        let (status, body) = call(&s, false, connected, None).await;
        assert_eq!(status, 404);
        assert_eq!(body["error"]["code"], "resource_missing");
        assert_eq!(call(&s, false, connected, Some(ACCOUNT)).await.0, 200);

        // Lists: newest first, paged, each account its own sessions.
        let (status, page) = call(
            &s,
            false,
            "/v1/checkout/sessions?limit=2&expand[]=data.payment_intent.latest_charge",
            None,
        )
        .await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(ids(&page), ["cs_test_DemoOpen", "cs_test_DemoExpired"]);
        assert_eq!(page["has_more"], true);
        let (_, rest) = call(
            &s,
            false,
            "/v1/checkout/sessions?limit=2&starting_after=cs_test_DemoExpired&expand[]=data.payment_intent.latest_charge",
            None,
        )
        .await;
        assert_eq!(
            ids(&rest),
            ["cs_test_DemoAsyncUnpaid", "cs_test_DemoMissedCompleted"]
        );
        assert_eq!(rest["has_more"], false);
        assert_eq!(rest["data"][1]["payment_intent"]["status"], "succeeded");
        // Seeded session j was created at 1_700_000_000 - 3600 + j.
        let window = "/v1/checkout/sessions?created[gte]=1699996402&created[lt]=1699996404";
        let (_, window) = call(&s, false, window, None).await;
        assert_eq!(
            ids(&window),
            ["cs_test_DemoExpired", "cs_test_DemoAsyncUnpaid"]
        );
        assert_eq!(window["data"][1]["payment_intent"], "pi_DemoSessionAsync");
        let (_, on_account) = call(&s, false, "/v1/checkout/sessions", Some(ACCOUNT)).await;
        assert_eq!(ids(&on_account), ["cs_test_DemoConnectedMissed"]);
        let (status, _) = call(&s, false, "/v1/checkout/sessions", Some(REVOKED)).await;
        assert_eq!(status, 403);
    }

    #[tokio::test]
    async fn a_completed_sessions_event_is_on_its_accounts_feed_and_its_state_is_served() {
        let s = server().await;
        let post = |path: &'static str, account| {
            let s = &s;
            async move { call(s, true, path, account).await.0 }
        };
        assert_eq!(
            post("/standin/checkout/sessions/cs_test_New/complete", None).await,
            200
        );
        assert_eq!(
            post(
                "/standin/checkout/sessions/cs_test_NewConnected/complete_unpaid",
                Some(ACCOUNT)
            )
            .await,
            200
        );
        // Another account's session is not there to move.
        assert_eq!(
            post(
                "/standin/checkout/sessions/cs_test_New/expire",
                Some(ACCOUNT)
            )
            .await,
            404
        );
        let types = "/v1/events?types[]=checkout.session.completed";
        let (_, platform) = call(&s, false, types, None).await;
        let events = platform["data"].as_array().unwrap();
        assert_eq!(events.len(), 1, "{platform}");
        let o = &events[0]["data"]["object"];
        assert_eq!(
            (
                &o["id"],
                &o["status"],
                &o["payment_status"],
                &o["payment_intent"]
            ),
            (
                &Value::from("cs_test_New"),
                &Value::from("complete"),
                &Value::from("paid"),
                &Value::from("pi_New")
            )
        );
        assert!(events[0].get("account").is_none());
        let (_, connected) = call(&s, false, types, Some(ACCOUNT)).await;
        assert_eq!(connected["data"][0]["account"], ACCOUNT);
        assert_eq!(
            connected["data"][0]["data"]["object"]["payment_status"],
            "unpaid"
        );
        // Another type is not listed under this one.
        let (_, none) = call(
            &s,
            false,
            "/v1/events?types[]=checkout.session.expired",
            None,
        )
        .await;
        assert_eq!(ids(&none), Vec::<&str>::new());
        // The session and its PaymentIntent as the job then reads them.
        let (_, cs) = call(
            &s,
            false,
            "/v1/checkout/sessions/cs_test_New?expand[]=payment_intent.latest_charge",
            None,
        )
        .await;
        assert_eq!(cs["payment_intent"]["status"], "succeeded");
        let (status, pi) = call(
            &s,
            false,
            "/v1/payment_intents/pi_NewConnected",
            Some(ACCOUNT),
        )
        .await;
        assert_eq!((status, &pi["status"]), (200, &Value::from("processing")));
        assert_eq!(
            call(&s, false, "/v1/payment_intents/pi_NewConnected", None)
                .await
                .0,
            404
        );
    }

    #[test]
    fn help_prints_usage_not_an_error() {
        let help = Args::try_parse_from(["stripe_standin", "--help"]).unwrap_err();
        assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
        let text = help.to_string();
        assert!(text.contains("Usage: stripe_standin"), "{text}");
        assert!(text.contains("--seed <ROWS>"), "{text}");
        let bad = Args::try_parse_from(["stripe_standin", "--bogus"]).unwrap_err();
        assert_eq!(bad.exit_code(), 2);
    }
}
