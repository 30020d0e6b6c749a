//! Subscriptions read from Stripe (docs/subscriptions.md, "Reading
//! Stripe"): retrieve (`GET /v1/subscriptions/{id}`) and list
//! (`GET /v1/subscriptions?status=all&created[gte]&created[lte]&limit=100`),
//! under the run's rate limit, retry rule and error mapping. Without
//! `status=all` Stripe leaves canceled and `incomplete_expired`
//! subscriptions out of a list, so every list asks for it. Requests count
//! as [`Endpoint::Retrieve`] and [`Endpoint::List`].

use reqwest::header::HeaderMap;
use serde_json::Value;

use super::account::AccountId;
use super::client::{CreatedWindow, StripeGateway, LIST_PAGE_LIMIT};
use super::counting::Endpoint;
use super::error::{GatewayError, InvalidBody, Unavailable};
use super::parsing::json_body;
use super::subscription::{
    parse_subscription, MalformedSubscription, StripeSubscription, SubscriptionId,
};
use super::transport::MAX_LIST_BODY_BYTES;

/// One page of `GET /v1/subscriptions`, newest first.
#[derive(Debug)]
pub struct SubscriptionPage {
    /// The page's subscriptions with a well-formed id: their facts, or why
    /// an item could not be read (its row then falls back to a retrieve).
    pub items: Vec<(
        SubscriptionId,
        Result<StripeSubscription, MalformedSubscription>,
    )>,
    /// `starting_after` for the next page; `None` at the end of the window.
    pub next_after: Option<SubscriptionId>,
}

impl StripeGateway {
    /// Reads one subscription on the connected `account` (`Stripe-Account`;
    /// `None`: the platform's own). Canceled subscriptions are returned too.
    ///
    /// # Errors
    /// As [`StripeGateway::payment_intent_on`]: [`GatewayError::NotFound`]
    /// for Stripe's 404 `resource_missing`; a body that is not this
    /// subscription is [`GatewayError::Unavailable`].
    #[tracing::instrument(name = "stripe.retrieve_subscription", level = "debug", skip_all, fields(subscription = %id, stripe_account = account.map(AccountId::as_str), request_id = tracing::field::Empty, http_status = tracing::field::Empty))]
    pub async fn subscription_on(
        &self,
        account: Option<&AccountId>,
        id: &SubscriptionId,
    ) -> Result<StripeSubscription, GatewayError> {
        let url = self.v1(&["subscriptions", id.as_str()]);
        self.request(Endpoint::Retrieve, &url, account, |headers, body| {
            let value = json_body(headers, body)?;
            if value.get("id").and_then(Value::as_str) != Some(id.as_str()) {
                return Err(Unavailable::InvalidBody(InvalidBody::NotAList));
            }
            parse_subscription(value, account)
                .map_err(|e| Unavailable::InvalidBody(InvalidBody::Subscription(e)))
        })
        .await
    }

    /// Lists every subscription (`status=all`) of `account` created in
    /// `window`, newest first, [`LIST_PAGE_LIMIT`] after `starting_after`.
    ///
    /// # Errors
    /// As [`StripeGateway::list_payment_intents_on`]: a 4xx that is not a
    /// rejected key (an older API or a proxy refusing a parameter) or a 5xx
    /// after its retries is [`GatewayError::Unavailable`].
    #[tracing::instrument(name = "stripe.list_subscriptions", level = "debug", skip_all, fields(gte = window.gte, lte = window.lte, stripe_account = account.map(AccountId::as_str), request_id = tracing::field::Empty, http_status = tracing::field::Empty))]
    pub async fn list_subscriptions_on(
        &self,
        account: Option<&AccountId>,
        window: CreatedWindow,
        starting_after: Option<&SubscriptionId>,
    ) -> Result<SubscriptionPage, GatewayError> {
        let mut url = self.v1(&["subscriptions"]);
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("status", "all")
                .append_pair("created[gte]", &window.gte.to_string())
                .append_pair("created[lte]", &window.lte.to_string())
                .append_pair("limit", &LIST_PAGE_LIMIT.to_string());
            if let Some(after) = starting_after {
                query.append_pair("starting_after", after.as_str());
            }
        }
        let parse = |headers: &HeaderMap, body: &[u8]| parse_page(headers, body, account);
        match self
            .request_capped(Endpoint::List, &url, account, MAX_LIST_BODY_BYTES, parse)
            .await
        {
            Err(GatewayError::NotFound { request_id }) => Err(GatewayError::Unavailable {
                attempts: 1,
                cause: Unavailable::InvalidBody(InvalidBody::NotFoundOnList),
                request_id,
            }),
            other => other,
        }
    }
}

