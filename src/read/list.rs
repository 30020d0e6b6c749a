//! Phase 2 in list mode (`RECONCILER_READ_MODE=list`): the PaymentIntents
//! created in the batch's `created_at` window, up to 100 per request, matched
//! to the batch's rows by id. A page is evidence only for the PaymentIntents it
//! contains: a row the pages did not contain is read on its own (a retrieve),
//! and only that retrieve's 404 makes it `missing_externally`.
//!
//! The window `[min(created_at), max(created_at)]` of the batch's rows after
//! the cursor is cut into sub-windows of about [`ROWS_PER_SUB_WINDOW`] rows,
//! paged concurrently (pages of one window are sequential: `starting_after`).
//! The two slack rings that widen it by `RECONCILER_LIST_WINDOW_SLACK_SECONDS`
//! on each side are listed only when the rows still unseen are at least as many
//! as the pages the ring is expected to take (from the density of the core
//! window), so a slack full of other rows' PaymentIntents never costs more
//! requests than the retrieves it saves. At most `RECONCILER_LIST_MAX_PAGES`
//! pages per batch, whatever the account holds.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use tokio::sync::{oneshot, Semaphore};

use crate::config::ScanSettings;
use crate::outcome::RunError;
use crate::reconcile::{CheckoutSessionFacts, PaymentIntentFacts};
use crate::store::payments::PaymentRow;
use crate::stripe::{
    AccountId, CheckoutSessionId, CreatedWindow, GatewayError, PaymentIntentId, StripeGateway,
    LIST_PAGE_LIMIT,
};

use super::accounts::AccountKey;

/// Rows per core sub-window: a little under a page, so a sub-window usually
/// fits one request even with a few PaymentIntents of neighbouring rows or of
/// other applications in it.
pub const ROWS_PER_SUB_WINDOW: usize = 95;

/// What a batch lists: PaymentIntents (`GET /v1/payment_intents`), or
/// Checkout Sessions (`GET /v1/checkout/sessions`) for the rows judged by
/// their session (docs/checkout-sessions.md). The same windows, pages and page cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// The rows' PaymentIntents.
    PaymentIntents,
    /// The rows' Checkout Sessions.
    CheckoutSessions,
}

/// One listed object's facts, as its row's read uses them.
#[derive(Debug, Clone)]
pub enum ListedFacts {
    /// A PaymentIntent with its latest charge.
    PaymentIntent(PaymentIntentFacts),
    /// A Checkout Session with its PaymentIntent and latest charge.
    Session(CheckoutSessionFacts),
}

/// One page: the listed objects by id (`None`: an item that could not be
/// used) and the id to page on after.
type Page = (Vec<(String, Option<ListedFacts>)>, Option<String>);

/// What the list requests of one batch found.
#[derive(Debug, Default)]
pub struct Listed {
    /// The facts of every object a page contained that one of the batch's
    /// rows names, by id (a PaymentIntent's or a Checkout Session's); `None`
    /// for an item that could not be used (its row falls back to a retrieve).
    pub found: HashMap<String, Option<ListedFacts>>,
    /// List requests whose answer arrived (after retries).
    pub pages: usize,
    /// List requests that failed after the retry budget (a failed read
    /// toward the outage rule); their windows' rows fall back to retrieves.
    pub failed_pages: usize,
}

struct Chain<'a> {
    gateway: &'a StripeGateway,
    listing: Listing,
    account: Option<&'a AccountId>,
    in_flight: &'a Semaphore,
    wanted: &'a HashSet<&'a str>,
    budget: &'a AtomicUsize,
    found: &'a Mutex<HashMap<String, Option<ListedFacts>>>,
    pages: &'a AtomicUsize,
    failed: &'a AtomicUsize,
    items: &'a AtomicUsize,
    /// Core windows whose first page has not yet been sent.
    first_pages_left: &'a AtomicUsize,
    all_started: &'a Mutex<Option<oneshot::Sender<()>>>,
}

