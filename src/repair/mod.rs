//! Repairs: the canonical writer ([`writer`]), the one path that changes
//! `payments.status`, and the outbox worker ([`worker`]) that feeds it the
//! reconciler's repair commands; `repair` as a [`crate::lifecycle::Job`]
//! ([`RepairJob`]).
//!
//! - `job`: [`RepairJob`], the outbox drained through the lifecycle.
//! - [`writer`]: the canonical writer (a guarded status change and its event).
//! - [`worker`]: the drain: commands claimed in chunks, each under a savepoint.
//! - `command`: one command checked and applied (or skipped, with the reason).
//! - `error`: [`RepairError`], why a command could not be applied.
//! - `options`: [`RepairOptions`] and [`RepairReport`].

mod command;
mod error;
mod job;
mod options;
mod subscription;
pub mod worker;
pub mod writer;

pub use job::{RepairGroups, RepairJob, RepairSummary};
pub use worker::{drain, drain_with, RepairError, RepairOptions, RepairReport};
pub use writer::{
    apply, apply_payment_canceled, apply_payment_succeeded, StatusChange, WriteError, WriteOutcome,
};
