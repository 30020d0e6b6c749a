//! A 200's body into domain facts: a retrieve's PaymentIntent, a list page of
//! PaymentIntents, the probe's list. A body that is not what the endpoint
//! returns is [`Unavailable::InvalidBody`] (a failed read); within a list page
//! an item that is not a usable PaymentIntent spoils only that item.

use reqwest::header::{HeaderMap, CONTENT_TYPE};
use serde_json::Value;

use super::error::{InvalidBody, MalformedPaymentIntent, Unavailable};
use super::id::PaymentIntentId;
use super::wire::{is_status_word, payment_intent_facts};
use crate::reconcile::{ExternalStatus, PaymentIntentFacts};

/// One PaymentIntent of a list page.
#[derive(Debug, Clone)]
pub struct ListedPaymentIntent {
    /// Its id (items without a well-formed id are dropped from the page).
    pub id: PaymentIntentId,
    /// Its facts, or why this item could not be used (its row then falls
    /// back to a retrieve).
    pub facts: Result<PaymentIntentFacts, MalformedPaymentIntent>,
}

/// One page of `GET /v1/payment_intents`, newest first.
#[derive(Debug, Clone)]
pub struct ListPage {
    /// The page's PaymentIntents with a well-formed id.
    pub items: Vec<ListedPaymentIntent>,
    /// `starting_after` for the next page: the last item's id when Stripe
    /// said `has_more`; `None` at the end of the window.
    pub next_after: Option<PaymentIntentId>,
}

fn invalid(why: impl Into<InvalidBody>) -> Unavailable {
    Unavailable::InvalidBody(why.into())
}

/// A JSON body of a 200 answer; anything else (a proxy's HTML page, truncated
/// JSON) is [`Unavailable::InvalidBody`].
pub(super) fn json_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, Unavailable> {
    let content_type = header(headers, CONTENT_TYPE.as_str()).unwrap_or_default();
    if !content_type.starts_with("application/json") {
        return Err(invalid(InvalidBody::ContentType(content_type)));
    }
    serde_json::from_slice(body).map_err(|e| invalid(InvalidBody::NotJson(e)))
}

/// A retrieve's body: the PaymentIntent `id` asked for.
pub(super) fn parse_payment_intent(
    headers: &HeaderMap,
    body: &[u8],
    id: &PaymentIntentId,
) -> Result<PaymentIntentFacts, Unavailable> {
    let pi = json_body(headers, body)?;
    if pi.get("id").and_then(Value::as_str) != Some(id.as_str()) && pi.is_object() {
        if pi
            .get("object")
            .is_some_and(|o| o.as_str() != Some("payment_intent"))
        {
            return Err(invalid(MalformedPaymentIntent::NotAPaymentIntent));
        }
        return Err(invalid(MalformedPaymentIntent::IdMismatch));
    }
    payment_intent_object(&pi).map_err(invalid)
}

/// A PaymentIntent JSON object into its facts, the same checks for a
/// retrieve's body and for each item of a list page.
pub(super) fn payment_intent_object(
    pi: &Value,
) -> Result<PaymentIntentFacts, MalformedPaymentIntent> {
    if !pi.is_object() {
        return Err(MalformedPaymentIntent::NotAnObject);
    }
    if pi
        .get("object")
        .is_some_and(|o| o.as_str() != Some("payment_intent"))
    {
        return Err(MalformedPaymentIntent::NotAPaymentIntent);
    }
    let status = match pi.get("status") {
        Some(Value::String(s)) if is_status_word(s) => ExternalStatus::parse(s),
        Some(Value::String(_)) => return Err(MalformedPaymentIntent::StatusNotAWord),
        Some(_) => return Err(MalformedPaymentIntent::StatusNotAString),
        None => return Err(MalformedPaymentIntent::StatusMissing),
    };
    Ok(payment_intent_facts(pi, status))
}

/// The probe's body: any Stripe list.
pub(super) fn parse_any_list(headers: &HeaderMap, body: &[u8]) -> Result<(), Unavailable> {
    match json_body(headers, body)?
        .get("object")
        .and_then(Value::as_str)
    {
        Some("list") => Ok(()),
        _ => Err(invalid(InvalidBody::NotAList)),
    }
}

/// A list page's body: `{"object": "list", "data": [...], "has_more": bool}`.
pub(super) fn parse_list_page(headers: &HeaderMap, body: &[u8]) -> Result<ListPage, Unavailable> {
    let list = json_body(headers, body)?;
    if list.get("object").and_then(Value::as_str) != Some("list") {
        return Err(invalid(InvalidBody::NotAList));
    }
    let Some(data) = list.get("data").and_then(Value::as_array) else {
        return Err(invalid(InvalidBody::ListWithoutData));
    };
    let Some(has_more) = list.get("has_more").and_then(Value::as_bool) else {
        return Err(invalid(InvalidBody::ListWithoutHasMore));
    };
    let items: Vec<ListedPaymentIntent> = data
        .iter()
        .filter_map(|pi| {
            let id = PaymentIntentId::parse(pi.get("id")?.as_str()?).ok()?;
            let facts = payment_intent_object(pi);
            Some(ListedPaymentIntent { id, facts })
        })
        .collect();
    // Paging goes on after the page's last item; if that item has no usable
    // id the window cannot be paged further (its rows fall back to retrieves).
    let last = data
        .last()
        .and_then(|pi| pi.get("id")?.as_str())
        .and_then(|id| PaymentIntentId::parse(id).ok());
    Ok(ListPage {
        items,
        next_after: if has_more { last } else { None },
    })
}

/// A header's value as text, at most 200 characters (it goes into logs).
pub(super) fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.chars().take(200).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn json_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, "application/json".parse().unwrap());
        h
    }

    #[test]
    fn a_malformed_list_item_spoils_only_that_item() {
        let body = json!({"object": "list", "has_more": true, "data": [
            {"id": "pi_A", "object": "payment_intent", "status": "succeeded"},
            {"id": "pi_B", "object": "payment_intent", "status": 7},
            {"id": "pi_C", "object": "payment_intent", "status": "Succeeded!"},
            {"id": "pi_D", "object": "payment_intent"},
        ]});
        let page = parse_list_page(&json_headers(), body.to_string().as_bytes()).unwrap();
        let facts: Vec<_> = page.items.iter().map(|i| i.facts.as_ref().err()).collect();
        assert_eq!(
            facts,
            [
                None,
                Some(&MalformedPaymentIntent::StatusNotAString),
                Some(&MalformedPaymentIntent::StatusNotAWord),
                Some(&MalformedPaymentIntent::StatusMissing),
            ]
        );
        assert_eq!(page.next_after.as_ref().map(|id| id.as_str()), Some("pi_D"));
    }

    #[test]
    fn a_retrieve_of_another_object_or_id_is_invalid() {
        let id = PaymentIntentId::parse("pi_A").unwrap();
        let other = json!({"id": "pi_B", "object": "payment_intent", "status": "succeeded"});
        let r = parse_payment_intent(&json_headers(), other.to_string().as_bytes(), &id);
        assert!(matches!(
            r,
            Err(Unavailable::InvalidBody(InvalidBody::PaymentIntent(
                MalformedPaymentIntent::IdMismatch
            )))
        ));
        let html = parse_payment_intent(&HeaderMap::new(), b"<html>", &id);
        assert!(matches!(
            html,
            Err(Unavailable::InvalidBody(InvalidBody::ContentType(_)))
        ));
    }
}
