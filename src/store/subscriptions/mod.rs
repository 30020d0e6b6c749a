//! SQL over the application's subscriptions table
//! (`RECONCILER_SUBSCRIPTIONS_TABLE`, docs/subscriptions.md) and the
//! reconciler's own rows about it. Only the configured columns are read
//! ([`crate::facts::SubscriptionTable`]); only the canonical writer
//! ([`writer`]) writes the table, and only those columns.
//!
//! - [`catalog`]: the table and its columns as the catalogue has them (start-up checks).
//! - [`index`]: the lookup index on the subscription id column.
//! - [`read`]: a batch after the cursor; the rows naming given subscriptions.
//! - [`record`]: phase 3: the rows' state, findings once, stale findings cleared.
//! - [`commands`]: `ApplySubscriptionState` in the outbox, one per row.
//! - [`writer`]: the canonical writer's compare-and-set.
//! - [`state`]: `reconciliation_subscription_state` figures for `status`.

pub mod catalog;
pub mod commands;
pub mod index;
pub mod read;
pub mod record;
pub mod state;
pub mod writer;

/// The outbox `event_type` of a subscription repair.
pub const APPLY_SUBSCRIPTION_STATE: &str = "ApplySubscriptionState";

/// Whether a finding kind is a subscription's (`subscription_…`).
pub const KIND_PREFIX: &str = "subscription_";
