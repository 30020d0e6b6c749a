//! What the outbox worker is given and what it reports: [`RepairOptions`]
//! (the outbox, the chunk, the attempts, the checks' settings) and
//! [`RepairReport`].

use serde::Serialize;

use crate::config::{ColumnName, OutboxSettings, TimestampZone};
use crate::facts::SubscriptionTable;

/// The worker's limits and the outbox it drains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairOptions {
    /// `RECONCILER_OUTBOX_TABLE`/`RECONCILER_OUTBOX_SHAPE`; only a
    /// `reconciler`-shaped outbox is drained.
    pub outbox: OutboxSettings,
    /// Commands claimed per transaction.
    pub chunk: i64,
    /// Failed attempts after which a command is left for a person.
    pub max_attempts: i32,
    /// `RECONCILER_CHECKOUT_SESSION_COLUMN`: a command for a payment judged
    /// by its Checkout Session is applied only while the payment still
    /// names that session (docs/checkout-sessions.md); without it such a command is skipped.
    pub checkout_session_column: Option<ColumnName>,
    /// `RECONCILER_TIMESTAMP_ZONE`: the canonical writer's `updated_at =
    /// now()` is stored in this zone when `payments.updated_at` is a
    /// `timestamp without time zone` (each transaction's `TimeZone` is set
    /// to it, `SET LOCAL`); an instant (`timestamptz`) is unaffected.
    pub timestamp_zone: TimestampZone,
    /// The subscriptions table as checked at start, when
    /// `RECONCILER_SUBSCRIPTIONS_TABLE` is set: `ApplySubscriptionState`
    /// commands are drained too (docs/findings.md).
    pub subscriptions: Option<SubscriptionTable>,
}

/// Failed attempts after which a command is left for a person.
pub const MAX_ATTEMPTS: i32 = 5;

impl Default for RepairOptions {
    fn default() -> Self {
        RepairOptions {
            outbox: OutboxSettings::default(),
            chunk: 100,
            max_attempts: MAX_ATTEMPTS,
            checkout_session_column: None,
            timestamp_zone: TimestampZone::default(),
            subscriptions: None,
        }
    }
}

/// What a drain did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RepairReport {
    /// Commands that changed a payment's status.
    pub applied: u64,
    /// Commands that found the payment already moved (processed, no change).
    pub no_op: u64,
    /// Commands whose finding was already resolved (by a person, or cleared by
    /// a scan): processed without touching the payment.
    pub skipped: u64,
    /// Attempts that failed in this drain (the commands stay in the outbox).
    pub failed: u64,
    /// Commands at `max_attempts`, left for a person (after this drain).
    pub stuck: i64,
}
