//! Phase 1 of a batch of events: the rows of the PaymentIntents its events
//! name (by index lookup, this job's partition only), the orphans already
//! open, and the plan ([`super::plan`]): which rows and PaymentIntents need a
//! Stripe read.

use std::collections::HashSet;

use chrono::Utc;

use super::groups::EventsContext;
use super::plan::{self, Plan, PlanRules};
use super::summary::HOLD_BEYOND_GRACE;
use super::EventsError;
use crate::reconcile::FindingKind;
use crate::store::payments::{self, MoneyColumns, PaymentByIntent};
use crate::store::{findings, Context};
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
}

/// Phase 1: the rows, by index lookup, and the orphans already open; then
/// the plan. Events about a PaymentIntent in `handled` (read by an earlier
/// batch of the run) are left out.
pub(super) async fn look_up<'e>(
    ctx: &EventsContext<'_>,
    collapsed: &'e [PaymentIntentEvent],
    handled: &HashSet<String>,
) -> Result<Looked<'e>, EventsError> {
    let settings = ctx.settings;
    let mut named: Vec<&PaymentIntentEvent> = collapsed
        .iter()
        .filter(|e| !handled.contains(e.payment_intent.as_str()))
        .collect();
    let mut ids: Vec<&str> = named.iter().map(|e| e.payment_intent.as_str()).collect();
    let columns = MoneyColumns::of(settings.scan.schema);
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("opening the lookup")?;
    let rows =
        payments::by_payment_intents(&mut tx, &ids, settings.scan.run.grace, columns).await?;
    // A PaymentIntent whose row is another partition's: not this job's
    // to re-read, and not an orphan (it has a row).
    let elsewhere: HashSet<String> = payments::held_elsewhere(&mut tx, &ids, columns.partition)
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
    })
}
