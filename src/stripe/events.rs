//! The events feed: `GET /v1/events` for the PaymentIntent event types, one
//! page at a time, newest first. Only what the events job needs crosses the
//! boundary ([`PaymentIntentEvent`]): the event's id, type and `created`,
//! the PaymentIntent it names, and the status and metadata its embedded
//! object showed. The embedded object is rendered in the API version the
//! event was created with, not the pinned one, so only fields that are the
//! same in every version are read (`id`, `object`, `status`, `metadata`);
//! the job re-reads the PaymentIntent before deciding anything.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::client::StripeGateway;
use super::counting::Endpoint;
use super::error::{GatewayError, InvalidBody, Unavailable};
use super::id::PaymentIntentId;
use super::parsing::json_body;
use super::transport::MAX_LIST_BODY_BYTES;
use crate::reconcile::ExternalStatus;

/// The PaymentIntent event types the job reads (Stripe accepts up to 20
/// `types[]`).
pub const PAYMENT_INTENT_EVENT_TYPES: [&str; 7] = [
    "payment_intent.succeeded",
    "payment_intent.canceled",
    "payment_intent.payment_failed",
    "payment_intent.processing",
    "payment_intent.requires_action",
    "payment_intent.amount_capturable_updated",
    "payment_intent.partially_funded",
];

/// Events per page (Stripe's maximum).
pub const EVENTS_PAGE_LIMIT: u32 = 100;

/// One event about a PaymentIntent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentIntentEvent {
    /// `evt_...`
    pub id: String,
    /// e.g. `payment_intent.succeeded`.
    pub event_type: String,
    /// When Stripe created the event (its clock, second precision).
    pub created: DateTime<Utc>,
    /// The PaymentIntent the event is about (`data.object.id`).
    pub payment_intent: PaymentIntentId,
    /// `data.object.status` as the event rendered it; `None` when absent or
    /// not a status word.
    pub status: Option<ExternalStatus>,
    /// `data.object.metadata` (string values only).
    pub metadata: BTreeMap<String, String>,
}

/// One page of the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPage {
    /// The page's PaymentIntent events, newest first.
    pub events: Vec<PaymentIntentEvent>,
    /// Entries of the page that were not a readable PaymentIntent event
    /// (logged and skipped).
    pub skipped: usize,
    /// Stripe says older events follow.
    pub has_more: bool,
    /// The id to pass as `starting_after` for the next (older) page: the
    /// page's last entry, readable or not.
    pub next_after: Option<String>,
}

impl StripeGateway {
    /// Reads one page of PaymentIntent events created at or after
    /// `created_gte` (Unix seconds), newest first, older than `starting_after`
    /// when given: `GET /v1/events?types[]=...&created[gte]=..&limit=100
    /// [&starting_after=evt_...]`, under the shared rate limit and retry rule.
    ///
    /// # Errors
    /// As [`StripeGateway::payment_intent_events_in`].
    pub async fn payment_intent_events(
        &self,
        created_gte: i64,
        starting_after: Option<&str>,
    ) -> Result<EventPage, GatewayError> {
        self.payment_intent_events_in(created_gte, None, starting_after)
            .await
    }

    /// Reads one page of PaymentIntent events created in
    /// `[created_gte, created_lt)` (Unix seconds; no upper bound when
    /// `created_lt` is `None`), newest first, older than `starting_after` when
    /// given: `GET /v1/events?types[]=...&created[gte]=..[&created[lt]=..]
    /// &limit=100[&starting_after=evt_...]` (Stripe's list filters on
    /// `created`), under the shared rate limit and retry rule.
    ///
    /// # Errors
    /// - [`GatewayError::Rejected`]: 401/403 (a restricted key needs read
    ///   access to Events).
    /// - [`GatewayError::Misconfigured`]: a 404 that is Stripe's unknown URL.
    /// - [`GatewayError::Unavailable`]: timeouts, 429, 5xx, a body that is not
    ///   a Stripe list, after the retry budget.
    #[tracing::instrument(name = "stripe.events", level = "debug", skip_all, fields(created_gte, created_lt, request_id = tracing::field::Empty, http_status = tracing::field::Empty))]
    pub async fn payment_intent_events_in(
        &self,
        created_gte: i64,
        created_lt: Option<i64>,
        starting_after: Option<&str>,
    ) -> Result<EventPage, GatewayError> {
        let mut url = self.v1(&["events"]);
        {
            let mut q = url.query_pairs_mut();
            for t in PAYMENT_INTENT_EVENT_TYPES {
                q.append_pair("types[]", t);
            }
            q.append_pair("created[gte]", &created_gte.to_string());
            if let Some(lt) = created_lt {
                q.append_pair("created[lt]", &lt.to_string());
            }
            q.append_pair("limit", &EVENTS_PAGE_LIMIT.to_string());
            if let Some(after) = starting_after {
                q.append_pair("starting_after", after);
            }
        }
        self.request_capped(
            Endpoint::Events,
            &url,
            MAX_LIST_BODY_BYTES,
            |headers, body| parse_page(&json_body(headers, body)?),
        )
        .await
    }
}

