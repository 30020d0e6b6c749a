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
