//! Checkout Sessions (docs/checkout-sessions.md): retrieve
//! (`GET /v1/checkout/sessions/{id}?expand[]=payment_intent.latest_charge`)
//! and list (`GET /v1/checkout/sessions?created[gte]&created[lte]&limit=100
//! &expand[]=data.payment_intent.latest_charge`), under the same rate limit,
//! retry rule and error mapping as the PaymentIntent reads. A session
//! crosses the boundary as [`CheckoutSessionFacts`], its PaymentIntent (when
//! expanded) as [`crate::reconcile::PaymentIntentFacts`]. Requests count as
//! [`Endpoint::Retrieve`] and [`Endpoint::List`]: the same rate budget.

use chrono::DateTime;
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::account::AccountId;
use super::client::{CreatedWindow, StripeGateway};
use super::counting::Endpoint;
use super::error::{GatewayError, InvalidBody, MalformedSession, Unavailable};
use super::id::{CheckoutSessionId, PaymentIntentId};
use super::parsing::{json_body, payment_intent_object};
use super::wire::is_status_word;
use crate::reconcile::{
    CheckoutSessionFacts, SessionMode, SessionPaymentIntent, SessionPaymentStatus, SessionStatus,
};

/// One Checkout Session of a list page.
#[derive(Debug, Clone)]
pub struct ListedSession {
    /// Its id (items without a well-formed id are dropped from the page).
    pub id: CheckoutSessionId,
    /// Its facts, or why this item could not be used (its row then falls
    /// back to a retrieve).
    pub facts: Result<CheckoutSessionFacts, MalformedSession>,
}

/// One page of `GET /v1/checkout/sessions`, newest first.
#[derive(Debug, Clone)]
pub struct SessionPage {
    /// The page's sessions with a well-formed id.
    pub items: Vec<ListedSession>,
    /// `starting_after` for the next page; `None` at the end of the window.
    pub next_after: Option<CheckoutSessionId>,
}

impl StripeGateway {
    /// Reads one Checkout Session with its PaymentIntent and that
    /// PaymentIntent's latest charge, on the connected `account`
    /// (`Stripe-Account`; `None`: the platform's own).
    ///
    /// # Errors
    /// As [`StripeGateway::payment_intent_on`]: [`GatewayError::NotFound`]
    /// for Stripe's 404 `resource_missing`; a body that is not this session
    /// is [`GatewayError::Unavailable`].
    #[tracing::instrument(name = "stripe.retrieve_session", level = "debug", skip_all, fields(checkout_session = %id, stripe_account = account.map(AccountId::as_str), request_id = tracing::field::Empty, http_status = tracing::field::Empty))]
    pub async fn checkout_session_on(
        &self,
        account: Option<&AccountId>,
        id: &CheckoutSessionId,
    ) -> Result<CheckoutSessionFacts, GatewayError> {
        let mut url = self.v1(&["checkout", "sessions", id.as_str()]);
        url.query_pairs_mut()
            .append_pair("expand[]", "payment_intent.latest_charge");
        self.request(Endpoint::Retrieve, &url, account, |headers, body| {
            parse_session_body(headers, body, id)
        })
        .await
    }

    /// Lists the Checkout Sessions created in `window` on `account`, newest
    /// first, each with its PaymentIntent and latest charge.
    ///
    /// # Errors
    /// As [`StripeGateway::list_payment_intents_on`].
    #[tracing::instrument(name = "stripe.list_sessions", level = "debug", skip_all, fields(gte = window.gte, lte = window.lte, stripe_account = account.map(AccountId::as_str), request_id = tracing::field::Empty, http_status = tracing::field::Empty))]
    pub async fn list_checkout_sessions_on(
        &self,
        account: Option<&AccountId>,
        window: CreatedWindow,
        starting_after: Option<&CheckoutSessionId>,
    ) -> Result<SessionPage, GatewayError> {
        self.list_page(
            (
                &["checkout", "sessions"],
                "data.payment_intent.latest_charge",
            ),
            account,
            window,
            starting_after.map(CheckoutSessionId::as_str),
            parse_session_page,
        )
        .await
    }
}

fn parse_session_body(
    headers: &HeaderMap,
    body: &[u8],
    id: &CheckoutSessionId,
) -> Result<CheckoutSessionFacts, Unavailable> {
    let session = json_body(headers, body)?;
    if session.get("id").and_then(Value::as_str) != Some(id.as_str()) {
        return Err(Unavailable::InvalidBody(InvalidBody::CheckoutSession(
            MalformedSession::Field("the body is not the session asked for"),
        )));
    }
    session_object(&session).map_err(|e| Unavailable::InvalidBody(e.into()))
}