fn parse_page(list: &Value) -> Result<EventPage, Unavailable> {
    let invalid = Unavailable::InvalidBody;
    if list.get("object").and_then(Value::as_str) != Some("list") {
        return Err(invalid(InvalidBody::NotAList));
    }
    let data = list
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(InvalidBody::ListWithoutData))?;
    let has_more = list
        .get("has_more")
        .and_then(Value::as_bool)
        .ok_or_else(|| invalid(InvalidBody::ListWithoutHasMore))?;
    let next_after = match data.last() {
        None => None,
        Some(last) => Some(
            last.get("id")
                .and_then(Value::as_str)
                .filter(|id| is_event_id(id))
                .ok_or_else(|| invalid(InvalidBody::LastEventWithoutId))?
                .to_owned(),
        ),
    };
    let mut events = Vec::with_capacity(data.len());
    let mut skipped = 0;
    for entry in data {
        match parse_event(entry) {
            Some(e) => events.push(e),
            None => {
                skipped += 1;
                let id = entry.get("id").and_then(Value::as_str).unwrap_or("-");
                tracing::warn!(
                    event = id,
                    "event is not a readable PaymentIntent event; skipped"
                );
            }
        }
    }
    Ok(EventPage {
        events,
        skipped,
        has_more,
        next_after,
    })
}

fn is_event_id(id: &str) -> bool {
    id.len() <= 255
        && id.strip_prefix("evt_").is_some_and(|r| {
            !r.is_empty() && r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
}

fn parse_event(e: &Value) -> Option<PaymentIntentEvent> {
    let id = e
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| is_event_id(id))?;
    let event_type = e
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| PAYMENT_INTENT_EVENT_TYPES.contains(t))?;
    let created = e
        .get("created")
        .and_then(Value::as_i64)
        .and_then(|t| DateTime::from_timestamp(t, 0))?;
    let object = e.get("data").and_then(|d| d.get("object"))?;
    if object
        .get("object")
        .is_some_and(|o| o.as_str() != Some("payment_intent"))
    {
        return None;
    }
    let payment_intent = PaymentIntentId::parse(object.get("id").and_then(Value::as_str)?).ok()?;
    let status = object
        .get("status")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= 64)
        .filter(|s| s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        .map(ExternalStatus::parse);
    let metadata = object
        .get("metadata")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    Some(PaymentIntentEvent {
        id: id.to_owned(),
        event_type: event_type.to_owned(),
        created,
        payment_intent,
        status,
        metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(id: &str, pi: &str, status: &str, created: i64) -> Value {
        json!({"id": id, "object": "event", "api_version": "2019-02-19", "created": created,
               "type": format!("payment_intent.{status}"),
               "data": {"object": {"id": pi, "object": "payment_intent", "status": status,
                                   "metadata": {"order": "o1", "n": 3}}},
               "livemode": false, "pending_webhooks": 0, "request": {"id": null}})
    }

    #[test]
    fn a_page_keeps_readable_events_and_the_cursor_of_the_last_entry() {
        let page = parse_page(
            &json!({"object": "list", "has_more": true, "url": "/v1/events",
            "data": [event("evt_1", "pi_A", "succeeded", 1_700_000_000),
                     json!({"id": "evt_2", "type": "payment_intent.succeeded", "created": 1,
                            "data": {"object": {"id": "../x"}}}),
                     event("evt_3", "pi_B", "canceled", 1_699_999_999)]}),
        )
        .unwrap();
        assert_eq!(page.events.len(), 2);
        assert_eq!(page.skipped, 1);
        assert!(page.has_more);
        assert_eq!(page.next_after.as_deref(), Some("evt_3"));
        let first = &page.events[0];
        assert_eq!(first.payment_intent.as_str(), "pi_A");
        assert_eq!(first.status, Some(ExternalStatus::parse("succeeded")));
        assert_eq!(first.metadata.get("order").map(String::as_str), Some("o1"));
        assert!(
            !first.metadata.contains_key("n"),
            "non-string metadata is dropped"
        );
    }

    #[test]
    fn a_body_that_is_not_a_list_is_an_error() {
        assert!(parse_page(&json!({"object": "event"})).is_err());
        assert!(parse_page(&json!({"object": "list", "data": []})).is_err());
        let last_without_id = json!({"object": "list", "has_more": false, "data": [{"type": "x"}]});
        assert!(parse_page(&last_without_id).is_err());
    }
}
