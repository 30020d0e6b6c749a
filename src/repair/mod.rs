//! Repairs: the canonical writer ([`writer`]), the one path that changes
//! `payments.status`, and the outbox worker ([`worker`]) that feeds it the
//! reconciler's repair commands.

pub mod worker;
pub mod writer;

pub use worker::{drain, drain_with, RepairError, RepairOptions, RepairReport};
pub use writer::{
    apply, apply_payment_canceled, apply_payment_succeeded, WriteError, WriteOutcome,
};