impl Chain<'_> {
    fn take_page(&self) -> bool {
        self.budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(1)
            })
            .is_ok()
    }

    /// The connected account was found unreachable (this run): no more pages.
    fn account_unreachable(&self) -> bool {
        self.account
            .is_some_and(|a| self.gateway.accounts().unreachable(a).is_some())
    }

    fn all_found(&self, core: &HashSet<&str>) -> bool {
        let found = self.found.lock().unwrap_or_else(|p| p.into_inner());
        core.iter().all(|id| found.contains_key(*id))
    }

    /// Once the first page of every core window has its permit, the batch
    /// has no request queued that the next batch's could overtake: the next
    /// batch may start (its pages then fill the limiter while these answer).
    fn first_page_sent(&self) {
        if self.first_pages_left.fetch_sub(1, Ordering::Relaxed) == 1 {
            if let Some(started) = self
                .all_started
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
            {
                let _ = started.send(());
            }
        }
    }

    /// One page of `window` after `after`, of what this chain lists.
    async fn page(&self, window: CreatedWindow, after: Option<&str>) -> Result<Page, GatewayError> {
        match self.listing {
            Listing::PaymentIntents => {
                let after = after.and_then(|a| PaymentIntentId::parse(a).ok());
                let page = self
                    .gateway
                    .list_payment_intents_on(self.account, window, after.as_ref())
                    .await?;
                let items = page.items.into_iter().map(|i| {
                    let facts = i.facts.ok().map(ListedFacts::PaymentIntent);
                    (i.id.as_str().to_owned(), facts)
                });
                let next = page.next_after.map(|id| id.as_str().to_owned());
                Ok((items.collect(), next))
            }
            Listing::CheckoutSessions => {
                let after = after.and_then(|a| CheckoutSessionId::parse(a).ok());
                let page = self
                    .gateway
                    .list_checkout_sessions_on(self.account, window, after.as_ref())
                    .await?;
                let items = page.items.into_iter().map(|i| {
                    let facts = i.facts.ok().map(ListedFacts::Session);
                    (i.id.as_str().to_owned(), facts)
                });
                let next = page.next_after.map(|id| id.as_str().to_owned());
                Ok((items.collect(), next))
            }
        }
    }

    /// Pages `window` until its end, the page budget, or (with `until_found`)
    /// until every id of `until_found` was seen. A core window (`core_window`)
    /// counts its first page toward [`Chain::first_page_sent`].
    async fn run(
        &self,
        window: CreatedWindow,
        until_found: Option<&HashSet<&str>>,
        core_window: bool,
    ) -> Result<(), RunError> {
        let mut after: Option<String> = None;
        let mut first = core_window;
        loop {
            if until_found.is_some_and(|core| self.all_found(core))
                || self.account_unreachable()
                || !self.take_page()
            {
                if first {
                    self.first_page_sent();
                }
                return Ok(());
            }
            let page = {
                let _permit = self.in_flight.acquire().await;
                if std::mem::take(&mut first) {
                    self.first_page_sent();
                }
                self.page(window, after.as_deref()).await
            };
            match page {
                Ok((items, next_after)) => {
                    self.pages.fetch_add(1, Ordering::Relaxed);
                    self.items.fetch_add(items.len(), Ordering::Relaxed);
                    {
                        let mut found = self.found.lock().unwrap_or_else(|p| p.into_inner());
                        for (id, facts) in items {
                            if self.wanted.contains(id.as_str()) {
                                found.insert(id, facts);
                            }
                        }
                    }
                    match next_after {
                        Some(next) => after = Some(next),
                        None => return Ok(()),
                    }
                }
                Err(e) if e.is_rejected() => return Err(RunError::StripeRejected(e)),
                Err(e @ GatewayError::AccountUnreachable { .. }) => {
                    // Remembered by the gateway: the rows' retrieves are not sent.
                    tracing::warn!(error = %e, "list page refused: connected account unreachable");
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!(gte = window.gte, lte = window.lte, error = %e, "list page failed; the window's rows not yet seen are read one by one");
                    self.failed.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
            }
        }
    }
}

/// The core sub-windows: `times` (sorted Unix seconds of the rows' `created_at`)
/// cut into contiguous, non-overlapping windows of equal row counts, about
/// [`ROWS_PER_SUB_WINDOW`] rows each but never more windows than `max_pages`,
/// that together cover `[times[0], times[last]]`.
pub fn sub_windows(times: &[i64], max_pages: usize) -> Vec<CreatedWindow> {
    let (Some(&lo), Some(&hi)) = (times.first(), times.last()) else {
        return Vec::new();
    };
    let windows = times
        .len()
        .div_ceil(ROWS_PER_SUB_WINDOW)
        .clamp(1, max_pages.max(1));
    let per_window = times.len().div_ceil(windows);
    let mut starts: Vec<i64> = vec![lo];
    for chunk in times.chunks(per_window).skip(1) {
        if chunk[0] > *starts.last().unwrap_or(&lo) {
            starts.push(chunk[0]);
        }
    }
    starts
        .iter()
        .enumerate()
        .map(|(i, &gte)| CreatedWindow {
            gte,
            lte: starts.get(i + 1).map_or(hi, |next| next - 1),
        })
        .collect()
}

