//! # stripe-reconciler
//!
//! A batch job that keeps a `payments` table in PostgreSQL honest against
//! Stripe PaymentIntents: it walks the whole table with a persistent cursor,
//! asks Stripe for each PaymentIntent's status, classifies every disagreement,
//! records each open finding once, and enqueues repair commands for the safe
//! ones in an outbox for the canonical writer. The design (architecture,
//! invariants, decisions and their reasons) is `docs/design.md`.
//!
//! # Layout
//!
//! - [`capacity`]: PURE capacity arithmetic (B·R, G, cycle time) and the run plan of `auto`.
//! - [`cli`]: the clap command line (the subcommands, a contract: docs/design.md).
//! - [`commands`]: one thin adapter per subcommand: its arguments, the subject module's call, the exit code.
//! - [`config`]: settings from the environment, secrets redacted: [`config::Settings`], one public field per group; a job takes the groups it uses.
//! - [`dashboard`]: PURE links to a PaymentIntent in the Stripe Dashboard (live or test).
//! - [`db`]: the connection pool and the embedded migrations.
//! - [`events`]: the events feed (`events`): missed webhooks and money with no order, a feed per connected account; its groups [`events::EventsGroups`].
//! - [`exit`]: the process exit codes.
//! - [`facts`]: what the start-up checks learned from the database ([`facts::TableFacts`]: key type, time columns, partition kind), apart from the settings.
//! - [`key`]: PURE the key of a `payments` row of any type (`PaymentKey`, `KeyType`, walk position; docs/keys.md).
//! - [`lease`]: the run lease on the cursor or the events position: take, renew, give back.
//! - [`lifecycle`]: the job abstraction and a scheduled job's command: [`lifecycle::Job`], [`lifecycle::RunContext`], one run (lease, body, summary), then summary, push, exit code; it knows no job.
//! - [`metrics`]: the run's gauges and the push to the Pushgateway.
//! - [`migrate`]: `migrate`'s steps: schema check, migrations, key columns, outbox, lookup and partition indexes.
//! - [`notify`]: posts new findings a person must see to `RECONCILER_NOTIFY_URL` after `run` and `events`.
//! - [`outcome`]: how a run ends: `RunOutcome` labels and the `RunError` that stopped it.
//! - [`preflight`]: the start-up checks of the schema and settings (exit 78 naming what to fix).
//! - [`read`]: phase 2 for scan and events: Stripe reads, list mode, the outage rule, Connect accounts; its groups [`read::ReadGroups`].
//! - [`reconcile`]: PURE classification: statuses, `Verdict`, `Decision`, `classify`, orphans.
//! - [`record`]: phase 3's write path for scan and events: stamps, findings, repair commands.
//! - [`repair`]: the canonical writer, the outbox worker, and `repair`'s [`lifecycle::Job`].
//! - [`review`]: the review loop of `findings`: list (table, JSON, CSV), show, resolve by hand (one or a file).
//! - [`scan`]: batches over the cursor (phases 1 and 3), the run plan, and the scan's [`lifecycle::Job`]; its groups [`scan::ScanGroups`].
//! - [`shutdown`]: SIGTERM/SIGINT into a cancellation token.
//! - [`status`]: the job's state for `status` and the metrics, and the `status` screen.
//! - [`subscriptions`]: the subscriptions scan (`run --object subscriptions`): the application's subscriptions table against Stripe Subscriptions, its [`lifecycle::Job`] and groups.
//! - [`store`]: all SQL, by table (a directory per table whose SQL has several jobs).
//! - [`stripe`]: the gateway boundary: HTTP client, retry rule, ids (PaymentIntent, Connect account), errors.
//! - [`telemetry`]: tracing initialisation (json or pretty).
//! - [`terminal`]: PURE escaping of stored text for human-readable output, and durations for people.
//! - [`upgrade`]: `migrate`'s removal of what earlier releases added to `payments`.

pub mod capacity;
pub mod cli;
pub mod commands;
pub mod config;
pub mod dashboard;
pub mod db;
pub mod events;
pub mod exit;
pub mod facts;
pub mod key;
pub mod lease;
pub mod lifecycle;
pub mod metrics;
pub mod migrate;
pub mod notify;
pub mod outcome;
pub mod preflight;
pub mod read;
pub use stripe_reconciler_rules as reconcile;
pub mod record;
pub mod repair;
pub mod review;
pub mod scan;
pub mod shutdown;
pub mod status;
pub mod store;
pub mod stripe;
pub mod subscriptions;
pub mod telemetry;
pub mod terminal;
pub mod upgrade;

/// The embedded migrations of `migrations/`.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!();
