//! Phase 2 of a batch: ask Stripe about each row, outside any transaction,
//! at most `max_in_flight` reads at a time, results in the rows' order.

use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Utc};

use crate::config::JobSettings;
use futures::{StreamExt, TryStreamExt};
use sqlx::PgPool;
use tokio::sync::{oneshot, OnceCell, Semaphore};

use super::list::{list_batch, Listed};
use crate::config::ReadMode;
use crate::outcome::RunError;
use crate::reconcile::{
    classify, Decision, ExternalStatus, FindingKind, LocalPayment, LocalStatus, PaymentIntentFacts,
    Verdict,
};
use crate::store::payments::{self, PaymentRow};
use crate::stripe::{GatewayError, PaymentIntentId, StripeGateway};

/// When this many reads of a batch answered 404 and none found a
/// PaymentIntent, the key may belong to another account or mode (test vs
/// live), or a Connect account header is missing. The gateway then re-reads a
/// PaymentIntent this job verified before: if Stripe no longer knows it, the
/// key is wrong and the run stops as a configuration error after these few
/// reads, instead of recording every payment as `missing_externally`. If it
/// is found, the 404s are genuine findings. With no PaymentIntent verified
/// before (a new install), the batch stops only when every read of it was a
/// 404 (and at least this many).
pub const WRONG_ACCOUNT_NOT_FOUND_READS: usize = 10;

/// What re-reading a known PaymentIntent said about the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyCheck {
    /// A PaymentIntent verified before was found: the key is right.
    Confirmed,
    /// It is unknown to Stripe with this key: wrong account or mode.
    Wrong,
    /// Nothing to re-read, or Stripe did not answer.
    Unknown,
}

/// One row's outcome of phase 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// `payments.id`
    pub payment_id: i64,
    /// `payments.version` as read in phase 1.
    pub version: i64,
    /// `payments.updated_at` as read in phase 1.
    pub updated_at: DateTime<Utc>,
    /// `payments.status` as read in phase 1.
    pub local: LocalStatus,
    /// The row's PaymentIntent id when it is well-formed (repair commands
    /// carry it).
    pub payment_intent: Option<String>,
    /// What to do about it.
    pub decision: Decision,
    /// Stripe's status when Stripe was actually asked and answered; only these
    /// rows get `last_reconciled_at`.
    pub observed: Option<ExternalStatus>,
    /// A request was sent to Stripe for this row.
    pub asked_stripe: bool,
    /// Why the row is UNVERIFIABLE (the last error), for the
    /// `persistently_unverifiable` finding.
    pub error: Option<String>,
}

impl Observation {
    /// Demotes a row that changed since phase 1 to IN_FLIGHT: nothing is
    /// written for it, the next cycle looks again.
    pub fn changed_meanwhile(&mut self) {
        self.decision = Decision::plain(Verdict::InFlight);
        self.observed = None;
    }
}

#[derive(Default)]
struct Tally {
    found: AtomicUsize,
    not_found: AtomicUsize,
    key: OnceCell<KeyCheck>,
}

async fn check_key(
    pool: &PgPool,
    gateway: &StripeGateway,
    partition: Option<&crate::config::Partition>,
) -> KeyCheck {
    let known = match payments::a_verified_payment_intent(pool, partition).await {
        Ok(Some(id)) => id,
        Ok(None) => return KeyCheck::Unknown,
        Err(e) => {
            tracing::warn!(error = %e, "cannot look up a verified PaymentIntent to check the key");
            return KeyCheck::Unknown;
        }
    };
    let Ok(id) = PaymentIntentId::parse(&known) else {
        return KeyCheck::Unknown;
    };
    match gateway.payment_intent_status(&id).await {
        Ok(_) => KeyCheck::Confirmed,
        Err(GatewayError::NotFound { .. }) => {
            tracing::error!(payment_intent = %id, "a PaymentIntent this job verified before is unknown to Stripe with this key");
            KeyCheck::Wrong
        }
        Err(_) => KeyCheck::Unknown,
    }
}

/// How one batch's reads share the run with the batches around it.
#[derive(Debug)]
pub struct Pacing<'a> {
    /// Every Stripe request holds one of these permits
    /// (`RECONCILER_MAX_IN_FLIGHT` for the whole run).
    pub in_flight: &'a Semaphore,
    /// Fired (or dropped) once every read of the batch has been started: the
    /// next batch may then start its own, so the rate limiter never waits
    /// for a batch's last answers.
    pub all_started: Option<oneshot::Sender<()>>,
}

