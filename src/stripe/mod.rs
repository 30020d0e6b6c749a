//! The Stripe gateway boundary: Stripe's wire structs stay in here; only
//! [`ExternalStatus`](crate::reconcile::ExternalStatus) and [`GatewayError`]
//! cross it.

pub mod client;
pub mod error;
pub mod events;
pub mod id;
pub mod requests;
pub mod retry;
mod wire;

pub use client::{GatewayConfig, StripeGateway, STRIPE_VERSION};
pub use error::{BuildError, GatewayError, Unavailable};
pub use events::{EventPage, PaymentIntentEvent, PAYMENT_INTENT_EVENT_TYPES};
pub use id::{InvalidPaymentIntentId, PaymentIntentId};
pub use requests::{Endpoint, RequestCounts};
pub use retry::RetryPolicy;
