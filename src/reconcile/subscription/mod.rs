//! PURE classification of subscriptions, the second reconciled object
//! (docs/subscriptions.md): the application's subscriptions table against
//! Stripe Subscriptions.
//!
//! - `status`: [`SubscriptionStatus`] (Stripe's eight and unknown ones) and
//!   [`PastDueAccess`] (`RECONCILER_PAST_DUE_ACCESS`).
//! - `words`: [`SubscriptionWords`], the application's words for the statuses.
//! - `facts`: [`SubscriptionRow`] and [`SubscriptionFacts`], the two sides.
//! - `judge`: [`judge_subscription`], the table of kinds, and the repair it
//!   asks for ([`SubscriptionState`]).

mod facts;
mod judge;
mod status;
mod words;

#[cfg(test)]
mod tests;

pub use facts::{Column, SubscriptionFacts, SubscriptionItem, SubscriptionRow};
pub use judge::{
    judge_subscription, SubscriptionFinding, SubscriptionJudgement, SubscriptionPolicy,
    SubscriptionState, PERIOD_SLACK,
};
pub use status::{PastDueAccess, SubscriptionStatus};
pub use words::SubscriptionWords;