/// Phase 2's outcome for one batch.
#[derive(Debug)]
pub struct Observed {
    /// One observation per row, in the rows' order.
    pub observations: Vec<Observation>,
    /// List requests answered (list mode).
    pub pages: usize,
    /// List requests that failed after retries: failed reads for the outage rule.
    pub failed_pages: usize,
}

/// Observes every row and returns the observations in the rows' order. Rows in
/// the grace window and rows whose id is not a PaymentIntent id are decided
/// without a request. Reads complete in any order (a slow retry does not hold
/// up the others) and are put back in row order at the end.
///
/// Rows are classified with the settings' rules against `now`, the run's
/// clock for the aging findings. Reads follow `settings.read_mode`; every
/// row is treated as one of the cursor's rows (see [`observe_batch`]).
///
/// # Errors
/// [`RunError::StripeRejected`] (401/403 or Stripe's "Unrecognized request
/// URL") and [`RunError::StripeWrongAccount`] stop the batch at once; every
/// other failure becomes a verdict.
pub async fn observe_all(
    pool: &PgPool,
    gateway: &StripeGateway,
    rows: Vec<PaymentRow>,
    settings: &JobSettings,
    now: DateTime<Utc>,
) -> Result<Vec<Observation>, RunError> {
    let in_flight = Semaphore::new((settings.max_in_flight as usize).max(1));
    let pacing = Pacing {
        in_flight: &in_flight,
        all_started: None,
    };
    observe_batch(pool, gateway, rows, i64::MIN, settings, now, pacing)
        .await
        .map(|o| o.observations)
}

/// [`observe_all`] for one batch whose cursor was at `cursor_from`: in list
/// mode the window is set by the rows after it (rows behind it, late commits,
/// fall back to retrieves unless a page contains them). Every Stripe request
/// holds a permit of `in_flight` (shared by overlapping batches, so the run
/// never has more than `RECONCILER_MAX_IN_FLIGHT` requests open).
///
/// # Errors
/// As [`observe_all`].
pub async fn observe_batch(
    pool: &PgPool,
    gateway: &StripeGateway,
    rows: Vec<PaymentRow>,
    cursor_from: i64,
    settings: &JobSettings,
    now: DateTime<Utc>,
    pacing: Pacing<'_>,
) -> Result<Observed, RunError> {
    let Pacing {
        in_flight,
        all_started,
    } = pacing;
    let all_started = std::sync::Mutex::new(all_started);
    let last = rows.len().saturating_sub(1);
    let tally = Tally::default();
    let mut listed = Listed::default();
    if settings.read_mode == ReadMode::List {
        let ids: Vec<Option<PaymentIntentId>> = rows
            .iter()
            .map(|r| {
                (!r.recently_changed)
                    .then(|| {
                        PaymentIntentId::parse(r.stripe_payment_intent_id.as_deref().unwrap_or(""))
                            .ok()
                    })
                    .flatten()
            })
            .collect();
        let to_read: Vec<(&PaymentRow, &PaymentIntentId)> = rows
            .iter()
            .zip(&ids)
            .filter_map(|(r, id)| Some((r, id.as_ref()?)))
            .collect();
        listed = list_batch(
            gateway,
            &to_read,
            cursor_from,
            settings,
            in_flight,
            &all_started,
        )
        .await?;
    }
    let found = &listed.found;
    let mut observed: Vec<(usize, Observation)> =
        futures::stream::iter(rows.into_iter().enumerate())
            .map(|(index, row)| {
                if index == last {
                    if let Some(started) =
                        all_started.lock().unwrap_or_else(|p| p.into_inner()).take()
                    {
                        let _ = started.send(());
                    }
                }
                let tally = &tally;
                let from_list = row
                    .stripe_payment_intent_id
                    .as_deref()
                    .and_then(|id| found.get(id))
                    .and_then(|f| f.as_ref().ok())
                    .cloned();
                async move {
                    observe(
                        pool, gateway, row, settings, now, tally, from_list, in_flight,
                    )
                    .await
                    .map(|o| (index, o))
                }
            })
            .buffer_unordered((settings.max_in_flight as usize).max(1))
            .try_collect()
            .await?;
    observed.sort_unstable_by_key(|(index, _)| *index);
    let asked = observed.iter().filter(|(_, o)| o.asked_stripe).count();
    let not_found = tally.not_found.load(Ordering::Relaxed);
    if asked >= WRONG_ACCOUNT_NOT_FOUND_READS
        && not_found == asked
        && tally.key.get() != Some(&KeyCheck::Confirmed)
    {
        return Err(RunError::StripeWrongAccount { not_found });
    }
    Ok(Observed {
        observations: observed.into_iter().map(|(_, o)| o).collect(),
        pages: listed.pages,
        failed_pages: listed.failed_pages,
    })
}

