//! The integration tests, one binary by subject, on a real PostgreSQL (each
//! `#[sqlx::test]` gets a fresh database) with Stripe faked by wiremock. The
//! tests that measure arrival times (`rate_limit.rs`, `rate_limit_list.rs`,
//! `max_in_flight.rs`) are binaries of their own: cargo runs test binaries
//! one after another, so no other test's load adds jitter to them.
//!
//! - `acknowledgements`: a finding resolved by hand stays resolved while nothing that matters changes, per kind
//! - `aging`: authorization_expiring, stuck_processing, abandoned
//! - `app_table`: `migrate` never locks or alters the application's `payments`; upgrades
//! - `binary_keys`: `run` and `events` through the binary once per key type (a collated text key included)
//! - `binary_settings`: Checkout Sessions with Connect through `events`, `run` and `repair`; a scan's own findings notified as configured
//! - `binary_variables`: the aging thresholds, the unverifiable streak, the subscriptions columns and a refused subscription write, the list page cap and slack, the HTTP timeout, rate limit and in-flight bound, the events' active accounts, the schedule interval, `HOSTNAME` and `NO_COLOR` through the binary
//! - `app_table_runs`: a payment the application deletes (`payment_deleted`); a short batch ends the cycle
//! - `connect`: connected accounts (`Stripe-Account`), a revoked account, the account in `findings list`
//! - `connect_faults`: an account every read 404s, a malformed account value, no or an unusable account column
//! - `cursor`: the walk over the table, cycles, late commits, unverifiable streaks
//! - `docs`: `docs/configuration.md` lists exactly the variables the code reads; every relative link and anchor in the docs resolves
//! - `events`: the events feed and its position
//! - `events_advance`: the position never moves backwards; a list that does not advance is bounded and an error
//! - `events_held`: PaymentIntents held for another read while the position moves on
//! - `events_held_feed`: the feed leaves held PaymentIntents to the held share; the share drains
//! - `events_late`: events listed late are read within the overlap, each handled once
//! - `events_money`: refunds and disputes found through the events feed
//! - `events_orphans`: PaymentIntents without a payment row (`missing_locally`)
//! - `events_binary`: the events job through the binary: exit codes, SIGTERM, deadline, Pushgateway
//! - `events_backlog`: a backlog worked off in slices over several runs
//! - `faults`: the fault suite (signals, killed connections, Stripe down or wrong)
//! - `forced_faults`: a trigger forces a deadlock or a serialization failure once in phase 3; the binary retries and logs it
//! - `faults_batch`: faults on one batch in process (a wrong 404, a webhook mid-batch)
//! - `gateway`: each Stripe failure class, one request at a time
//! - `gateway_batch`: what a batch does with each failure class
//! - `isolation`: the tests' own Pushgateways load nothing from elsewhere
//! - `least_privilege`: `sql/least_privilege.sql` is enough and no more
//! - `keys`: any primary key: uuid and text keys through migrate, both read modes, repair,
//!   review (docs/keys.md)
//! - `keys_changes`: a late-committed row, a row whose key or `created_at` changes
//! - `keys_connect`: a partition, a connected account and the events job on a uuid table
//! - `keys_integers`: integer and smallint keys, ids ≤ 0 and near ±2^63
//! - `keys_rails`: a Rails uuid table in a stated zone walked by `(created_at, id)`: once per cycle, exact drift, late commits
//! - `list_mode`: `RECONCILER_READ_MODE=list` agrees with retrieve mode
//! - `list_mode_faults`: list mode with a rejected key, a bad page, a moved cursor
//! - `locks`: scan, repair workers and the application on the same rows
//! - `metrics`: the figures a run pushes to a real Pushgateway
//! - `migrate`: `migrate` and the migrations
//! - `migrate_leftover`: an index build that times out reports the invalid index it leaves
//! - `money`: refunds, disputes, duplicates, amount and currency checks
//! - `money_charges`: unexpanded, trimmed, partial and acknowledged charges; money proven later
//! - `money_columns`: the configured amount and currency columns
//! - `ops_cli`: the interactive commands' errors, usage errors and refusals
//! - `outbox_status`: `status` and the outbox gauges follow the configured outbox
//! - `ops`: exit codes, summaries, secrets, readable errors, log lines
//! - `plan`: `RECONCILER_BATCHES_PER_RUN` auto and fixed, the plan in `status`
//! - `partition`: one release per Stripe account on one table (`RECONCILER_PARTITION_*`)
//! - `notify`: `RECONCILER_NOTIFY_URL`: one message per new finding, retries, Slack escaping
//! - `notify_redirect`: a notification receiver that redirects has not received it
//! - `own_state`: the reconciler's own per-payment state; no writes into `payments`
//! - `partition_events`: the events job keeps to its partition
//! - `pgbouncer`: the job behind a transaction-pooling PgBouncer
//! - `pooler_competing`: every command starts on a pool of 2 shared with the application's clients
//! - `real_db`: Rails timestamps in a stated zone, a role's statement timeout, two partitions at once
//! - `real_schemas`: a table named otherwise, a view, missing columns, an ENUM status, a table partitioned by month
//! - `repair`: the canonical writer and the outbox worker
//! - `review`: the review queue (`findings list`/`resolve`)
//! - `review_loop`: differs, the CSV round trip, history (`findings show`)
//! - `review_view`: the BI view `reconciliation_review` and its read-only role
//! - `resolve_file_atomic`: `findings resolve --file` whose last (fifth) resolution a trigger refuses resolves nothing
//! - `resolve_file_lines`: `findings resolve --file` names the line an editor shows (CRLF, BOM, blank lines); a `;`-separated file
//! - `resolve_file_locks`: a 100,000-line resolution file never blocks the application's writes to `payments`
//! - `session_index`: migrate names the index that would serve lookups by Checkout Session id
//! - `scan`: one batch's verdict paths and its set-based phase 3
//! - `subscriptions_review`: subscription findings in `findings list/show/resolve --file`, the review view and `status`
//! - `subscriptions_scan`: `run --object subscriptions` and `repair` through the binary: every kind in both read modes, a refused list falling back, repairs applied once, a run refused by another's lease (exit 75, no request)
//! - `subscriptions_events`: `events` with a subscriptions table: a missed cancel and a subscription no row names, once
//! - `subscriptions_migrate`: `migrate` with a subscriptions table: exit 78 naming what does not fit, the lookup index built CONCURRENTLY per partition and kept
//! - `subscriptions_shapes`: Cashier with a word map and a multi-item subscription, a status-less uuid-keyed `users` table, `past_due` under both policies
//! - `subscriptions_common`: the subscriptions tests' fake Stripe, environment and checks
//! - `schema_doc`: docs/schema.md names everything `migrate` creates
//! - `stray_bytes`: a stray byte (a `SQL_ASCII` database) fails no batch nor listing; a NULL amount; a 1 MB order id
//! - `stops`: `run` and `repair` stopped part-way (signals, a cursor moved by another run)
//! - `status`: `status` and `status --json`
//! - `stripe_redirect`: a redirecting API base and a live key over plain http
//! - `subscription_fake`: the fake Stripe's subscriptions answer as Stripe does
//! - `terminal_output`: stored text escaped in every human-readable output
//! - `walk_list`: list mode on a uuid table without a `created_at` index walks the reconciler's own ordered copy (list pages, not retrieves)
//! - `walk_partitions`: one partition's job beside rows it never confirms: bounded sweeps behind the cursor, a cycle completed
//! - `walk_plan`: a key walk (uuid, no `created_at` index) plans its runs from the rows done
//! - `write_refused`: a row the database refuses to write does not fail its batch
//! - `writer`: the canonical writer's atomicity and its kind guard
//! - `your_schema`: the application's status words and amounts in major units
//! - `your_outbox`: the user's own outbox and ids, created before `migrate`

