//! Connect in phase 2 (docs/connect.md): which Stripe account a row's reads go to,
//! the fair order of a batch's reads across accounts, and the wrong-key rule
//! judged per account.
//!
//! One rate limit covers every account (Stripe documents no per-connected-
//! account budget), so fairness is in the order: a batch's retrieves take
//! the accounts in turn ([`round_robin`]), and list mode pages every
//! account's windows side by side, so one busy account cannot starve the rest.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::PgPool;
use tokio::sync::OnceCell;

use crate::config::SchemaSettings;
use crate::store::payments::{self, PaymentRow};
use crate::stripe::{AccountId, GatewayError, InvalidAccountId, PaymentIntentId, StripeGateway};

/// The Stripe account a row's reads go to: `None` is the platform's own
/// account (no `Stripe-Account` header).
pub type AccountKey = Option<AccountId>;

/// The account of `row` under `schema`: always the platform when
/// `RECONCILER_ACCOUNT_COLUMN` is unset.
///
/// # Errors
/// [`InvalidAccountId`] when the column holds something that is not an
/// `acct_` id: the row is never sent to Stripe.
pub fn account_of(
    row: &PaymentRow,
    schema: &SchemaSettings,
) -> Result<AccountKey, InvalidAccountId> {
    if schema.account_column.is_none() {
        return Ok(None);
    }
    AccountId::of_stored(row.stripe_account.as_deref())
}

/// PURE. The order in which to start a batch's reads: indices into `keys`
/// (one key per row, in row order), taking the keys in turn in order of
/// first appearance, each key's rows in their own order. `[a, a, a, b, c, b]`
/// gives `[0, 3, 4, 1, 5, 2]`: the first read of every account is started
/// before a second read of any.
pub fn round_robin<K: Eq + Hash>(keys: &[K]) -> Vec<usize> {
    let mut queues: Vec<Vec<usize>> = Vec::new();
    let mut slot: HashMap<&K, usize> = HashMap::new();
    for (i, k) in keys.iter().enumerate() {
        let q = *slot.entry(k).or_insert_with(|| {
            queues.push(Vec::new());
            queues.len() - 1
        });
        queues[q].push(i);
    }
    let longest = queues.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .flat_map(|round| queues.iter().filter_map(move |q| q.get(round).copied()))
        .collect()
}

/// What re-reading a known PaymentIntent said about the key and account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyCheck {
    /// A PaymentIntent verified before was found: the key is right.
    Confirmed,
    /// It is unknown to Stripe with this key (and account): wrong account or mode.
    Wrong,
    /// Nothing to re-read, or Stripe did not answer.
    Unknown,
}

/// One account's reads in a batch.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) asked: AtomicUsize,
    pub(super) found: AtomicUsize,
    pub(super) not_found: AtomicUsize,
    pub(super) key: OnceCell<KeyCheck>,
}

impl Tally {
    pub(super) fn count(counter: &AtomicUsize) -> usize {
        counter.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Every read of this account answered 404.
    pub(super) fn all_not_found(&self) -> bool {
        let asked = self.asked.load(Ordering::Relaxed);
        asked > 0
            && self.found.load(Ordering::Relaxed) == 0
            && self.not_found.load(Ordering::Relaxed) == asked
    }
}

/// Re-reads a PaymentIntent this job verified before on `account` (for the
/// platform: of a platform row when the account column is set).
pub(super) async fn check_key(
    pool: &PgPool,
    gateway: &StripeGateway,
    schema: &SchemaSettings,
    account: Option<&AccountId>,
) -> KeyCheck {
    let known = match &schema.account_column {
        None => payments::a_verified_payment_intent(pool, schema.partition.as_ref()).await,
        Some(column) => {
            payments::a_verified_payment_intent_on(
                pool,
                column,
                account.map(AccountId::as_str),
                schema.partition.as_ref(),
            )
            .await
        }
    };
    let known = match known {
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
    match gateway.payment_intent_status_on(account, &id).await {
        Ok(_) => KeyCheck::Confirmed,
        Err(GatewayError::NotFound { .. }) => {
            tracing::error!(payment_intent = %id, stripe_account = account.map(AccountId::as_str), "a PaymentIntent this job verified before is unknown to Stripe with this key");
            KeyCheck::Wrong
        }
        Err(_) => KeyCheck::Unknown,
    }
}

/// The reason of a connected account whose every read answered 404.
pub(super) fn all_not_found_reason(account: &AccountId, reads: usize) -> String {
    format!(
        "every read on connected account {account} answered 404 ({reads} reads): wrong account id in RECONCILER_ACCOUNT_COLUMN, or STRIPE_API_KEY is not this account's platform key (or is of the other mode)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_takes_the_accounts_in_turn() {
        assert_eq!(
            round_robin(&["a", "a", "a", "b", "c", "b"]),
            vec![0, 3, 4, 1, 5, 2]
        );
        assert_eq!(round_robin::<&str>(&[]), Vec::<usize>::new());
        assert_eq!(round_robin(&[1, 1, 1]), vec![0, 1, 2]);
        // A busy account first in the batch does not hold back the others:
        // each of the ten small accounts gets its read among the first 11.
        let mut keys = vec![0; 100];
        keys.extend(1..=10);
        let order = round_robin(&keys);
        assert_eq!(order.len(), 110);
        let first: Vec<i32> = order[..11].iter().map(|&i| keys[i]).collect();
        assert_eq!(first, (0..=10).collect::<Vec<i32>>());
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..110).collect::<Vec<usize>>(), "every row once");
    }
}