/// One row: `from_list` is its PaymentIntent as a list page contained it
/// (no request then); otherwise it is retrieved.
#[allow(clippy::too_many_arguments)]
async fn observe(
    pool: &PgPool,
    gateway: &StripeGateway,
    row: PaymentRow,
    settings: &JobSettings,
    now: DateTime<Utc>,
    tally: &Tally,
    from_list: Option<PaymentIntentFacts>,
    in_flight: &Semaphore,
) -> Result<Observation, RunError> {
    let mut seen = Observation {
        payment_id: row.id,
        version: row.version,
        updated_at: row.updated_at,
        local: row.status.clone(),
        payment_intent: None,
        decision: Decision::plain(Verdict::InFlight),
        observed: None,
        asked_stripe: false,
        error: None,
    };
    if row.recently_changed {
        return Ok(seen);
    }
    let id = match PaymentIntentId::parse(row.stripe_payment_intent_id.as_deref().unwrap_or("")) {
        Ok(id) => id,
        Err(reason) => {
            tracing::warn!(payment_id = row.id, %reason, "payment has a malformed PaymentIntent id; not sent to Stripe");
            seen.decision = Decision::review(FindingKind::InvalidPaymentIntentId);
            return Ok(seen);
        }
    };
    seen.payment_intent = Some(id.as_str().to_owned());
    seen.asked_stripe = true;
    let read = match from_list {
        Some(facts) => Ok(facts),
        None => {
            let _permit = in_flight.acquire().await;
            gateway.payment_intent(&id).await
        }
    };
    match read {
        Ok(facts) => {
            tally.found.fetch_add(1, Ordering::Relaxed);
            let local = LocalPayment {
                status: seen.local.clone(),
                amount: row.amount,
                currency: row.currency.clone(),
                shares_payment_intent: row.shares_payment_intent,
            };
            seen.decision = classify(&local, &facts, &settings.rules, now);
            if seen.decision.verdict == Verdict::Unverifiable {
                // Stripe answered, but not enough to judge the money.
                let reason = seen
                    .decision
                    .details
                    .as_ref()
                    .and_then(|d| d.get("reason"))
                    .and_then(|r| r.as_str())
                    .unwrap_or("incomplete PaymentIntent")
                    .to_owned();
                tracing::warn!(payment_id = row.id, payment_intent = %id, %reason, "PaymentIntent unverifiable");
                seen.error = Some(reason);
            } else {
                seen.observed = Some(facts.status);
            }
        }
        Err(GatewayError::NotFound { .. }) => {
            let not_found = tally.not_found.fetch_add(1, Ordering::Relaxed) + 1;
            if not_found >= WRONG_ACCOUNT_NOT_FOUND_READS
                && tally.found.load(Ordering::Relaxed) == 0
            {
                let key = tally
                    .key
                    .get_or_init(|| check_key(pool, gateway, settings.partition.as_ref()))
                    .await;
                if *key == KeyCheck::Wrong {
                    return Err(RunError::StripeWrongAccount { not_found });
                }
            }
            seen.decision = Decision::review(FindingKind::MissingExternally);
        }
        Err(
            e @ (GatewayError::Rejected { .. }
            | GatewayError::Misconfigured { .. }
            | GatewayError::Redirected { .. }),
        ) => return Err(RunError::StripeRejected(e)),
        Err(e @ GatewayError::Unavailable { .. }) => {
            tracing::warn!(payment_id = row.id, payment_intent = %id, error = %e, "PaymentIntent unverifiable");
            seen.error = Some(e.to_string());
            seen.decision = Decision::plain(Verdict::Unverifiable);
        }
    }
    Ok(seen)
}
