//! The Stripe gateway boundary: Stripe's wire structs stay in here; only
//! domain types ([`PaymentIntentFacts`](crate::reconcile::PaymentIntentFacts),
//! [`ExternalStatus`](crate::reconcile::ExternalStatus), [`ListPage`],
//! [`EventPage`]) and [`GatewayError`] cross it.
//!
//! - [`account`]: [`AccountId`] (Connect, `Stripe-Account`) and the run's unreachable accounts.
//! - [`client`]: [`StripeGateway`] and its reads (retrieve, probe, list).
//! - [`events`]: the events feed (`GET /v1/events`): event types, pages, parsing.
//! - `gateway`: [`StripeGateway`], the state a run's reads share.
//! - `transport`: one GET: rate limit, retries, HTTP status mapping, body cap.
//! - [`counting`]: requests per [`Endpoint`] (`stripe_requests{endpoint}`).
//! - `parsing`: a 200's body into domain facts.
//! - [`retry`]: the retry decision, a pure function.
//! - [`session`]: Checkout Sessions: retrieve and list (docs/checkout-sessions.md).
//! - [`subscription`]: Subscriptions as Stripe returns them, [`SubscriptionId`]
//!   (docs/subscriptions.md).
//! - `subscription_reads`: Subscriptions: retrieve and list with `status=all` (docs/subscriptions.md).
//! - [`error`]: [`GatewayError`] and its causes.
//! - [`id`]: [`PaymentIntentId`] and [`CheckoutSessionId`], validated before they go into a URL path.
//! - `wire`: Stripe's JSON shapes, read leniently (private): list pages, the
//!   event envelope, PaymentIntent fields, the error body.

pub mod account;
pub mod client;
pub mod counting;
pub mod error;
pub mod events;
mod gateway;
pub mod id;
mod parsing;
pub mod retry;
pub mod session;
pub mod subscription;
mod subscription_reads;
mod transport;
mod wire;

pub use account::{AccountAccess, AccountId, InvalidAccountId};
pub use client::{CreatedWindow, GatewayConfig, StripeGateway, LIST_PAGE_LIMIT};
pub use counting::{Endpoint, RequestCounts};
pub use error::{
    BuildError, GatewayError, InvalidBody, MalformedPaymentIntent, MalformedSession, Unavailable,
};
pub use events::{
    EventObject, EventPage, EventType, PaymentIntentEvent, SessionEvent, EVENT_TYPES,
    PAYMENT_INTENT_EVENT_TYPES,
};
pub use id::{
    CheckoutSessionId, InvalidCheckoutSessionId, InvalidPaymentIntentId, PaymentIntentId,
};
pub use parsing::{ListPage, ListedPaymentIntent};
pub use retry::RetryPolicy;
pub use session::{ListedSession, SessionPage};
pub use subscription::{
    invoice_subscription, parse_subscription, InvalidSubscriptionId, MalformedSubscription,
    StripeSubscription, SubscriptionId,
};
pub use subscription_reads::{
    SubscriptionEvent, SubscriptionEventPage, SubscriptionPage, SUBSCRIPTION_EVENT_TYPES,
};
pub use transport::{MAX_BODY_BYTES, MAX_LIST_BODY_BYTES, RATE_HEADROOM, STRIPE_VERSION};
