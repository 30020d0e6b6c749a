//! Repairs: the canonical writer ([`writer`]), the one path that changes
//! `payments.status`, and the outbox worker ([`worker`]) that feeds it the
//! reconciler's repair commands; `repair` as a [`crate::lifecycle::Job`]
//! ([`RepairJob`]).
//!
//! - `job`: [`RepairJob`], the outbox drained through the lifecycle.

mod job;
pub mod worker;
pub mod writer;

pub use job::{RepairGroups, RepairJob, RepairSummary};
pub use worker::{drain, drain_with, RepairError, RepairOptions, RepairReport};
pub use writer::{
    apply, apply_payment_canceled, apply_payment_succeeded, WriteError, WriteOutcome,
};
