//! [`TableFacts`]: what the start-up checks learned from the database about
//! the application's `payments` table, kept apart from the settings (what
//! the environment says). Built by [`crate::preflight::checked`] and carried
//! by each job's groups; code that skips the checks has no facts to read
//! (docs/keys.md, docs/schema.md).

mod subscriptions;

pub use subscriptions::{Column, SubscriptionTable, TimeColumn, TimeStorage};

use crate::config::{Partition, PaymentTimes};
use crate::key::KeyType;

/// What the database says about `payments`, checked at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableFacts {
    /// `payments.id`'s type and how the cycle walks it (docs/keys.md).
    pub key: KeyType,
    /// The types of `payments.created_at` and `updated_at`, with
    /// `RECONCILER_TIMESTAMP_ZONE` for the wall-clock ones.
    pub times: PaymentTimes,
    /// `RECONCILER_PARTITION_COLUMN` / `RECONCILER_PARTITION_VALUE` with the
    /// column's kind from the catalogue; `None` without a partition.
    pub partition: Option<Partition>,
    /// The subscriptions table (`RECONCILER_SUBSCRIPTIONS_TABLE`) as
    /// checked at start; `None` when the job does not read it.
    pub subscriptions: Option<SubscriptionTable>,
}

impl TableFacts {
    /// Facts stated rather than detected, for a caller that knows them
    /// (the detection is [`crate::preflight::checked`]).
    pub fn new(key: KeyType, times: PaymentTimes, partition: Option<Partition>) -> Self {
        TableFacts {
            key,
            times,
            partition,
            subscriptions: None,
        }
    }
}
