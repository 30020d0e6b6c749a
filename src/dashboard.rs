//! Links to a PaymentIntent (or a Checkout Session) in the Stripe
//! Dashboard, for the review queue.
//! PURE: no I/O.
//!
//! The Dashboard keeps live and test mode apart:
//! `https://dashboard.stripe.com/payments/{pi}` (live) and
//! `https://dashboard.stripe.com/test/payments/{pi}` (test). The mode comes
//! from, in order: `findings list --dashboard` / `RECONCILER_DASHBOARD_MODE`,
//! the prefix of `STRIPE_API_KEY` (`sk_test_`/`rk_test_` = test), else live
//! (the review queue of a production deployment, where a person usually has
//! no API key in their shell).
//!
//! A connected account's payment (Connect, docs/connect.md) is a page of that
//! account's Dashboard as the platform views it, the account id first in
//! the path: `https://dashboard.stripe.com/{acct}/payments/{pi}` and
//! `https://dashboard.stripe.com/{acct}/test/payments/{pi}` (Stripe docs,
//! "View the Dashboard as a connected account").

use crate::stripe::{AccountId, CheckoutSessionId, PaymentIntentId};

/// Which half of the Stripe Dashboard a link points into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DashboardMode {
    /// Live mode (real money).
    Live,
    /// Test mode (`sk_test_`/`rk_test_` keys).
    Test,
}

impl DashboardMode {
    /// The mode of the account an API key belongs to: `Test` for `sk_test_`
    /// and `rk_test_` keys, `Live` for anything else.
    pub fn of_key(key: &str) -> Self {
        if key.starts_with("sk_test_") || key.starts_with("rk_test_") {
            DashboardMode::Test
        } else {
            DashboardMode::Live
        }
    }

    /// The explicit choice if any, else the key's mode, else live.
    pub fn choose(explicit: Option<DashboardMode>, api_key: Option<&str>) -> Self {
        explicit
            .or_else(|| api_key.map(Self::of_key))
            .unwrap_or(DashboardMode::Live)
    }
}

/// The Dashboard page of a PaymentIntent; `None` when the stored id is not a
/// well-formed PaymentIntent id (it would not name a page, and it is
/// untrusted input that must not be spliced into a URL).
pub fn payment_intent_url(stored_id: &str, mode: DashboardMode) -> Option<String> {
    payment_intent_url_on(None, stored_id, mode)
}

/// [`payment_intent_url`] of a PaymentIntent on the connected `account`
/// (`None` or empty: the platform's own). `None` also when the stored
/// account is not a well-formed `acct_` id (untrusted: never spliced into a
/// URL).
pub fn payment_intent_url_on(
    account: Option<&str>,
    stored_id: &str,
    mode: DashboardMode,
) -> Option<String> {
    let id = PaymentIntentId::parse(stored_id).ok()?;
    let account = AccountId::of_stored(account).ok()?;
    let account = account.map_or_else(String::new, |a| format!("{}/", a.as_str()));
    let mode = match mode {
        DashboardMode::Live => "",
        DashboardMode::Test => "test/",
    };
    Some(format!(
        "https://dashboard.stripe.com/{account}{mode}payments/{}",
        id.as_str()
    ))
}

/// The Dashboard link of a finding: its PaymentIntent's page, or, for a
/// payment judged by its Checkout Session that has no PaymentIntent yet
/// (docs/checkout-sessions.md), the Dashboard's search for the session id
/// (`https://dashboard.stripe.com/[{acct}/][test/]search?query={cs}`).
/// `None` when neither id is well-formed, or the account is malformed.
pub fn finding_url(
    account: Option<&str>,
    payment_intent: Option<&str>,
    checkout_session: Option<&str>,
    mode: DashboardMode,
) -> Option<String> {
    if let Some(url) = payment_intent.and_then(|pi| payment_intent_url_on(account, pi, mode)) {
        return Some(url);
    }
    let session = CheckoutSessionId::parse(checkout_session?).ok()?;
    let account = AccountId::of_stored(account).ok()?;
    let account = account.map_or_else(String::new, |a| format!("{}/", a.as_str()));
    let mode = match mode {
        DashboardMode::Live => "",
        DashboardMode::Test => "test/",
    };
    Some(format!(
        "https://dashboard.stripe.com/{account}{mode}search?query={}",
        session.as_str()
    ))
}

