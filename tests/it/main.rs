//! The integration tests, one binary by subject, on a real PostgreSQL (each
//! `#[sqlx::test]` gets a fresh database) with Stripe faked by wiremock. The
//! tests that measure arrival times (`rate_limit.rs`, `rate_limit_list.rs`,
//! `max_in_flight.rs`) are binaries of their own: cargo runs test binaries
//! one after another, so no other test's load adds jitter to them.
//!
//! - `aging`: authorization_expiring, stuck_processing, abandoned
//! - `connect`: connected accounts (`Stripe-Account`), revoked and wrong accounts
//! - `cursor`: the walk over the table, cycles, late commits, unverifiable streaks
//! - `events`: the events feed and its position
//! - `events_backlog`: a backlog worked off in slices over several runs
//! - `faults`: the fault suite (signals, killed connections, Stripe down or wrong)
//! - `gateway`: each Stripe failure class and what a batch does with it
//! - `isolation`: the tests' own Pushgateways load nothing from elsewhere
//! - `least_privilege`: `sql/least_privilege.sql` is enough and no more
//! - `list_mode`: `RECONCILER_READ_MODE=list` agrees with retrieve mode
//! - `locks`: scan, repair workers and the application on the same rows
//! - `metrics`: the figures a run pushes to a real Pushgateway
//! - `migrate`: `migrate` and the migrations
//! - `money`: refunds, disputes, duplicates, amount and currency checks
//! - `outbox_status`: `status` and the outbox gauges follow the configured outbox
//! - `ops`: exit codes, summaries, secrets, readable errors, log lines
//! - `plan`: `RECONCILER_BATCHES_PER_RUN` auto and fixed, the plan in `status`
//! - `partition`: one release per Stripe account on one table (`RECONCILER_PARTITION_*`)
//! - `own_state`: the reconciler's own per-payment state; no writes into `payments`
//! - `pgbouncer`: the job behind a transaction-pooling PgBouncer
//! - `repair`: the canonical writer and the outbox worker
//! - `review`: the review queue (`findings list`/`resolve`)
//! - `scan`: one batch's verdict paths and its set-based phase 3
//! - `status`: `status` and `status --json`
//! - `stripe_redirect`: a redirecting API base and a live key over plain http
//! - `terminal_output`: stored text escaped in every human-readable output
//! - `write_refused`: a row the database refuses to write does not fail its batch
//! - `your_schema`: the application's status words and amounts in major units
//! - `your_outbox`: the user's own outbox and ids, created before `migrate`

// Test code: a failed unwrap is a failed test (Cargo.toml [lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod aging;
mod connect;
mod connect_events;
mod cursor;
mod events;
mod events_backlog;
mod faults;
mod gateway;
mod isolation;
mod least_privilege;
mod list_mode;
mod locks;
mod metrics;
mod migrate;
mod money;
mod ops;
mod outbox_status;
mod own_state;
mod partition;
mod pgbouncer;
mod plan;
mod repair;
mod review;
mod scan;
mod status;
mod stripe_redirect;
mod terminal_output;
mod write_refused;
mod your_outbox;
mod your_schema;