fn parse_session_page(headers: &HeaderMap, body: &[u8]) -> Result<SessionPage, Unavailable> {
    let invalid = Unavailable::InvalidBody;
    let list = json_body(headers, body)?;
    if list.get("object").and_then(Value::as_str) != Some("list") {
        return Err(invalid(InvalidBody::NotAList));
    }
    let data = list
        .get("data")
        .and_then(Value::as_array)
        .ok_or(invalid(InvalidBody::ListWithoutData))?;
    let has_more = list
        .get("has_more")
        .and_then(Value::as_bool)
        .ok_or(invalid(InvalidBody::ListWithoutHasMore))?;
    let id_of = |s: &Value| CheckoutSessionId::parse(s.get("id")?.as_str()?).ok();
    let items = data
        .iter()
        .filter_map(|s| {
            Some(ListedSession {
                id: id_of(s)?,
                facts: session_object(s),
            })
        })
        .collect();
    Ok(SessionPage {
        items,
        next_after: if has_more {
            data.last().and_then(id_of)
        } else {
            None
        },
    })
}

/// A word field of a session (`status`, `mode`, `payment_status`).
fn word<'a>(s: &'a Value, field: &str) -> Option<&'a str> {
    s.get(field)
        .and_then(Value::as_str)
        .filter(|w| is_status_word(w))
}

/// A Checkout Session JSON object into its facts: `object`, `mode`,
/// `status` and `payment_status` must be there; `payment_intent` may be
/// `null`, an id or the expanded object (whose checks are a PaymentIntent's).
fn session_object(s: &Value) -> Result<CheckoutSessionFacts, MalformedSession> {
    let bad = MalformedSession::Field;
    if s.get("object").and_then(Value::as_str) != Some("checkout.session") {
        return Err(bad("object is not checkout.session"));
    }
    let mode = word(s, "mode").ok_or(bad("no mode word"))?;
    let status = word(s, "status").ok_or(bad("no status word"))?;
    let payment_status = word(s, "payment_status").ok_or(bad("no payment_status word"))?;
    let payment_intent = match s.get("payment_intent") {
        None | Some(Value::Null) => SessionPaymentIntent::None,
        Some(Value::String(id)) => match PaymentIntentId::parse(id) {
            Ok(id) => SessionPaymentIntent::NotExpanded(id.as_str().to_owned()),
            Err(_) => return Err(bad("payment_intent is not a PaymentIntent id")),
        },
        Some(pi @ Value::Object(_)) => {
            let id = pi
                .get("id")
                .and_then(Value::as_str)
                .and_then(|id| PaymentIntentId::parse(id).ok())
                .ok_or(bad("the expanded payment_intent has no PaymentIntent id"))?;
            let facts = payment_intent_object(pi).map_err(MalformedSession::PaymentIntent)?;
            SessionPaymentIntent::Expanded {
                id: id.as_str().to_owned(),
                facts: Box::new(facts),
            }
        }
        Some(_) => return Err(bad("payment_intent is neither null, an id nor an object")),
    };
    Ok(CheckoutSessionFacts {
        mode: SessionMode::parse(mode),
        status: SessionStatus::parse(status),
        payment_status: SessionPaymentStatus::parse(payment_status),
        expires_at: s
            .get("expires_at")
            .and_then(Value::as_i64)
            .and_then(|t| DateTime::from_timestamp(t, 0)),
        payment_intent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::CONTENT_TYPE;
    use serde_json::json;

    fn fixture() -> Value {
        serde_json::from_str(include_str!("../../tests/fixtures/checkout_session.json")).unwrap()
    }

    fn headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, "application/json".parse().unwrap());
        h
    }

    #[test]
    fn stripes_example_session_parses_with_its_payment_intent_in_every_shape() {
        let mut s = fixture();
        let facts = session_object(&s).unwrap();
        assert_eq!(facts.mode, SessionMode::Payment);
        assert_eq!(facts.status, SessionStatus::Open);
        assert_eq!(facts.payment_status, SessionPaymentStatus::Unpaid);
        assert_eq!(
            facts.payment_intent,
            SessionPaymentIntent::NotExpanded("pi_1PgafyB7WZ01zgkWSjxsAJo3".into())
        );
        s["payment_intent"] = Value::Null;
        assert_eq!(
            session_object(&s).unwrap().payment_intent,
            SessionPaymentIntent::None
        );
        s["payment_intent"] = json!({"id": "pi_X", "object": "payment_intent", "status": "succeeded",
                                     "latest_charge": {"id": "ch_X", "amount": 5, "amount_refunded": 0}});
        let facts = session_object(&s).unwrap();
        assert_eq!(facts.payment_intent.id(), Some("pi_X"));
        s["payment_intent"] = json!("pi_../x");
        assert!(session_object(&s).is_err());
        s["payment_intent"] = Value::Null;
        s["object"] = json!("payment_intent");
        assert!(session_object(&s).is_err());
    }

    #[test]
    fn a_retrieve_of_another_session_is_invalid() {
        let id = CheckoutSessionId::parse("cs_test_other").unwrap();
        let body = fixture().to_string();
        assert!(parse_session_body(&headers(), body.as_bytes(), &id).is_err());
    }
}