/// What a batch's list requests share with its other reads: the gateway,
/// the scan's list settings, the in-flight permits (`RECONCILER_MAX_IN_FLIGHT` for the
/// run) and the signal that every read of the batch has started.
#[derive(Clone, Copy)]
pub struct ListShare<'a> {
    /// The run's gateway.
    pub gateway: &'a StripeGateway,
    /// `RECONCILER_LIST_WINDOW_SLACK_SECONDS` and the page cap.
    pub scan: &'a ScanSettings,
    /// Every Stripe request holds one of these permits.
    pub in_flight: &'a Semaphore,
    /// Fired once every read of the batch has started.
    pub all_started: &'a Mutex<Option<oneshot::Sender<()>>>,
}

/// Lists the batch's window and returns what it found for `rows`. The
/// cursor's rows (not [`PaymentRow::behind_cursor`]) set the window; rows behind the
/// cursor are matched when a page happens to contain them and otherwise fall
/// back to retrieves (their `created_at` may be anywhere). `rows` are the
/// rows that need a read (out of the grace window, well-formed id).
///
/// `account` is the Stripe account listed (`None`: the platform's own);
/// `listing` what is listed (the rows' ids are of that kind); `page_cap`
/// the pages this call may send.
///
/// # Errors
/// [`RunError::StripeRejected`] on 401/403 or Stripe's "Unrecognized request
/// URL"; every other failure leaves rows to the retrieve fallback.
pub async fn list_batch(
    share: ListShare<'_>,
    (account, listing): (Option<&AccountId>, Listing),
    rows: &[(&PaymentRow, &str)],
    page_cap: usize,
) -> Result<Listed, RunError> {
    let wanted: HashSet<&str> = rows.iter().map(|(_, id)| *id).collect();
    let core_rows: Vec<&(&PaymentRow, &str)> =
        rows.iter().filter(|(r, _)| !r.behind_cursor).collect();
    let mut times: Vec<i64> = core_rows
        .iter()
        .map(|(r, _)| r.created_at.timestamp())
        .collect();
    times.sort_unstable();
    let core: HashSet<&str> = core_rows.iter().map(|(_, id)| *id).collect();
    let windows = sub_windows(&times, page_cap);
    let (Some(&lo), Some(&hi)) = (times.first(), times.last()) else {
        return Ok(Listed::default());
    };
    let budget = AtomicUsize::new(page_cap);
    let found = Mutex::new(HashMap::new());
    let (pages, failed, items) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    let chain = Chain {
        gateway: share.gateway,
        listing,
        account,
        in_flight: share.in_flight,
        wanted: &wanted,
        budget: &budget,
        found: &found,
        pages: &pages,
        failed: &failed,
        items: &items,
        first_pages_left: &AtomicUsize::new(windows.len()),
        all_started: share.all_started,
    };
    futures::future::try_join_all(windows.iter().map(|w| chain.run(*w, None, true))).await?;

    slack_rings(&chain, &core, (lo, hi), share.scan.list_window_slack).await?;
    Ok(Listed {
        found: found.into_inner().unwrap_or_else(|p| p.into_inner()),
        pages: pages.load(Ordering::Relaxed),
        failed_pages: failed.load(Ordering::Relaxed),
    })
}

/// The slack rings around the window `[lo, hi]` (`RECONCILER_LIST_WINDOW_SLACK_SECONDS`
/// each side), listed until the `core` rows still unseen are found; each
/// only when it is worth its pages (and never after a failed page: Stripe's
/// lists are not answering).
///
/// # Errors
/// As [`list_batch`].
async fn slack_rings(
    chain: &Chain<'_>,
    core: &HashSet<&str>,
    (lo, hi): (i64, i64),
    slack: std::time::Duration,
) -> Result<(), RunError> {
    let slack = i64::try_from(slack.as_secs()).unwrap_or(i64::MAX / 4);
    if slack > 0 && chain.failed.load(Ordering::Relaxed) == 0 {
        let unseen = {
            let found = chain.found.lock().unwrap_or_else(|p| p.into_inner());
            core.iter().filter(|id| !found.contains_key(**id)).count()
        };
        let per_second = chain.items.load(Ordering::Relaxed) as f64 / ((hi - lo + 1) as f64);
        let ring_pages = ((per_second * slack as f64) / f64::from(LIST_PAGE_LIMIT))
            .ceil()
            .max(1.0);
        if unseen > 0 && ring_pages <= unseen as f64 {
            let rings = [
                CreatedWindow {
                    gte: lo.saturating_sub(slack),
                    lte: lo - 1,
                },
                CreatedWindow {
                    gte: hi + 1,
                    lte: hi.saturating_add(slack),
                },
            ];
            futures::future::try_join_all(rings.iter().map(|w| chain.run(*w, Some(core), false)))
                .await?;
        }
    }
    Ok(())
}

