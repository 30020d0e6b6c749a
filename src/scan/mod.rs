//! The scan: batches over `payments` by a persistent cursor, and the run
//! loop over them. Phase 2 is [`crate::read`], phase 3's writes
//! [`crate::record`], the lease [`crate::lease`].
//!
//! - [`batch`]: one batch: phases 1 (cursor and rows) and 2 (Stripe).
//! - [`commit`]: phase 3: record, renew the lease, move the cursor; dry-run counts.
//! - [`progress`]: PURE cycle progress and its estimate.
//! - [`report`]: what a batch and a run did.
//! - `groups`: [`ScanGroups`], the settings groups the scan works with.
//! - `history`: the run's row in `reconciliation_runs`.
//! - [`plan`]: how many batches a run starts (`auto` or a number).
//! - `pipeline`: the batches of a run, overlapped so Stripe is never idle; [`RunOptions`].
//! - `job`: the scan as a [`crate::lifecycle::Job`]: history row, plan, batches, summary, state and figures.
//! - `print`: the summary logged and printed.
//! - `one`: one batch on its own: phases 1, 2 and 3 in a row.
//! - `schedule`: which batches a run starts, and where each starts.

pub mod batch;
pub mod commit;
mod groups;
mod history;
mod job;
mod one;
mod pipeline;
pub mod plan;
mod print;
pub mod progress;
pub mod report;
mod schedule;

pub use crate::lease::Lease;
pub use crate::outcome::RunError;
pub use crate::read::{detect, list, stripe_reachable, VerdictCounts};
pub use crate::record::record_observations;
pub use batch::Mode;
pub use groups::{ScanContext, ScanGroups};
pub use job::{figures, ScanJob};
pub use one::{run_batch, run_batch_until};
pub use pipeline::RunOptions;
pub use report::{BatchReport, RunSummary};
