//! Where to look for the reconciliation lag on the `status` screen: which
//! payment holds it and the likely reason.

use std::borrow::Cow;
use std::time::Duration;

use chrono::Utc;

use super::Status;
use crate::store::stats::LagHolder;
use crate::terminal::{human_duration, shorten_or_dash, shown};

/// Where to look for the lag: which payment holds it and the likely reason.
pub(super) fn lines(h: &LagHolder, st: &Status, grace: Duration) -> Vec<(&'static str, String)> {
    let now = st.database_now;
    let ago = |t: chrono::DateTime<Utc>| human_duration((now - t).num_seconds() as f64);
    let mut lines = vec![(
        "  held by payment",
        format!(
            "{} (order {}, {}, local {})",
            h.payment_id,
            shorten_or_dash(h.order_id.as_deref()),
            h.stripe_payment_intent_id
                .as_deref()
                .map_or(Cow::Borrowed("no PaymentIntent id"), shown),
            h.status.as_deref().map_or(Cow::Borrowed("NULL"), shown)
        ),
    )];
    lines.push((
        "  last confirmed with Stripe",
        h.last_reconciled_at.map_or_else(
            || format!("never (created {} ago)", ago(h.created_at)),
            |t| format!("{} ago", ago(t)),
        ),
    ));
    lines.push(("  why", why(h, st, grace)));
    if let (Some(id), Some(kind)) = (h.open_finding_id, &h.open_finding_kind) {
        lines.push((
            "  its open finding",
            format!(
                "{id} {} (stripe-reconciler findings list --kind {})",
                shown(kind),
                shown(kind)
            ),
        ));
    }
    if let Some(e) = &h.repair_last_error {
        lines.push(("  its repair's last error", shown(e).into_owned()));
    }
    lines
}

/// The likely reason the row holds the lag, from what is recorded, never a
/// guess that sends an operator after errors that did not happen: in
/// steady state the holder is the row the cursor reaches next, confirmed
/// in an earlier cycle; only a recorded streak in
/// `reconciliation_unverifiable` says Stripe gave no answer for it.
fn why(h: &LagHolder, st: &Status, grace: Duration) -> String {
    let now = st.database_now;
    let cursor = st.cursor_position;
    let confirmed_this_cycle = match (h.last_reconciled_at, st.cycle_age_seconds) {
        (Some(t), Some(age)) => ((now - t).num_seconds() as f64) <= age,
        _ => false,
    };
    let changed_secs = (now - h.updated_at).num_seconds().max(0);
    if changed_secs < grace.as_secs() as i64 {
        return format!(
            "changed {} ago, within RECONCILER_GRACE_SECONDS ({}s): in_flight, not sent to Stripe until the grace passes",
            human_duration(changed_secs as f64),
            grace.as_secs()
        );
    }
    if confirmed_this_cycle {
        return "confirmed in this cycle: the lag is the normal time between two visits of the cursor"
            .to_owned();
    }
    if let Some(cycles) = h.unverifiable_cycles {
        return format!(
            "Stripe gave no definitive answer for it in {cycles} consecutive cycle(s) (unverifiable: timeout, 429, 5xx; last error: {}); see the run logs for payment_id={}",
            h.unverifiable_last_error.as_deref().map_or(Cow::Borrowed("none recorded"), shown),
            h.payment_id
        );
    }
    // Ids only grow along an integer walk; other keys cannot be placed
    // beside the cursor here.
    let at_start = st.cursor_key.is_none();
    let ahead = at_start || h.payment_id.as_i64().is_some_and(|id| id > cursor);
    let placed = at_start || h.payment_id.as_i64().is_some();
    let position = st
        .cursor_key
        .as_deref()
        .map_or(Cow::Borrowed("the cycle's start"), |k| {
            Cow::Owned(format!("id {}", shown(k)))
        });
    match (h.last_reconciled_at.is_some(), ahead, placed) {
        (true, true, _) => format!(
            "confirmed in an earlier cycle, not reached yet in this one (cursor at {position}): the normal time between two visits of the cursor; no Stripe error recorded for it"
        ),
        (false, true, _) => {
            format!("never confirmed, not reached yet in this cycle (cursor at {position})")
        }
        (_, false, false) => "not reached yet in this cycle, or passed in it while changed within RECONCILER_GRACE_SECONDS; no Stripe error recorded for it".to_owned(),
        (_, false, true) => format!(
            "passed in this cycle without being confirmed, no Stripe error recorded for it (changed within RECONCILER_GRACE_SECONDS when read, or its write refused); the next cycle reads it again (cursor at {position})"
        ),
    }
}
