//! Phase 2 of a subscriptions batch: Stripe's answer for each row to ask,
//! by retrieve or by list (docs/subscriptions.md, "Read modes"). List mode
//! splits the batch's rows, by connected account and by `created`, into
//! windows of about a page each (widened by
//! `RECONCILER_LIST_WINDOW_SLACK_SECONDS` at the ends of a run of rows),
//! lists them concurrently with `status=all`, and retrieves the rows no
//! window listed — also those of a window whose list request kept failing
//! (a 4xx, or a 5xx after its retries): a refused parameter never stops
//! the run. A rejected key stops it (exit 78).

use std::collections::HashMap;

use futures::stream::{self, StreamExt};

use super::groups::SubscriptionGroups;
use super::judge::Answer;
use crate::outcome::RunError;
use crate::reconcile::subscription::SubscriptionFacts;
use crate::stripe::{AccountId, CreatedWindow, GatewayError, StripeGateway, SubscriptionId};

/// Rows a list window holds at most (one page of Stripe's).
const WINDOW_ROWS: usize = 100;

/// How far a run's newest window reaches past its newest row, seconds (at
/// most the slack): a list is read newest first, so everything created
/// there is paged through before the window's own rows.
const NEWER_SLACK_SECONDS: i64 = 60;

/// One row to ask Stripe about.
#[derive(Debug, Clone)]
pub struct Ask {
    /// Its subscription.
    pub id: SubscriptionId,
    /// Its connected account (`None`: the platform's own).
    pub account: Option<AccountId>,
    /// Its `created`, epoch seconds (list windows; `None`: retrieve).
    pub created: Option<i64>,
}

/// Stripe's answers, in the order of the asks, and how many rows were
/// retrieved because their list request failed.
pub struct Answers {
    /// One per ask.
    pub answers: Vec<Answer>,
    /// Rows retrieved after their window's list request failed.
    pub fallbacks: u64,
}

/// Asks Stripe about `asks`, by list when `list` (else by retrieve).
///
/// # Errors
/// [`RunError::StripeRejected`] for a rejected key or a base that is not
/// Stripe's API; [`RunError::StripeDown`] when no read of a batch got an
/// answer.
pub async fn ask(
    gateway: &StripeGateway,
    groups: &SubscriptionGroups<'_>,
    asks: &[Ask],
    list: bool,
) -> Result<Answers, RunError> {
    let mut answers: Vec<Option<Answer>> = asks.iter().map(|_| None).collect();
    let mut fallbacks = 0;
    if list {
        let listed = list_windows(gateway, groups, asks).await?;
        for (i, listed) in listed {
            match listed {
                Listed::Found(facts) => answers[i] = Some(Answer::Found(facts)),
                Listed::WindowFailed => fallbacks += 1,
            }
        }
    }
    let todo: Vec<usize> = (0..asks.len()).filter(|&i| answers[i].is_none()).collect();
    let in_flight = groups.stripe.max_in_flight.max(1) as usize;
    let retrieved: Vec<(usize, Result<Answer, RunError>)> = stream::iter(todo)
        .map(|i| async move { (i, retrieve(gateway, &asks[i]).await) })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    for (i, answer) in retrieved {
        answers[i] = Some(answer?);
    }
    let answers: Vec<Answer> = answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Answer::Unverifiable("not asked".into())))
        .collect();
    let failed = answers
        .iter()
        .filter(|a| matches!(a, Answer::Unverifiable(_)))
        .count();
    if failed >= 3 && failed == answers.len() {
        return Err(RunError::StripeDown {
            failed,
            asked: answers.len(),
        });
    }
    Ok(Answers { answers, fallbacks })
}

/// A fault of the configuration rather than of one row: the run stops.
fn fatal(e: &GatewayError) -> bool {
    matches!(
        e,
        GatewayError::Rejected { .. }
            | GatewayError::Misconfigured { .. }
            | GatewayError::Redirected { .. }
    )
}

async fn retrieve(gateway: &StripeGateway, ask: &Ask) -> Result<Answer, RunError> {
    match gateway.subscription_on(ask.account.as_ref(), &ask.id).await {
        Ok(s) => Ok(Answer::Found(s.facts)),
        Err(GatewayError::NotFound { .. }) => Ok(Answer::Missing),
        Err(e) if fatal(&e) => Err(RunError::StripeRejected(e)),
        Err(e) => Ok(Answer::Unverifiable(e.to_string())),
    }
}

/// What a list window said of one row.
enum Listed {
    Found(SubscriptionFacts),
    WindowFailed,
}

/// A window to list: an account, a `created` range and the asks in it.
struct Window {
    account: Option<AccountId>,
    range: CreatedWindow,
    members: Vec<usize>,
}