/// The Dashboard page of a subscription
/// (`https://dashboard.stripe.com/[{acct}/][test/]subscriptions/{sub}`,
/// docs/subscriptions.md); `None` when the id or the account is malformed.
pub fn subscription_url_on(
    account: Option<&str>,
    stored_id: &str,
    mode: DashboardMode,
) -> Option<String> {
    let id = crate::stripe::SubscriptionId::parse(stored_id.trim()).ok()?;
    let account = AccountId::of_stored(account).ok()?;
    let account = account.map_or_else(String::new, |a| format!("{}/", a.as_str()));
    let mode = match mode {
        DashboardMode::Live => "",
        DashboardMode::Test => "test/",
    };
    Some(format!(
        "https://dashboard.stripe.com/{account}{mode}subscriptions/{}",
        id.as_str()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_without_payment_intent_links_to_a_search_for_it() {
        let cs = "cs_test_a1";
        assert_eq!(
            finding_url(None, None, Some(cs), DashboardMode::Test).as_deref(),
            Some("https://dashboard.stripe.com/test/search?query=cs_test_a1")
        );
        assert_eq!(
            finding_url(Some("acct_1A"), Some("pi_1"), Some(cs), DashboardMode::Live).as_deref(),
            Some("https://dashboard.stripe.com/acct_1A/payments/pi_1")
        );
        assert_eq!(
            finding_url(None, Some(""), Some("cs_1/../x"), DashboardMode::Live),
            None
        );
    }

    #[test]
    fn a_subscription_links_to_its_page() {
        assert_eq!(
            subscription_url_on(None, "sub_1Pgc6r", DashboardMode::Live).as_deref(),
            Some("https://dashboard.stripe.com/subscriptions/sub_1Pgc6r")
        );
        assert_eq!(
            subscription_url_on(Some("acct_1A"), "sub_1", DashboardMode::Test).as_deref(),
            Some("https://dashboard.stripe.com/acct_1A/test/subscriptions/sub_1")
        );
        assert_eq!(
            subscription_url_on(None, "sub_../x", DashboardMode::Live),
            None
        );
    }

    #[test]
    fn test_keys_link_to_test_mode_and_everything_else_to_live() {
        assert_eq!(DashboardMode::of_key("sk_test_abc"), DashboardMode::Test);
        assert_eq!(DashboardMode::of_key("rk_test_abc"), DashboardMode::Test);
        assert_eq!(DashboardMode::of_key("sk_live_abc"), DashboardMode::Live);
        assert_eq!(DashboardMode::of_key("rk_live_abc"), DashboardMode::Live);
        assert_eq!(DashboardMode::choose(None, None), DashboardMode::Live);
        assert_eq!(
            DashboardMode::choose(Some(DashboardMode::Live), Some("sk_test_x")),
            DashboardMode::Live,
            "an explicit choice wins over the key"
        );
    }

    #[test]
    fn links_name_the_payment_intent_in_the_right_mode() {
        assert_eq!(
            payment_intent_url("pi_3Abc123", DashboardMode::Live).as_deref(),
            Some("https://dashboard.stripe.com/payments/pi_3Abc123")
        );
        assert_eq!(
            payment_intent_url("pi_3Abc123", DashboardMode::Test).as_deref(),
            Some("https://dashboard.stripe.com/test/payments/pi_3Abc123")
        );
        assert_eq!(payment_intent_url("pi_../../x", DashboardMode::Live), None);
        assert_eq!(
            payment_intent_url_on(Some("acct_1Xy"), "pi_3Abc123", DashboardMode::Live).as_deref(),
            Some("https://dashboard.stripe.com/acct_1Xy/payments/pi_3Abc123")
        );
        assert_eq!(
            payment_intent_url_on(Some("acct_1Xy"), "pi_3Abc123", DashboardMode::Test).as_deref(),
            Some("https://dashboard.stripe.com/acct_1Xy/test/payments/pi_3Abc123")
        );
        assert_eq!(
            payment_intent_url_on(Some(""), "pi_3Abc123", DashboardMode::Live).as_deref(),
            Some("https://dashboard.stripe.com/payments/pi_3Abc123")
        );
        assert_eq!(
            payment_intent_url_on(Some("acct_/../x"), "pi_3Abc123", DashboardMode::Live),
            None
        );
        assert_eq!(payment_intent_url("", DashboardMode::Test), None);
    }
}
