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

/// The likely reason the lag holder holds it: in the grace window,
/// confirmed in this cycle (the normal lag), passed by a full cycle or in
/// this one without an answer, or not reached yet.
fn why(h: &LagHolder, st: &Status, grace: Duration) -> String {
    let (now, cursor) = (st.database_now, st.cursor_position);
    let confirmed_this_cycle = match (h.last_reconciled_at, st.cycle_age_seconds) {
        (Some(t), Some(age)) => ((now - t).num_seconds() as f64) <= age,
        _ => false,
    };
    let changed_secs = (now - h.updated_at).num_seconds().max(0);
    if changed_secs < grace.as_secs() as i64 {
        format!(
            "changed {} ago, within RECONCILER_GRACE_SECONDS ({}s): in_flight, not sent to Stripe until the grace passes",
            human_duration(changed_secs as f64),
            grace.as_secs()
        )
    } else if confirmed_this_cycle {
        "confirmed in this cycle: the lag is the normal time between two visits of the cursor"
            .to_owned()
    } else if passed_by_a_full_cycle(h, st) {
        format!(
            "a full cycle passed it without a definitive answer from Stripe (unverifiable: timeout, 429, 5xx); see the run logs for payment_id={}",
            h.payment_id
        )
    } else if h.payment_id.as_i64().is_some_and(|id| id > cursor) || st.cursor_key.is_none() {
        format!("not reached yet in this cycle (cursor at id {cursor})")
    } else if h.payment_id.as_i64().is_none() {
        format!(
            "not reached yet in this cycle, or passed without a definitive answer from Stripe; see the run logs for payment_id={}",
            h.payment_id
        )
    } else {
        format!(
            "passed in this cycle without a definitive answer from Stripe (unverifiable: timeout, 429, 5xx); see the run logs for payment_id={}",
            h.payment_id
        )
    }
}

/// A cycle completed after the row's reference time (its last confirmation,
/// else its creation): ids only grow, so that cycle's cursor went past it.
fn passed_by_a_full_cycle(h: &LagHolder, st: &Status) -> bool {
    let since = h.last_reconciled_at.unwrap_or(h.created_at);
    st.cycle_last_completed_unix
        .is_some_and(|done| done > since.timestamp_millis() as f64 / 1000.0)
}
