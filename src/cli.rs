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
    /// Drain the outbox repair commands through the canonical writer.
    Repair,
    /// Cursor, cycle progress, lag, open findings, outbox backlog, capacity.
    Status {
        /// One JSON object instead of a screen.
        #[arg(long)]
        json: bool,
    },
    /// The review queue for findings no machine may repair.
    Findings {
        /// list or resolve
        #[command(subcommand)]
        command: FindingsCommand,
    },
}

/// `findings` subcommands.
#[derive(Debug, Subcommand)]
pub enum FindingsCommand {
    /// List findings, newest first.
    List {
        /// Only this kind (e.g. paid_locally_not_externally).
        #[arg(long)]
        kind: Option<String>,
        /// Only open (unresolved) findings.
        #[arg(long)]
        open: bool,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        /// At most this many rows.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..=100_000))]
        limit: i64,
    },
    /// Resolve one open finding by hand, recording who and why.
    Resolve {
        /// The finding's id (reconciliation_findings.id).
        id: i64,
        /// Why it is resolved (kept with the finding).
        #[arg(long)]
        note: String,
        /// Who resolves it (default: $USER).
        #[arg(long, env = "USER", default_value = "unknown")]
        by: String,
    },
}
