//! The scan: one batch ([`batch`]) and the run loop over batches ([`run`]).

pub mod batch;
pub mod detect;
pub mod list;
pub mod progress;
pub mod report;
pub mod run;

pub use crate::lease::Lease;
pub use batch::{record_observations, run_batch, run_batch_until, stripe_reachable, Mode};
pub use report::{BatchReport, RunSummary, VerdictCounts};
pub use run::{run, RunOptions};

pub use crate::outcome::RunError;
