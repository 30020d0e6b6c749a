//! Checkout Sessions in the fake Stripe (docs/checkout-sessions.md): Stripe's example session
//! object, and the retrieve and list answers with `payment_intent` expanded
//! as asked.

use std::ops::Range;

use serde_json::{json, Value};

use super::{collapse_charge, Holdings};

/// Stripe's real Checkout Session example object (shared/stripe) as `id`,
/// `status`, `payment_status`, naming PaymentIntent `pi` (or none), created
/// `created` (Unix seconds) and expiring a day later.
pub fn checkout_session(
    id: &str,
    status: &str,
    payment_status: &str,
    pi: Option<&str>,
    created: i64,
) -> Value {
    let mut s: Value =
        serde_json::from_str(include_str!("../../fixtures/checkout_session.json")).unwrap();
    s["id"] = json!(id);
    s["status"] = json!(status);
    s["payment_status"] = json!(payment_status);
    s["payment_intent"] = pi.map_or(Value::Null, |p| json!(p));
    s["created"] = json!(created);
    s["expires_at"] = json!(created + 86_400);
    s["url"] = Value::Null;
    s
}

/// The session with its `payment_intent` expanded as `expand` asks
/// (`prefix` is `""` for a retrieve, `"data."` for a list).
fn expanded(holdings: &Holdings, session: &Value, expand: &[String], prefix: &str) -> Value {
    let mut s = session.clone();
    let asked = |path: &str| expand.iter().any(|e| *e == format!("{prefix}{path}"));
    let with_charge = asked("payment_intent.latest_charge");
    if !(with_charge || asked("payment_intent")) {
        return s;
    }
    if let Some(pi) = s["payment_intent"].as_str().and_then(|id| holdings.pi(id)) {
        s["payment_intent"] = if with_charge {
            pi.clone()
        } else {
            collapse_charge(pi.clone())
        };
    }
    s
}

/// A retrieve's body; `None`: 404.
pub(super) fn retrieve(holdings: &Holdings, id: &str, expand: &[String]) -> Option<Value> {
    let session = holdings.sessions.iter().find(|s| s["id"] == id)?;
    Some(expanded(holdings, session, expand, ""))
}

/// The sessions created in `created`, newest first, expanded as asked.
pub(super) fn listed(holdings: &Holdings, created: Range<i64>, expand: &[String]) -> Vec<Value> {
    holdings
        .sessions
        .iter()
        .filter(|s| created.contains(&s["created"].as_i64().unwrap_or(0)))
        .map(|s| expanded(holdings, s, expand, "data."))
        .collect()
}