fn parse_page(
    headers: &HeaderMap,
    body: &[u8],
    account: Option<&AccountId>,
) -> Result<SubscriptionPage, Unavailable> {
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
    let id_of = |v: &Value| {
        v.get("id")
            .and_then(Value::as_str)
            .and_then(|id| SubscriptionId::parse(id).ok())
    };
    let items = data
        .iter()
        .filter_map(|v| Some((id_of(v)?, parse_subscription(v.clone(), account))))
        .collect();
    Ok(SubscriptionPage {
        items,
        next_after: if has_more {
            data.last().and_then(id_of)
        } else {
            None
        },
    })
}

/// The event types that can change a subscription's verdict (at most 20
/// per request, Stripe's limit): the subscription's own, and the invoice
/// events that name it (docs/subscriptions.md, "Events").
pub const SUBSCRIPTION_EVENT_TYPES: [&str; 12] = [
    "customer.subscription.created",
    "customer.subscription.updated",
    "customer.subscription.deleted",
    "customer.subscription.paused",
    "customer.subscription.resumed",
    "customer.subscription.trial_will_end",
    "invoice.paid",
    "invoice.payment_succeeded",
    "invoice.payment_failed",
    "invoice.payment_action_required",
    "invoice.marked_uncollectible",
    "invoice.voided",
];

/// One event naming a subscription: only its id, `created` and the
/// subscription it names cross the boundary (the payload's status is
/// never trusted: the subscription is read again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionEvent {
    /// `evt_…`.
    pub id: String,
    /// `created`, epoch seconds.
    pub created: i64,
    /// The subscription it names.
    pub subscription: SubscriptionId,
}

/// One page of subscription events, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionEventPage {
    /// The page's events that name a well-formed subscription id.
    pub events: Vec<SubscriptionEvent>,
    /// Every event id of the page was read; `starting_after` for the next
    /// page, `None` at the end.
    pub next_after: Option<String>,
}

impl StripeGateway {
    /// `GET /v1/events?types[]=…&created[gte]=<gte>&limit=100`, the
    /// [`SUBSCRIPTION_EVENT_TYPES`], newest first, after `starting_after`.
    ///
    /// # Errors
    /// As [`StripeGateway::list_subscriptions_on`].
    #[tracing::instrument(name = "stripe.subscription_events", level = "debug", skip_all, fields(gte, request_id = tracing::field::Empty, http_status = tracing::field::Empty))]
    pub async fn subscription_events(
        &self,
        gte: i64,
        starting_after: Option<&str>,
    ) -> Result<SubscriptionEventPage, GatewayError> {
        let mut url = self.v1(&["events"]);
        {
            let mut query = url.query_pairs_mut();
            for t in SUBSCRIPTION_EVENT_TYPES {
                query.append_pair("types[]", t);
            }
            query
                .append_pair("created[gte]", &gte.to_string())
                .append_pair("limit", &LIST_PAGE_LIMIT.to_string());
            if let Some(after) = starting_after {
                query.append_pair("starting_after", after);
            }
        }
        self.request_capped(
            Endpoint::Events,
            &url,
            None,
            MAX_LIST_BODY_BYTES,
            parse_events,
        )
        .await
    }
}

/// The subscription an event's object names: a subscription's own id, or
/// an invoice's (`parent.subscription_details.subscription` since basil,
/// `subscription` before; a string or an expanded object).
fn named_subscription(object: &Value) -> Option<SubscriptionId> {
    let id_of = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(_) => v.get("id").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    };
    let raw = match object.get("object").and_then(Value::as_str) {
        Some("subscription") => id_of(object.get("id")?),
        Some("invoice") => object
            .pointer("/parent/subscription_details/subscription")
            .and_then(id_of)
            .or_else(|| object.get("subscription").and_then(id_of)),
        _ => None,
    }?;
    SubscriptionId::parse(&raw).ok()
}

fn parse_events(headers: &HeaderMap, body: &[u8]) -> Result<SubscriptionEventPage, Unavailable> {
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
    let events = data
        .iter()
        .filter_map(|e| {
            Some(SubscriptionEvent {
                id: e.get("id")?.as_str()?.to_owned(),
                created: e.get("created")?.as_i64()?,
                subscription: named_subscription(e.pointer("/data/object")?)?,
            })
        })
        .collect();
    let last = data
        .last()
        .and_then(|e| e.get("id")?.as_str().map(str::to_owned));
    if has_more && last.is_none() {
        return Err(invalid(InvalidBody::LastEventWithoutId));
    }
    Ok(SubscriptionEventPage {
        events,
        next_after: if has_more { last } else { None },
    })
}
