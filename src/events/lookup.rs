//! Phase 1 of a batch of events: the rows of the PaymentIntents its events
//! name (by index lookup, this job's partition only), the orphans already
//! open, and the plan ([`super::plan`]): which rows and PaymentIntents need a
//! Stripe read.

use std::collections::HashSet;

use chrono::Utc;

use super::groups::{job_name, EventsContext};
use super::plan::{self, Plan, PlanRules};
use super::summary::HOLD_BEYOND_GRACE;
use super::EventsError;
use crate::reconcile::FindingKind;
use crate::store::payments::{self, MoneyColumns, PaymentByIntent};
use crate::store::{events_retry, findings, Context};
use crate::stripe::PaymentIntentEvent;

/// The PaymentIntents a batch of events names, their rows and what to do
/// with each: phase 1 of a batch.
pub(super) struct Looked<'e> {
    /// The events still to handle, one per PaymentIntent.
    pub(super) named: Vec<&'e PaymentIntentEvent>,
    /// Their PaymentIntent ids.
    pub(super) ids: Vec<&'e str>,
    /// Their rows in `payments` (this job's partition).
    pub(super) rows: Vec<PaymentByIntent>,
    /// What to do with each row and PaymentIntent.
    pub(super) plan: Plan,
    /// The rules the plan was made with.
    pub(super) rules: PlanRules,
    /// The newest event of each PaymentIntent already held
    /// (`reconciliation_events_retry`) that a slice named: not planned, left
    /// to the held share, which reads it by this newer event.
    pub(super) left_to_held: Vec<&'e PaymentIntentEvent>,
}

/// Phase 1: the rows, by index lookup, and the orphans already open; then
/// the plan. Events about a PaymentIntent in `handled` (read by an earlier
/// batch of the run) are left out; with `leave_held` (a slice), so are
/// those about a PaymentIntent already held ([`Looked::left_to_held`]).
pub(super) async fn look_up<'e>(
    ctx: &EventsContext<'_>,
    collapsed: &'e [PaymentIntentEvent],
    handled: &HashSet<String>,
    leave_held: bool,
) -> Result<Looked<'e>, EventsError> {
    let settings = ctx.settings;
    let mut named: Vec<&PaymentIntentEvent> = collapsed
        .iter()
        .filter(|e| !handled.contains(e.payment_intent.as_str()))
        .collect();
    let mut ids: Vec<&str> = named.iter().map(|e| e.payment_intent.as_str()).collect();
    let columns = MoneyColumns::of(settings.scan.schema, settings.scan.facts);
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("opening the lookup")?;
    let left_to_held = if leave_held {
        leave_to_held(&mut tx, &job_name(ctx), &mut named, &mut ids).await?
    } else {
        Vec::new()
    };
    let rows =
        payments::by_payment_intents(&mut tx, &ids, settings.scan.run.grace, columns).await?;
    leave_to_other_partitions(&mut tx, columns, &rows, &mut named, &mut ids).await?;
    let kind = FindingKind::MissingLocally.as_str();
    let open_orphans: HashSet<String> = findings::open_for_intents(&mut tx, &ids, &kind)
        .await?
        .into_iter()
        .collect();
    tx.commit().await.context("closing the lookup")?;
    let rules = PlanRules {
        now: Utc::now(),
        grace: settings.scan.run.grace,
        hold_limit: settings.scan.run.grace + HOLD_BEYOND_GRACE,
        orphan_metadata_key: settings.events.orphan_metadata_key.clone(),
    };
    let plan = plan::plan(&named, &rows, &open_orphans, &rules);
    Ok(Looked {
        named,
        ids,
        rows,
        plan,
        rules,
        left_to_held,
    })
}

/// Takes the events of PaymentIntents already held in `job`'s retries out of
/// `named` (and their ids out of `ids`), and returns them.
async fn leave_to_held<'e>(
    tx: &mut sqlx::PgConnection,
    job: &str,
    named: &mut Vec<&'e PaymentIntentEvent>,
    ids: &mut Vec<&'e str>,
) -> Result<Vec<&'e PaymentIntentEvent>, EventsError> {
    let held = events_retry::among(tx, job, ids).await?;
    let (left, rest) = std::mem::take(named)
        .into_iter()
        .partition(|e| held.contains(e.payment_intent.as_str()));
    *named = rest;
    ids.retain(|pi| !held.contains(*pi));
    Ok(left)
}

/// Takes the events of PaymentIntents whose row is another partition's out of
/// `named` and `ids`: not this job's to re-read, and not an orphan (it has
/// a row).
async fn leave_to_other_partitions<'e>(
    tx: &mut sqlx::PgConnection,
    columns: MoneyColumns<'_>,
    rows: &[PaymentByIntent],
    named: &mut Vec<&'e PaymentIntentEvent>,
    ids: &mut Vec<&'e str>,
) -> Result<(), EventsError> {
    let elsewhere: HashSet<String> = payments::held_elsewhere(tx, ids, columns.partition)
        .await?
        .into_iter()
        .filter(|pi| {
            !rows
                .iter()
                .any(|r| r.row.stripe_payment_intent_id.as_ref() == Some(pi))
        })
        .collect();
    if !elsewhere.is_empty() {
        tracing::info!(
            payment_intents = elsewhere.len(),
            "events name PaymentIntents whose rows are another partition's; left to that partition's job"
        );
        named.retain(|e| !elsewhere.contains(e.payment_intent.as_str()));
        ids.retain(|pi| !elsewhere.contains(*pi));
    }
    Ok(())
}
