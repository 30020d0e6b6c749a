//! Stripe's subscription statuses and who they grant access to
//! (docs/subscriptions.md, "Access"; Stripe API reference, "The Subscription
//! object", `status`).

use std::fmt;

/// `Subscription.status` as Stripe sends it. The list grows: a status this
/// version does not know is [`SubscriptionStatus::Unknown`] with the word,
/// never a parse error.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SubscriptionStatus {
    /// The first payment has not been made yet (23 hours to succeed).
    Incomplete,
    /// Terminal: the first invoice was never paid.
    IncompleteExpired,
    /// In a trial period.
    Trialing,
    /// In good standing (not a promise that every invoice is paid).
    Active,
    /// A renewal failed and retries are running.
    PastDue,
    /// Terminal: the subscription has ended.
    Canceled,
    /// Retries are exhausted; invoices are created but not attempted.
    Unpaid,
    /// A trial ended without a payment method.
    Paused,
    /// A status this version does not know, as Stripe sent it.
    Unknown(String),
}

impl SubscriptionStatus {
    /// Stripe's eight documented statuses, in the order of Stripe's reference.
    pub const ALL: [SubscriptionStatus; 8] = [
        Self::Incomplete,
        Self::IncompleteExpired,
        Self::Trialing,
        Self::Active,
        Self::PastDue,
        Self::Canceled,
        Self::Unpaid,
        Self::Paused,
    ];

    /// Reads Stripe's word; an undocumented one is [`Self::Unknown`].
    pub fn parse(word: &str) -> Self {
        Self::ALL
            .into_iter()
            .find(|s| s.as_str() == word)
            .unwrap_or_else(|| Self::Unknown(word.to_owned()))
    }

    /// Stripe's word for the status (the unknown one as it came).
    pub fn as_str(&self) -> &str {
        match self {
            Self::Incomplete => "incomplete",
            Self::IncompleteExpired => "incomplete_expired",
            Self::Trialing => "trialing",
            Self::Active => "active",
            Self::PastDue => "past_due",
            Self::Canceled => "canceled",
            Self::Unpaid => "unpaid",
            Self::Paused => "paused",
            Self::Unknown(word) => word,
        }
    }

    /// Whether the subscription can never come back (`canceled`,
    /// `incomplete_expired`): the only statuses whose end of access is
    /// repaired automatically.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Canceled | Self::IncompleteExpired)
    }

    /// Whether Stripe grants access in this status: `trialing`, `active`,
    /// and `past_due` under [`PastDueAccess::Grant`]; `None` for an unknown
    /// status (nothing can be said of it).
    pub fn grants(&self, past_due: PastDueAccess) -> Option<bool> {
        match self {
            Self::Trialing | Self::Active => Some(true),
            Self::PastDue => Some(past_due == PastDueAccess::Grant),
            Self::Incomplete
            | Self::IncompleteExpired
            | Self::Canceled
            | Self::Unpaid
            | Self::Paused => Some(false),
            Self::Unknown(_) => None,
        }
    }
}

impl fmt::Display for SubscriptionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `RECONCILER_PAST_DUE_ACCESS`: whether a `past_due` subscription (a
/// renewal failed, Stripe still retrying) keeps access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PastDueAccess {
    /// `grant` (default): dunning keeps access while Stripe retries.
    #[default]
    Grant,
    /// `revoke`: access ends with the first failed renewal.
    Revoke,
}

impl PastDueAccess {
    /// The variable's value (`grant`, `revoke`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Grant => "grant",
            Self::Revoke => "revoke",
        }
    }

    /// Reads the variable's value (trimmed, exact case); `None` for any other.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw.trim() {
            "grant" => Some(Self::Grant),
            "revoke" => Some(Self::Revoke),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_and_unknown_ones_keep_their_word() {
        for s in SubscriptionStatus::ALL {
            assert_eq!(SubscriptionStatus::parse(s.as_str()), s);
        }
        let new = SubscriptionStatus::parse("on_hold");
        assert_eq!(new, SubscriptionStatus::Unknown("on_hold".into()));
        assert_eq!(new.to_string(), "on_hold");
        assert_eq!(new.grants(PastDueAccess::Grant), None);
    }

    #[test]
    fn access_follows_the_past_due_policy() {
        use SubscriptionStatus as S;
        let granting = |p| {
            S::ALL
                .into_iter()
                .filter(|s| s.grants(p) == Some(true))
                .map(|s| s.as_str().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            granting(PastDueAccess::Grant),
            ["trialing", "active", "past_due"]
        );
        assert_eq!(granting(PastDueAccess::Revoke), ["trialing", "active"]);
        let terminal: Vec<_> = S::ALL.into_iter().filter(S::is_terminal).collect();
        assert_eq!(terminal, [S::IncompleteExpired, S::Canceled]);
        assert_eq!(
            PastDueAccess::parse(" revoke "),
            Some(PastDueAccess::Revoke)
        );
        assert_eq!(PastDueAccess::parse("Grant"), None);
        assert_eq!(PastDueAccess::default().as_str(), "grant");
    }
}