// Test code: a failed unwrap is a failed test (Cargo.toml [lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod acknowledgements;
mod aging;
mod app_table;
mod app_table_runs;
mod binary_keys;
mod binary_settings;
mod binary_variables;
mod checkout_sessions;
mod checkout_sessions_events;
mod connect;
mod connect_events;
mod connect_faults;
mod cursor;
mod docs;
mod events;
mod events_advance;
mod events_backlog;
mod events_binary;
mod events_held;
mod events_held_feed;
mod events_late;
mod events_money;
mod events_orphans;
mod faults;
mod faults_batch;
mod forced_faults;
mod gateway;
mod gateway_batch;
mod isolation;
mod keys;
mod keys_changes;
mod keys_connect;
mod keys_integers;
mod keys_rails;
mod least_privilege;
mod list_mode;
mod list_mode_faults;
mod locks;
mod metrics;
mod migrate;
mod migrate_leftover;
mod money;
mod money_charges;
mod money_columns;
mod notify;
mod notify_redirect;
mod ops;
mod ops_cli;
mod outbox_status;
mod own_state;
mod partition;
mod partition_events;
mod pgbouncer;
mod plan;
mod pooler_competing;
mod real_db;
mod real_schemas;
mod repair;
mod resolve_file_atomic;
mod resolve_file_lines;
mod resolve_file_locks;
mod review;
mod review_loop;
mod review_view;
mod scan;
mod schema_doc;
mod session_index;
mod status;
mod stops;
mod stray_bytes;
mod stripe_redirect;
mod subscription_fake;
mod subscriptions_common;
mod subscriptions_events;
mod subscriptions_migrate;
mod subscriptions_review;
mod subscriptions_scan;
mod subscriptions_shapes;
mod terminal_output;
mod walk_list;
mod walk_partitions;
mod walk_plan;
mod write_refused;
mod writer;
mod your_outbox;
mod your_schema;
