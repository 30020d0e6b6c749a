//! `reconciliation_findings`: at most one open finding per (payment, kind),
//! enforced by the partial unique index `reconciliation_findings_open`; a
//! finding about a PaymentIntent no payment points at (`missing_locally`) has
//! `payment_id` NULL and is unique per open (PaymentIntent, kind) through
//! `reconciliation_findings_open_intent`. Every resolution written is a
//! [`crate::reconcile::Resolution`], bound as a parameter.
//!
//! One file per job, all re-exported here (`store::findings::X`):
//! - `scan`: the scan's writes (record a batch's findings, the dry run's
//!   preview, resolve what a fresh answer no longer supports).
//! - `repair`: the repair guards (repairable and blocking findings, the
//!   finding locked for a command) and the writer's resolution.
//! - `review`: the review queue (`findings list`, `findings resolve`).
//! - `history`: one finding with its history, resolving many at once, and
//!   the findings a notification is owed for (docs/review.md).
//! - `intents`: findings about a PaymentIntent with no payment.

mod history;
mod intents;
mod repair;
mod review;
mod scan;

pub use history::{
    find, history, lock_named, mark_notified, not_notified, resolve_many, HistoryEntry,
    NamedFinding,
};
pub use intents::{
    open_for_intents, resolve_stale_for_intents, upsert_open_for_intents, NewIntentFinding,
    NO_LOCAL_ROW,
};
pub use repair::{blocked_payments, lock_for_repair, open_repairable, resolve, FindingForRepair};
pub use review::{count, list, resolve_manually, FindingView};
pub use scan::{
    not_yet_open, resolve_deleted, resolve_stale, upsert_open, CreatedFinding, NewFinding,
};
