//! The command line (its subcommands are a contract: docs/design.md,
//! "Invariants"; every flag: docs/scan.md, "Commands"). Settings come from the
//! environment, not from flags.

use clap::{Parser, Subcommand};

use crate::dashboard::DashboardMode;

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
    Migrate {
        /// Build a UNIQUE index on payments.stripe_payment_intent_id instead of
        /// a plain one (only when no duplicates exist). This adds a constraint
        /// to the application's table: the application will no longer be able
        /// to insert a second row for one PaymentIntent (a retry, a split order).
        #[arg(long)]
        unique_payment_intent_index: bool,
    },
    /// Scan up to RECONCILER_BATCHES_PER_RUN batches (the CronJob's job).
    Run {
        /// Read and classify, print the summary, write nothing (not even the cursor).
        #[arg(long)]
        dry_run: bool,
        /// Which table to scan: payments (PaymentIntents) or subscriptions
        /// (RECONCILER_SUBSCRIPTIONS_TABLE against Stripe Subscriptions).
        #[arg(long, value_enum, default_value_t = Object::Payments)]
        object: Object,
    },
    /// Read Stripe's PaymentIntent events since the stored position and
    /// re-check each PaymentIntent named (the events CronJob's job): missed
    /// webhooks within minutes, and succeeded PaymentIntents no payment
    /// points at (missing_locally).
    Events,
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

impl Command {
    /// Whether this is a scheduled job's command (a CronJob of the chart):
    /// its failure is logged as a JSON line for the log collector, not
    /// printed for a person (docs/layout.md, "Adding a job").
    pub fn is_scheduled(&self) -> bool {
        matches!(
            self,
            Command::Run { .. } | Command::Events | Command::Repair
        )
    }
}

/// What `run` reconciles (docs/subscriptions.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Object {
    /// The `payments` table against PaymentIntents.
    #[default]
    Payments,
    /// The subscriptions table against Stripe Subscriptions.
    Subscriptions,
}

/// `findings` subcommands.
#[derive(Debug, Subcommand)]
pub enum FindingsCommand {
    /// List findings, newest first, with each PaymentIntent's Stripe Dashboard link.
    List {
        /// Only this kind (e.g. paid_locally_not_externally).
        #[arg(long)]
        kind: Option<String>,
        /// Only open (unresolved) findings.
        #[arg(long)]
        open: bool,
        /// One JSON object per line instead of a table.
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        /// CSV instead of a table: one header row, the JSON's flat fields
        /// (`differs` as differs_field, differs_local, differs_stripe) and an
        /// empty `note` column to fill in for `findings resolve --file`.
        #[arg(long)]
        csv: bool,
        /// At most this many rows, newest first; the output says when the list
        /// was cut ("showing 100 of 250").
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..=100_000))]
        limit: i64,
        /// Dashboard links in live or test mode [default: test for an
        /// sk_test_/rk_test_ STRIPE_API_KEY, else live].
        #[arg(long, value_enum, env = "RECONCILER_DASHBOARD_MODE")]
        dashboard: Option<DashboardMode>,
    },
    /// One finding with its history (detected, refreshed, resolved,
    /// reopened: who, when, note) and its Stripe Dashboard link.
    Show(ShowArgs),
    /// Resolve one open finding by hand (ID --note), or every finding a CSV
    /// names (--file), recording who and why; all or nothing.
    Resolve {
        /// The finding's id (reconciliation_findings.id).
        #[arg(required_unless_present = "file", conflicts_with = "file")]
        id: Option<i64>,
        /// Why it is resolved (kept with the finding); must not be empty.
        #[arg(long, value_parser = non_blank, required_unless_present = "file", conflicts_with = "file")]
        note: Option<String>,
        /// A CSV with a header row and the columns `id` and `note` (optional
        /// `by`; other columns are ignored, so `findings list --csv` with its
        /// `note` column filled in works): every finding it names is resolved
        /// in one transaction, or none is.
        #[arg(long)]
        file: Option<std::path::PathBuf>,
        /// With --file: print what would be resolved and change nothing.
        #[arg(long, requires = "file")]
        dry_run: bool,
        /// Who resolves it, kept with the finding [default: $USER; refused
        /// when neither is given].
        #[arg(long, env = "USER", value_parser = non_blank)]
        by: Option<String>,
    },
}

/// `findings show ID`: one finding with its history and links.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The finding's id (reconciliation_findings.id).
    pub id: i64,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Dashboard links in live or test mode [default: test for an
    /// sk_test_/rk_test_ STRIPE_API_KEY, else live].
    #[arg(long, value_enum, env = "RECONCILER_DASHBOARD_MODE")]
    pub dashboard: Option<DashboardMode>,
}

/// A value that is empty or only whitespace (clap prints it after the
/// argument's name).
#[derive(Debug, thiserror::Error)]
#[error("must not be empty")]
pub struct BlankValue;

/// Accepts a value with something other than whitespace in it, trimmed.
///
/// # Errors
/// [`BlankValue`] for an empty or all-whitespace value.
fn non_blank(value: &str) -> Result<String, BlankValue> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        Err(BlankValue)
    } else {
        Ok(trimmed.to_owned())
    }
}