/// The list pages each account of a batch may read, for `sizes` rows per
/// account and the batch's cap (`RECONCILER_LIST_MAX_PAGES`): a share of the
/// cap by rows, at least one page, the largest accounts first, never more
/// than the cap in all. With several accounts, one with a single row gets
/// none (one retrieve is cheaper than a list page, which may also need a
/// retrieve for what the window missed); an account with no page has its
/// rows retrieved.
pub fn page_shares(cap: usize, sizes: &[usize]) -> Vec<usize> {
    let total = sizes.iter().sum::<usize>().max(1);
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
    let mut left = cap.max(1);
    let mut shares = vec![0; sizes.len()];
    for i in order {
        if left == 0 || (sizes.len() > 1 && sizes[i] < 2) {
            continue;
        }
        let share = (cap * sizes[i]).div_ceil(total).clamp(1, left);
        shares[i] = share;
        left -= share;
    }
    shares
}

/// One account's rows to list, and what is listed for them.
type AccountRows<'a> = (
    (Option<&'a AccountId>, Listing),
    Vec<(&'a PaymentRow, &'a str)>,
);

/// A row to list: the row, the id its page would hold, its account, and
/// what is listed for it.
pub type ToList<'a> = (&'a PaymentRow, &'a str, &'a AccountKey, Listing);

/// List mode over a batch whose rows belong to several Stripe accounts
/// (Connect, docs/connect.md): each account's window is listed with its own
/// `Stripe-Account` header, all accounts side by side (their first pages
/// queue for the shared permits together, so a busy account's many windows
/// never hold back a small account's one). The batch's page cap is shared
/// out by rows ([`page_shares`]): never more pages than the cap in all, and
/// an account left without a page has its rows retrieved. `rows` carry
/// their account and what is listed for them: PaymentIntents and Checkout
/// Sessions are groups of their own, sharing the one cap.
///
/// # Errors
/// As [`list_batch`].
pub async fn list_accounts(share: ListShare<'_>, rows: &[ToList<'_>]) -> Result<Listed, RunError> {
    let mut groups: Vec<AccountRows<'_>> = Vec::new();
    for (row, id, account, listing) in rows {
        let key = (account.as_ref(), *listing);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, group)) => group.push((row, id)),
            None => groups.push((key, vec![(row, id)])),
        }
    }
    let cap = share.scan.list_page_cap() as usize;
    let sizes: Vec<usize> = groups.iter().map(|(_, g)| g.len()).collect();
    let shares = page_shares(cap, &sizes);
    let listed_groups = groups.iter().zip(shares).filter(|(_, share)| *share > 0);
    let shared = share;
    let lists = futures::future::try_join_all(
        listed_groups.map(|((key, group), share)| list_batch(shared, *key, group, share)),
    )
    .await?;
    let mut all = Listed::default();
    for listed in lists {
        all.found.extend(listed.found);
        all.pages += listed.pages;
        all.failed_pages += listed.failed_pages;
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_windows_cover_the_window_without_overlap() {
        let times: Vec<i64> = (0..300).map(|i| 1_000 + i * 2).collect();
        let w = sub_windows(&times, 10);
        assert_eq!(w.len(), 4);
        // 75 rows each, not 95 + 95 + 95 + 15.
        assert_eq!(w[1].gte, 1_150);
        assert_eq!(sub_windows(&times, 2).len(), 2);
        assert_eq!(w[0].gte, 1_000);
        assert_eq!(w.last().unwrap().lte, 1_598);
        for pair in w.windows(2) {
            assert_eq!(pair[0].lte + 1, pair[1].gte);
        }
        // Every second in one sub-window: a single window.
        assert_eq!(
            sub_windows(&[5; 500], 10),
            vec![CreatedWindow { gte: 5, lte: 5 }]
        );
        assert!(sub_windows(&[], 10).is_empty());
    }

    #[test]
    fn many_small_accounts_never_read_more_pages_than_the_cap() {
        // One account alone keeps the whole cap, even with one row.
        assert_eq!(page_shares(22, &[1]), [22]);
        assert_eq!(page_shares(22, &[1900]), [22]);
        // By rows, the largest first.
        assert_eq!(page_shares(22, &[1000, 900]), [12, 10]);
        // 30 accounts of 3 rows and a cap of 10: ten get a page, the rest
        // are retrieved; never more than the cap in all.
        let shares = page_shares(10, &[3; 30]);
        assert_eq!(shares.iter().sum::<usize>(), 10);
        assert_eq!(shares.iter().filter(|s| **s == 0).count(), 20);
        // Beside others, a single row is retrieved, not listed.
        assert_eq!(page_shares(22, &[1800, 1, 99]), [21, 0, 1]);
    }
}
