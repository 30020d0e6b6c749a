//! Phase 2 of a batch: ask Stripe about each row, outside any transaction,
//! at most `max_in_flight` reads at a time, results in the rows' order.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};

use futures::{StreamExt, TryStreamExt};
use sqlx::PgPool;
use tokio::sync::{oneshot, Semaphore};

use super::accounts::{
    account_of, all_not_found_reason, check_key, round_robin, AccountKey, KeyCheck, Tally,
};
use super::groups::ReadGroups;
use super::list::{list_accounts, ListShare, ListedFacts, Listing, ToList};
use super::row::Read;
use crate::config::{ReadMode, SchemaSettings};
use crate::outcome::RunError;
use crate::reconcile::FindingKind;
use crate::store::payments::PaymentRow;
use crate::stripe::{InvalidAccountId, PaymentIntentId, StripeGateway};

pub use super::observation::{Observation, CONNECT_HINT, WRONG_ACCOUNT_NOT_FOUND_READS};

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
/// clock for the aging findings. Reads follow `settings.scan.read_mode`; every
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
    settings: &ReadGroups<'_>,
    now: DateTime<Utc>,
) -> Result<Vec<Observation>, RunError> {
    let in_flight = Semaphore::new((settings.stripe.max_in_flight as usize).max(1));
    let pacing = Pacing {
        in_flight: &in_flight,
        all_started: None,
    };
    observe_batch(pool, gateway, rows, settings, now, pacing)
        .await
        .map(|o| o.observations)
}

/// A row with its Stripe account (or why its account value is unusable),
/// and its index in the batch.
type Queued = (usize, PaymentRow, Result<AccountKey, InvalidAccountId>);

/// Fairness under the one rate limit: the rows ordered so the accounts'
/// reads go in turn ([`round_robin`]), and the index of the last one.
fn in_turn(
    rows: Vec<PaymentRow>,
    accounts: Vec<Result<AccountKey, InvalidAccountId>>,
) -> (Vec<Queued>, Option<usize>) {
    let keys: Vec<Option<&AccountKey>> = accounts.iter().map(|a| a.as_ref().ok()).collect();
    let order = round_robin(&keys);
    let last = order.last().copied();
    let mut slots: Vec<Option<(PaymentRow, Result<AccountKey, InvalidAccountId>)>> =
        rows.into_iter().zip(accounts).map(Some).collect();
    let queued = order
        .iter()
        .filter_map(|&i| slots[i].take().map(|(r, a)| (i, r, a)))
        .collect();
    (queued, last)
}

/// The wrong-account rule on the platform's own reads: at least
/// [`WRONG_ACCOUNT_NOT_FOUND_READS`], every one a 404, and the key never
/// confirmed: [`RunError::StripeWrongAccount`].
fn platform_key_fits(tallies: &HashMap<AccountKey, Tally>) -> Result<(), RunError> {
    if let Some(platform) = tallies.get(&None) {
        let asked = platform.asked.load(Ordering::Relaxed);
        if asked >= WRONG_ACCOUNT_NOT_FOUND_READS
            && platform.all_not_found()
            && platform.key.get() != Some(&KeyCheck::Confirmed)
        {
            return Err(RunError::StripeWrongAccount { not_found: asked });
        }
    }
    Ok(())
}

/// What a row's list read looks for: its PaymentIntent id, or (a row judged
/// by its Checkout Session) its session id; `None` when the row
/// needs no read or its id is malformed (decided without a request).
fn list_key(row: &PaymentRow) -> Option<(&str, Listing)> {
    if row.recently_changed {
        return None;
    }
    match super::session_key::session_of(row) {
        Some(session) => session
            .ok()
            .map(|_| (session_value(row), Listing::CheckoutSessions)),
        None => PaymentIntentId::parse(row.stripe_payment_intent_id.as_deref().unwrap_or(""))
            .ok()
            .map(|_| {
                (
                    row.stripe_payment_intent_id.as_deref().unwrap_or(""),
                    Listing::PaymentIntents,
                )
            }),
    }
}

fn session_value(row: &PaymentRow) -> &str {
    row.checkout_session_id.as_deref().unwrap_or("")
}

/// List mode: the batch's PaymentIntents and Checkout Sessions by `created`
/// window pages, per account, for the rows with a well-formed id on a
/// reachable account (the rows not found fall back to retrieves).
async fn list_first(
    share: ListShare<'_>,
    rows: &[PaymentRow],
    accounts: &[Result<AccountKey, InvalidAccountId>],
) -> Result<super::list::Listed, RunError> {
    let to_read: Vec<ToList<'_>> = rows
        .iter()
        .zip(accounts)
        .filter_map(|(r, a)| {
            let (id, listing) = list_key(r)?;
            Some((r, id, a.as_ref().ok()?, listing))
        })
        .filter(|(_, _, a, _)| {
            a.as_ref()
                .map_or(true, |a| share.gateway.accounts().unreachable(a).is_none())
        })
        .collect();
    list_accounts(share, &to_read).await
}

