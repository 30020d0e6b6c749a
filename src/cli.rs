//! The command line (DESIGN.md, Interface). Settings come from the
//! environment, not from flags.

use clap::{Parser, Subcommand};

/// Keeps the payments table honest against Stripe PaymentIntents.
#[derive(Debug, Parser)]
#[command(name = "stripe-reconciler", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the embedded database migrations.
    Migrate,
    /// Scan up to RECONCILER_BATCHES_PER_RUN batches (the CronJob's job).
    Run {
        /// Read and classify, print the summary, write nothing (not even the cursor).
        #[arg(long)]
        dry_run: bool,
    },
}
