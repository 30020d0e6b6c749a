//! [`PaymentIntentId`]: an id read from the database, parsed before it may go
//! into a URL path.

use std::fmt;

/// Longest id accepted, in bytes. Stripe documents object ids as at most 255
/// characters.
pub const MAX_ID_LEN: usize = 255;

/// A well-formed Stripe PaymentIntent id: `pi_` followed by ASCII letters and
/// digits (Stripe's id alphabet), at most [`MAX_ID_LEN`] bytes in all.
///
/// `payments.stripe_payment_intent_id` is untrusted input: anything else
/// (`/`, `..`, `%`, `?`, `#`, whitespace, unicode, empty) is rejected here and
/// never reaches an HTTP request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PaymentIntentId(String);

/// Why a stored value is not a PaymentIntent id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPaymentIntentId {
    /// The value is empty.
    #[error("empty PaymentIntent id")]
    Empty,
    /// Longer than [`MAX_ID_LEN`] bytes.
    #[error("PaymentIntent id is {0} bytes long (max {MAX_ID_LEN})")]
    TooLong(usize),
    /// Does not start with `pi_`.
    #[error("PaymentIntent id does not start with \"pi_\"")]
    WrongPrefix,
    /// Contains a byte outside `[A-Za-z0-9]` after the prefix, or nothing after it.
    #[error("PaymentIntent id has characters other than letters and digits after \"pi_\"")]
    BadCharacters,
}

impl PaymentIntentId {
    /// Parses an untrusted value.
    ///
    /// # Errors
    /// [`InvalidPaymentIntentId`] saying which rule the value breaks.
    pub fn parse(value: &str) -> Result<Self, InvalidPaymentIntentId> {
        if value.is_empty() {
            return Err(InvalidPaymentIntentId::Empty);
        }
        if value.len() > MAX_ID_LEN {
            return Err(InvalidPaymentIntentId::TooLong(value.len()));
        }
        let rest = value
            .strip_prefix("pi_")
            .ok_or(InvalidPaymentIntentId::WrongPrefix)?;
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(InvalidPaymentIntentId::BadCharacters);
        }
        Ok(PaymentIntentId(value.to_owned()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PaymentIntentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A well-formed Checkout Session id: `cs_` followed by ASCII letters,
/// digits and `_` (`cs_test_a1YS…`, `cs_live_…`; Stripe's ids), at most
/// [`MAX_ID_LEN`] bytes. The Checkout Session column
/// (`RECONCILER_CHECKOUT_SESSION_COLUMN`) is untrusted input: anything else
/// never reaches an HTTP request (docs/checkout-sessions.md).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CheckoutSessionId(String);

/// Why a stored value is not a Checkout Session id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCheckoutSessionId {
    /// Longer than [`MAX_ID_LEN`] bytes.
    #[error("Checkout Session id is {0} bytes long (max {MAX_ID_LEN})")]
    TooLong(usize),
    /// Does not start with `cs_`.
    #[error("Checkout Session id does not start with \"cs_\"")]
    WrongPrefix,
    /// Contains a byte outside `[A-Za-z0-9_]` after the prefix, or nothing after it.
    #[error("Checkout Session id has characters other than letters, digits and _ after \"cs_\"")]
    BadCharacters,
}

impl CheckoutSessionId {
    /// Parses an untrusted value.
    ///
    /// # Errors
    /// [`InvalidCheckoutSessionId`] saying which rule the value breaks.
    pub fn parse(value: &str) -> Result<Self, InvalidCheckoutSessionId> {
        if value.len() > MAX_ID_LEN {
            return Err(InvalidCheckoutSessionId::TooLong(value.len()));
        }
        let rest = value
            .strip_prefix("cs_")
            .ok_or(InvalidCheckoutSessionId::WrongPrefix)?;
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(InvalidCheckoutSessionId::BadCharacters);
        }
        Ok(CheckoutSessionId(value.to_owned()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CheckoutSessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkout_session_ids_are_checked_like_payment_intent_ids() {
        for id in [
            "cs_test_a1YS1URlnyQCN5fUUduORoQ7Pw41PJqDWkIVQCpJPqkfIhd6tVY8XB1OLY",
            "cs_live_b1",
        ] {
            assert_eq!(CheckoutSessionId::parse(id).unwrap().as_str(), id);
        }
        for bad in [
            "",
            "cs_",
            "pi_123",
            "cs_1/../x",
            "cs_1?a=b",
            "cs_1 ",
            "CS_1",
            "cs_ü",
        ] {
            assert!(
                CheckoutSessionId::parse(bad).is_err(),
                "{bad:?} was accepted"
            );
        }
    }

    #[test]
    fn accepts_real_ids() {
        for id in [
            "pi_1PgafyB7WZ01zgkWSjxsAJo3",
            "pi_3MtwBwLkdIwHu7ix28a3tqPa",
            "pi_1",
        ] {
            assert_eq!(PaymentIntentId::parse(id).unwrap().as_str(), id);
        }
    }

    #[test]
    fn rejects_everything_that_could_change_the_url() {
        let long = format!("pi_{}", "a".repeat(300));
        for bad in [
            "",
            " ",
            "pi_",
            " pi_123",
            "pi_123 ",
            "pi_1/../../v1/customers",
            "pi_1?expand=customer",
            "pi_1#x",
            "pi_1%2F..",
            "pi_..",
            "pi_1\n",
            "pi_ünïcode",
            "pi_1\u{0}",
            "ch_123",
            "PI_123",
            "cus_123",
            long.as_str(),
        ] {
            assert!(PaymentIntentId::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