/// [`observe_all`] for one batch: in list mode the window is set by the
/// cursor's rows (rows behind it, late commits,
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
    settings: &ReadGroups<'_>,
    now: DateTime<Utc>,
    pacing: Pacing<'_>,
) -> Result<Observed, RunError> {
    let in_flight = pacing.in_flight;
    let all_started = std::sync::Mutex::new(pacing.all_started);
    let (accounts, tallies) = accounts_of(&rows, settings.schema);
    let share = ListShare {
        gateway,
        scan: settings.scan,
        in_flight,
        all_started: &all_started,
    };
    let listed = match settings.scan.read_mode {
        ReadMode::List => list_first(share, &rows, &accounts).await?,
        ReadMode::Retrieve => super::list::Listed::default(),
    };
    // Fairness under the one rate limit: the accounts' reads in turn.
    let (queued, last) = in_turn(rows, accounts);
    let tallies = &tallies;
    let read = Read {
        pool,
        gateway,
        schema: settings.schema,
        rules: settings.rules,
        now,
        tallies,
        in_flight,
    };
    let mut observed: Vec<(usize, Observation)> = futures::stream::iter(queued)
        .map(|(index, row, account)| {
            if Some(index) == last {
                signal_all_started(&all_started);
            }
            let from_list = found_in_list(&listed.found, &row);
            async move {
                read.observe(row, account, from_list)
                    .await
                    .map(|o| (index, o))
            }
        })
        .buffer_unordered((settings.stripe.max_in_flight as usize).max(1))
        .try_collect()
        .await?;
    observed.sort_unstable_by_key(|(index, _)| *index);
    platform_key_fits(tallies)?;
    let mut observations: Vec<Observation> = observed.into_iter().map(|(_, o)| o).collect();
    judge_connected(pool, gateway, settings.schema, tallies, &mut observations).await;
    Ok(Observed {
        observations,
        pages: listed.pages,
        failed_pages: listed.failed_pages,
    })
}

/// What the batch's list pages said about `row`'s PaymentIntent (`None`:
/// not listed, or not in a list page).
fn found_in_list(
    found: &HashMap<String, Option<ListedFacts>>,
    row: &PaymentRow,
) -> Option<ListedFacts> {
    list_key(row)
        .and_then(|(id, _)| found.get(id))
        .and_then(Option::as_ref)
        .cloned()
}

/// Tells the next batch that every read of this one has started (once).
fn signal_all_started(all_started: &std::sync::Mutex<Option<oneshot::Sender<()>>>) {
    if let Some(started) = all_started.lock().unwrap_or_else(|p| p.into_inner()).take() {
        let _ = started.send(());
    }
}

/// Each row's account (or why its stored account id is not one), and a
/// tally per valid account for the wrong-key rule.
type RowAccounts = (
    Vec<Result<AccountKey, InvalidAccountId>>,
    HashMap<AccountKey, Tally>,
);

/// The accounts of `rows` (their account column, [`account_of`]) and an
/// empty tally per account.
fn accounts_of(rows: &[PaymentRow], schema: &SchemaSettings) -> RowAccounts {
    let accounts: Vec<Result<AccountKey, InvalidAccountId>> =
        rows.iter().map(|r| account_of(r, schema)).collect();
    let tallies: HashMap<AccountKey, Tally> = accounts
        .iter()
        .filter_map(|a| a.as_ref().ok().cloned())
        .map(|a| (a, Tally::default()))
        .collect();
    (accounts, tallies)
}

/// The wrong-key rule for connected accounts: an account whose every read of
/// this batch answered 404 is unreachable when a PaymentIntent verified
/// before on it is unknown now, or (none verified) when at least
/// [`WRONG_ACCOUNT_NOT_FOUND_READS`] reads answered 404. Its rows become
/// UNVERIFIABLE with the reason, not `missing_externally`, and the run sends
/// no more reads for it.
async fn judge_connected(
    pool: &PgPool,
    gateway: &StripeGateway,
    schema: &SchemaSettings,
    tallies: &HashMap<AccountKey, Tally>,
    observations: &mut [Observation],
) {
    for (key, tally) in tallies {
        let Some(account) = key else { continue };
        if !tally.all_not_found() {
            continue;
        }
        let reads = tally.asked.load(Ordering::Relaxed);
        let wrong = match check_key(pool, gateway, schema, Some(account)).await {
            KeyCheck::Wrong => true,
            KeyCheck::Confirmed => false,
            KeyCheck::Unknown => reads >= WRONG_ACCOUNT_NOT_FOUND_READS,
        };
        if !wrong {
            continue;
        }
        let reason = all_not_found_reason(account, reads);
        gateway.accounts().mark_unreachable(account, reason.clone());
        for o in observations
            .iter_mut()
            .filter(|o| o.stripe_account.as_deref() == Some(account.as_str()))
            .filter(|o| o.decision.kind == Some(FindingKind::MissingExternally))
        {
            o.unreachable(reason.clone());
        }
    }
}
