//! The Stripe gateway boundary: Stripe's wire structs stay in here; only
//! [`ExternalStatus`](crate::reconcile::ExternalStatus) and [`GatewayError`]
//! cross it.

pub mod client;
pub mod error;
pub mod events;
pub mod id;
pub mod retry;
mod wire;

pub use client::{
    CreatedWindow, GatewayConfig, ListPage, ListedPaymentIntent, RequestCounts, StripeGateway,
    LIST_PAGE_LIMIT, STRIPE_VERSION,
};
pub use error::{BuildError, GatewayError, Unavailable};
pub use events::{EventPage, PaymentIntentEvent, PAYMENT_INTENT_EVENT_TYPES};
pub use id::{InvalidPaymentIntentId, PaymentIntentId};
pub use retry::RetryPolicy;
