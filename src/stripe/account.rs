//! Connect: [`AccountId`], a connected account id read from the database and
//! parsed before it may go into a `Stripe-Account` header, and
//! [`AccountAccess`], the run's memory of the connected accounts the
//! platform cannot read (docs/connect.md).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use super::id::MAX_ID_LEN;

/// A well-formed Stripe account id: `acct_` followed by ASCII letters and
/// digits, at most [`MAX_ID_LEN`] bytes in all (Stripe's id alphabet; the
/// `Stripe-Account` header takes "a Stripe account ID, which usually starts
/// with the acct_ prefix", Stripe API reference, Connected Accounts).
///
/// The account column (`RECONCILER_ACCOUNT_COLUMN`) is untrusted input:
/// anything else (whitespace, `,`, control characters, another prefix) is
/// rejected here and never becomes a header.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccountId(String);

/// Why a stored value is not a connected account id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAccountId {
    /// Longer than [`MAX_ID_LEN`] bytes.
    #[error("Stripe account id is {0} bytes long (max {MAX_ID_LEN})")]
    TooLong(usize),
    /// Does not start with `acct_`.
    #[error("Stripe account id does not start with \"acct_\"")]
    WrongPrefix,
    /// A byte outside `[A-Za-z0-9]` after the prefix, or nothing after it.
    #[error("Stripe account id has characters other than letters and digits after \"acct_\"")]
    BadCharacters,
}

impl AccountId {
    /// Parses an untrusted value (not trimmed: a value with spaces is not an id).
    ///
    /// # Errors
    /// [`InvalidAccountId`] saying which rule the value breaks.
    pub fn parse(value: &str) -> Result<Self, InvalidAccountId> {
        if value.len() > MAX_ID_LEN {
            return Err(InvalidAccountId::TooLong(value.len()));
        }
        let rest = value
            .strip_prefix("acct_")
            .ok_or(InvalidAccountId::WrongPrefix)?;
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(InvalidAccountId::BadCharacters);
        }
        Ok(AccountId(value.to_owned()))
    }

    /// The account a stored value names: `Ok(None)` for the platform's own
    /// account (NULL or empty), `Ok(Some)` for a well-formed `acct_` id.
    ///
    /// # Errors
    /// [`InvalidAccountId`] for anything else.
    pub fn of_stored(value: Option<&str>) -> Result<Option<Self>, InvalidAccountId> {
        match value {
            None | Some("") => Ok(None),
            Some(v) => Self::parse(v).map(Some),
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The connected accounts found unreachable during one run, with the reason
/// each is: a 403 saying the platform has no access (disconnected, revoked
/// application, `account_invalid`), or every read of a batch answering 404.
/// Once an account is here, the run sends no more reads for it; the count is
/// the gauge `stripe_accounts_unreachable` (accounts, this run). Shared by
/// every batch of the run (it lives in the run's [`super::StripeGateway`]).
#[derive(Debug, Default)]
pub struct AccountAccess {
    unreachable: Mutex<BTreeMap<AccountId, String>>,
}

impl AccountAccess {
    /// Remembers `account` as unreachable for the rest of the run; the first
    /// reason given is kept.
    pub fn mark_unreachable(&self, account: &AccountId, reason: String) {
        let mut map = self.unreachable.lock().unwrap_or_else(|p| p.into_inner());
        if !map.contains_key(account) {
            tracing::warn!(stripe_account = %account, %reason, "connected account unreachable: its rows are UNVERIFIABLE for the rest of the run; the other accounts go on");
            map.insert(account.clone(), reason);
        }
    }

    /// Why `account` is unreachable, if it was found so this run.
    pub fn unreachable(&self, account: &AccountId) -> Option<String> {
        self.unreachable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(account)
            .cloned()
    }

    /// How many accounts were found unreachable so far.
    pub fn unreachable_count(&self) -> usize {
        self.unreachable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_account_ids_parse() {
        assert_eq!(
            AccountId::parse("acct_1Abc23").unwrap().as_str(),
            "acct_1Abc23"
        );
        assert_eq!(AccountId::of_stored(None), Ok(None));
        assert_eq!(AccountId::of_stored(Some("")), Ok(None));
        for bad in [
            "acct_",
            "acct_1 2",
            "acct_1\r\nX-Evil: 1",
            " acct_1",
            "acc_1",
            "pi_1",
            "acct_1,acct_2",
        ] {
            assert!(AccountId::parse(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(
            AccountId::parse(&format!("acct_{}", "a".repeat(300))),
            Err(InvalidAccountId::TooLong(305))
        );
    }

    #[test]
    fn an_unreachable_account_keeps_its_first_reason() {
        let access = AccountAccess::default();
        let a = AccountId::parse("acct_A").unwrap();
        assert_eq!(access.unreachable(&a), None);
        access.mark_unreachable(&a, "first".into());
        access.mark_unreachable(&a, "second".into());
        assert_eq!(access.unreachable(&a).as_deref(), Some("first"));
        assert_eq!(access.unreachable_count(), 1);
    }
}
