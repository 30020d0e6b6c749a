//! Phase 2, shared by the scan and the events job: asking Stripe about
//! `payments` rows with no transaction open, and judging the answers.
//!
//! - [`accounts`]: Connect: a row's Stripe account, the fair order across accounts, per-account checks.
//! - [`detect`]: one observation per row (retrieve or list), the wrong-account check.
//! - `groups`: [`ReadGroups`], the settings groups a read works with.
//! - [`list`]: list mode: the batch's PaymentIntents and Checkout Sessions by `created` window pages.
//! - `observation`: [`Observation`], one row's outcome of phase 2.
//! - `row`: one row's read (a list page's item or a retrieve on its account) and verdict.
//! - `session_key`: which rows are judged by their Checkout Session.
//! - `session_row`: a row judged by its Checkout Session (no PaymentIntent id).
//! - [`outage`]: the outage rule: Stripe down for most of a batch, and its probe.
//! - [`verdicts`]: rows per verdict.

pub mod accounts;
pub mod detect;
mod groups;
pub mod list;
mod observation;
pub mod outage;
mod row;
mod session_key;
mod session_row;
pub mod verdicts;

pub use detect::{observe_all, observe_batch, Observation, Observed, Pacing, CONNECT_HINT};
pub use groups::ReadGroups;
pub use outage::{stripe_reachable, STRIPE_DOWN_MIN_READS};
pub use session_key::session_of;
pub use verdicts::VerdictCounts;
