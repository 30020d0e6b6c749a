//! The rows phase 3 writes for: which they are, locking them (demoting
//! those that changed since phase 1), and the finding each records.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use crate::config::PaymentTimes;
use crate::key::{KeyType, PaymentKey};
use crate::read::Observation;
use crate::reconcile::{acknowledgeable, classify_status};
use crate::store::findings::NewFinding;
use crate::store::payments;
use crate::store::StoreError;

/// The finding an observation records, if any. Whether a manual resolution
/// of the same drift may keep it closed is [`acknowledgeable`]'s rule: a
/// money finding standing in for status drift (a `pending` payment whose
/// PaymentIntent succeeded and was refunded) stays in the review queue until
/// its status is dealt with.
pub fn new_finding(o: &Observation) -> Option<NewFinding> {
    let kind = o.decision.kind.as_ref()?;
    let status_in_sync = o
        .observed
        .as_ref()
        .is_some_and(|external| classify_status(&o.local, external).kind.is_none());
    let acknowledgeable = acknowledgeable(kind, status_in_sync);
    Some(NewFinding {
        payment_id: o.payment_id.clone(),
        kind: kind.as_str().into_owned(),
        local_status: o.local.as_str().to_owned(),
        external_status: o.observed.as_ref().map(|s| s.as_str().to_owned()),
        details: o.decision.details.clone(),
        acknowledgeable,
        stripe_account_id: o.stripe_account.clone(),
        checkout_session_id: o.checkout_session.clone(),
        stripe_payment_intent_id: session_payment_intent(o),
    })
}

/// The PaymentIntent a finding records beside its payment: only for a row
/// judged by its Checkout Session (its own column is empty), the session's.
pub fn session_payment_intent(o: &Observation) -> Option<String> {
    o.checkout_session.as_ref().and(o.payment_intent.clone())
}

/// Phase 3 writes something for this row: a stamp, a finding, or an
/// UNVERIFIABLE count (which may become a `persistently_unverifiable` finding),
/// or the stamp of a row with nothing at Stripe to verify.
pub(super) fn writes_for(o: &Observation) -> bool {
    o.observed.is_some()
        || o.decision.kind.is_some()
        || o.unverifiable_read()
        || o.nothing_to_verify
}

/// Locks the rows phase 3 writes for (in id order) and demotes to IN_FLIGHT
/// those that changed since phase 1: a webhook that moved a payment while
/// Stripe was being asked must not produce a finding about the old status.
pub(super) async fn demote_changed_rows(
    tx: &mut sqlx::PgConnection,
    key: &KeyType,
    observations: &mut [Observation],
    times: &PaymentTimes,
) -> Result<(), StoreError> {
    let touched: Vec<&Observation> = observations.iter().filter(|o| writes_for(o)).collect();
    let ids: Vec<PaymentKey> = touched.iter().map(|o| o.payment_id.clone()).collect();
    let versions: Vec<i64> = touched.iter().map(|o| o.version).collect();
    let updated: Vec<DateTime<Utc>> = touched.iter().map(|o| o.updated_at).collect();
    let unchanged: HashSet<PaymentKey> =
        payments::lock_unchanged(tx, key, &ids, &versions, &updated, times)
            .await?
            .into_iter()
            .collect();
    for o in observations.iter_mut() {
        if writes_for(o) && !unchanged.contains(&o.payment_id) {
            tracing::info!(
                payment_id = %o.payment_id,
                "payment changed while Stripe was asked; left for the next cycle"
            );
            o.changed_meanwhile();
        }
    }
    Ok(())
}
