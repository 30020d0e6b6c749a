//! The subscriptions scan (`stripe-reconciler run --object subscriptions`,
//! docs/subscriptions.md), whole: the application's subscriptions table
//! walked by its own cursor against Stripe Subscriptions, with the payments
//! scan's phases, grace window, UNVERIFIABLE rule and write-refused
//! isolation; classification is [`crate::reconcile::subscription`].
//!
//! - `job`: [`SubscriptionsJob`], the [`crate::lifecycle::Job`]: lease, history row, batches, summary, figures.
//! - `groups`: [`SubscriptionGroups`], the settings groups it works with, and the job's name.
//! - `plan`: how many batches a run starts.
//! - `batch`: one batch: phase 1 (rows after the cursor) and phase 2 (Stripe).
//! - `read`: Stripe's answers by retrieve or by list, with the fallback to retrieve.
//! - `judge`: one row judged, and what phase 3 writes of it.
//! - `record`: phase 3: stamps, findings once, commands, the cursor; a refused row isolated.
//! - `status`: the job's state in `status`.
//! - `summary`: what a run did, logged and printed.
//! - `events`: the subscriptions' events feed: events read, subscriptions read again, rows judged, orphans.
//! - `events_job`: [`SubscriptionEventsJob`], the feed as a job `events` runs after the PaymentIntents' feed.

mod batch;
mod events;
mod events_job;
mod groups;
mod job;
mod judge;
mod plan;
mod read;
mod record;
mod status;
mod summary;

pub use events::FeedCounts;
pub use events_job::{events_job_name, SubscriptionEventsJob, SubscriptionEventsSummary};
pub use groups::{job_name, SubscriptionGroups, DEFAULT_JOB};
pub use job::SubscriptionsJob;
pub use status::{read_status, render_status, SubscriptionsStatus};
pub use summary::SubscriptionsSummary;