/// The windows of `asks` with a `created`: per account, sorted by
/// `created`, a window per [`WINDOW_ROWS`] rows; consecutive windows meet
/// (no gap, no overlap); a run of rows ends where two rows are more than
/// twice the slack apart, and its ends are widened: the older by the slack,
/// the newer by at most [`NEWER_SLACK_SECONDS`] (paging stops once every
/// row of a window was listed, so only the newer end costs pages).
fn windows(asks: &[Ask], slack: i64) -> Vec<Window> {
    let mut by_account: HashMap<Option<&str>, Vec<usize>> = HashMap::new();
    for (i, a) in asks.iter().enumerate().filter(|(_, a)| a.created.is_some()) {
        by_account
            .entry(a.account.as_ref().map(AccountId::as_str))
            .or_default()
            .push(i);
    }
    let created = |i: usize| asks[i].created.unwrap_or_default();
    let mut out = Vec::new();
    for (_, mut members) in by_account {
        members.sort_by_key(|&i| created(i));
        let mut runs: Vec<Vec<usize>> = Vec::new();
        for i in members {
            match runs.last_mut() {
                Some(run)
                    if run
                        .last()
                        .is_some_and(|&l| created(i) - created(l) <= 2 * slack) =>
                {
                    run.push(i)
                }
                _ => runs.push(vec![i]),
            }
        }
        for run in runs {
            let chunks: Vec<&[usize]> = run.chunks(WINDOW_ROWS).collect();
            for (n, chunk) in chunks.iter().enumerate() {
                let gte = if n == 0 {
                    created(chunk[0]) - slack
                } else {
                    created(chunk[0])
                };
                let lte = match chunks.get(n + 1) {
                    Some(next) => created(next[0]) - 1,
                    None => created(chunk[chunk.len() - 1]) + slack.min(NEWER_SLACK_SECONDS),
                };
                out.push(Window {
                    account: asks[chunk[0]].account.clone(),
                    range: CreatedWindow {
                        gte,
                        lte: lte.max(gte),
                    },
                    members: chunk.to_vec(),
                });
            }
        }
    }
    out
}

/// What a window's list requests found, by subscription id.
type Listing = Result<HashMap<String, SubscriptionFacts>, GatewayError>;

/// Lists every window, several at once; what each said of its rows.
async fn list_windows(
    gateway: &StripeGateway,
    groups: &SubscriptionGroups<'_>,
    asks: &[Ask],
) -> Result<HashMap<usize, Listed>, RunError> {
    let slack = i64::try_from(groups.scan.list_window_slack.as_secs()).unwrap_or(i64::MAX / 4);
    let cap = groups.scan.list_page_cap();
    let in_flight = groups.stripe.max_in_flight.max(1) as usize;
    let results: Vec<(Window, Listing)> = stream::iter(windows(asks, slack))
        .map(|w| async move {
            let wanted: Vec<&str> = w.members.iter().map(|&i| asks[i].id.as_str()).collect();
            let listed = list_window(gateway, &w, &wanted, cap).await;
            (w, listed)
        })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    let mut out = HashMap::new();
    for (window, listed) in results {
        match listed {
            Ok(found) => {
                for i in window.members {
                    if let Some(facts) = found.get(asks[i].id.as_str()) {
                        out.insert(i, Listed::Found(facts.clone()));
                    }
                }
            }
            Err(e) if fatal(&e) => return Err(RunError::StripeRejected(e)),
            Err(e) => {
                tracing::warn!(error = %e, gte = window.range.gte, lte = window.range.lte, rows = window.members.len(), "a subscriptions list request failed; its rows are retrieved one by one");
                for i in window.members {
                    out.insert(i, Listed::WindowFailed);
                }
            }
        }
    }
    Ok(out)
}

/// One window's pages (at most `cap`, and none after every id of `wanted`
/// was listed), newest first: the subscriptions listed, by id. Items Stripe
/// could not describe are left out (their rows are retrieved).
async fn list_window(
    gateway: &StripeGateway,
    w: &Window,
    wanted: &[&str],
    cap: u32,
) -> Result<HashMap<String, SubscriptionFacts>, GatewayError> {
    let mut found = HashMap::new();
    let mut after: Option<SubscriptionId> = None;
    for _ in 0..cap.max(1) {
        let page = gateway
            .list_subscriptions_on(w.account.as_ref(), w.range, after.as_ref())
            .await?;
        for (id, item) in page.items {
            if let Ok(s) = item {
                found.insert(id.as_str().to_owned(), s.facts);
            }
        }
        let all_found = wanted.iter().all(|id| found.contains_key(*id));
        match page.next_after {
            Some(next) if !all_found => after = Some(next),
            _ => break,
        }
    }
    Ok(found)
}
