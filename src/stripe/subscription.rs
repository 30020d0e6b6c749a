//! Stripe Subscriptions as Stripe returns them (docs/subscriptions.md,
//! "Reading Stripe"; Stripe API reference, "The Subscription object"): the
//! wire shape read leniently, and [`SubscriptionId`], validated before it
//! goes into a URL path. Only [`StripeSubscription`] (its facts for
//! classification) leaves the boundary.
//!
//! The period end lives on each item since API version `2025-03-31.basil`
//! and at the top level before it: both are read. The price is `price.id`,
//! else `plan.id` (older versions, some emulators). An unknown status is
//! kept as [`SubscriptionStatus::Unknown`], never a parse error.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::account::AccountId;
use super::id::MAX_ID_LEN;
use crate::reconcile::subscription::{SubscriptionFacts, SubscriptionItem, SubscriptionStatus};

/// A well-formed subscription id: `sub_` followed by ASCII letters, digits
/// and `_`, at most [`MAX_ID_LEN`] bytes. A row whose value is not one is
/// skipped and counted, never sent to Stripe.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SubscriptionId(String);

/// Why a stored value is not a subscription id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSubscriptionId {
    /// Empty (or NULL).
    #[error("empty subscription id")]
    Empty,
    /// Longer than [`MAX_ID_LEN`] bytes.
    #[error("subscription id is {0} bytes long (max {MAX_ID_LEN})")]
    TooLong(usize),
    /// Does not start with `sub_` (another processor's id, a schedule's).
    #[error("subscription id does not start with \"sub_\"")]
    WrongPrefix,
    /// Nothing after the prefix, or a byte outside `[A-Za-z0-9_]`.
    #[error("subscription id has characters other than letters, digits and _ after \"sub_\"")]
    BadCharacters,
}

impl SubscriptionId {
    /// Parses an untrusted value.
    ///
    /// # Errors
    /// [`InvalidSubscriptionId`] saying which rule the value breaks.
    pub fn parse(value: &str) -> Result<Self, InvalidSubscriptionId> {
        if value.is_empty() {
            return Err(InvalidSubscriptionId::Empty);
        }
        if value.len() > MAX_ID_LEN {
            return Err(InvalidSubscriptionId::TooLong(value.len()));
        }
        let rest = value
            .strip_prefix("sub_")
            .ok_or(InvalidSubscriptionId::WrongPrefix)?;
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(InvalidSubscriptionId::BadCharacters);
        }
        Ok(SubscriptionId(value.to_owned()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SubscriptionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One subscription read from Stripe: what crosses the boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeSubscription {
    /// `id`.
    pub id: SubscriptionId,
    /// `created` (list windows).
    pub created: Option<DateTime<Utc>>,
    /// `customer` (its id; an expanded customer's `id`).
    pub customer: Option<String>,
    /// The connected account it was read on (`Stripe-Account`); `None` for
    /// the platform's own.
    pub account: Option<AccountId>,
    /// What classification compares.
    pub facts: SubscriptionFacts,
}

/// A body that is not a usable Subscription object.
#[derive(Debug, thiserror::Error)]
pub enum MalformedSubscription {
    /// Not JSON of the Subscription's shape (a field of the wrong type).
    #[error("not a Subscription object: {0}")]
    Shape(#[source] serde_json::Error),
    /// `object` is present and is not `subscription`.
    #[error("object is {0:?}, not \"subscription\"")]
    WrongObject(String),
    /// The `id` is not a subscription id.
    #[error("id: {0}")]
    Id(#[source] InvalidSubscriptionId),
    /// A timestamp outside the range of dates.
    #[error("{0} is not a timestamp")]
    Timestamp(&'static str),
}

/// `{"id": …}` or a bare id: Stripe's expandable fields.
#[derive(Deserialize)]
#[serde(untagged)]
enum Expandable {
    Id(String),
    Object { id: String },
}

#[derive(Deserialize)]
struct WireId {
    id: String,
}

#[derive(Deserialize)]
struct WireItem {
    price: Option<WireId>,
    plan: Option<WireId>,
    quantity: Option<i64>,
    current_period_end: Option<i64>,
}

#[derive(Deserialize, Default)]
struct WireItems {
    #[serde(default)]
    data: Vec<WireItem>,
}

#[derive(Deserialize)]
struct WireSubscription {
    id: String,
    object: Option<String>,
    status: String,
    #[serde(default)]
    items: WireItems,
    created: Option<i64>,
    customer: Option<Expandable>,
    current_period_end: Option<i64>,
    #[serde(default)]
    cancel_at_period_end: bool,
    cancel_at: Option<i64>,
    ended_at: Option<i64>,
    trial_end: Option<i64>,
}

fn time(
    field: &'static str,
    secs: Option<i64>,
) -> Result<Option<DateTime<Utc>>, MalformedSubscription> {
    secs.map(|s| DateTime::from_timestamp(s, 0).ok_or(MalformedSubscription::Timestamp(field)))
        .transpose()
}

impl WireItem {
    fn item(self) -> Result<SubscriptionItem, MalformedSubscription> {
        Ok(SubscriptionItem {
            price: self.price.or(self.plan).map(|p| p.id),
            quantity: self.quantity,
            current_period_end: time("items.data[].current_period_end", self.current_period_end)?,
        })
    }
}

/// Reads one Subscription object (a retrieve's body, a list item, an
/// event's `data.object`) read on `account`.
///
/// # Errors
/// [`MalformedSubscription`] when the value is not a usable Subscription.
pub fn parse_subscription(
    value: serde_json::Value,
    account: Option<&AccountId>,
) -> Result<StripeSubscription, MalformedSubscription> {
    let wire: WireSubscription =
        serde_json::from_value(value).map_err(MalformedSubscription::Shape)?;
    if let Some(object) = wire.object.filter(|o| o != "subscription") {
        return Err(MalformedSubscription::WrongObject(object));
    }
    let id = SubscriptionId::parse(&wire.id).map_err(MalformedSubscription::Id)?;
    let items = wire
        .items
        .data
        .into_iter()
        .map(WireItem::item)
        .collect::<Result<Vec<_>, _>>()?;
    let facts = SubscriptionFacts {
        status: SubscriptionStatus::parse(&wire.status),
        items,
        current_period_end: time("current_period_end", wire.current_period_end)?,
        cancel_at_period_end: wire.cancel_at_period_end,
        cancel_at: time("cancel_at", wire.cancel_at)?,
        ended_at: time("ended_at", wire.ended_at)?,
        trial_end: time("trial_end", wire.trial_end)?,
    };
    Ok(StripeSubscription {
        id,
        created: time("created", wire.created)?,
        customer: wire.customer.map(|c| match c {
            Expandable::Id(id) | Expandable::Object { id } => id,
        }),
        account: account.cloned(),
        facts,
    })
}

/// The subscription an `invoice` object (an `invoice.*` event's
/// `data.object`) bills: `parent.subscription_details.subscription` since
/// API version `2025-03-31.basil`, `subscription` before it (either may be
/// an expanded object); `None` for an invoice of no subscription or an id
/// that is not one.
pub fn invoice_subscription(invoice: &serde_json::Value) -> Option<SubscriptionId> {
    let named = invoice
        .pointer("/parent/subscription_details/subscription")
        .filter(|v| !v.is_null())
        .or_else(|| invoice.get("subscription").filter(|v| !v.is_null()))?;
    let id = named
        .as_str()
        .or_else(|| named.get("id").and_then(serde_json::Value::as_str))?;
    SubscriptionId::parse(id).ok()
}

#[cfg(test)]
mod tests;
