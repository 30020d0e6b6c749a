//! Stripe's currency exponents, and amounts in major units (`12.00`) turned
//! into the integer minor units (`1200`) a PaymentIntent's `amount` is in
//! (`RECONCILER_AMOUNT_UNIT=major`). Exact: decimal text in, integer out,
//! never a float.
//!
//! Source: Stripe, "Supported currencies" (<https://docs.stripe.com/currencies>),
//! sections "Zero-decimal currencies", "Three-decimal currencies" and
//! "Special cases", and Stripe support, "Deprecation of fractional ISK
//! charges and refunds". Every currency not listed below is two-decimal.
//! The special cases, as the API's `amount` sees them:
//! - ISK is effectively zero-decimal for card networks since 2023, but
//!   stays two-decimal in the API (`100` is 1 króna, amounts must be
//!   multiples of 100): exponent 2.
//! - HUF and TWD are zero-decimal for payouts only; charges and
//!   PaymentIntents take two-decimal amounts: exponent 2.
//! - UGX is in Stripe's zero-decimal list: exponent 0.
//! - Three-decimal amounts must end in 0 for Stripe's partners (5.124 KWD is
//!   charged as 5120 or 5130); that is a rule for creating charges, not for
//!   reading them, so it is not checked here.

/// Currencies whose API amount is in whole units (Stripe "Zero-decimal
/// currencies"), lowercase as Stripe sends them.
pub const ZERO_DECIMAL: [&str; 16] = [
    "bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv",
    "xaf", "xof", "xpf",
];

/// Currencies whose API amount is in thousandths (Stripe "Three-decimal
/// currencies").
pub const THREE_DECIMAL: [&str; 5] = ["bhd", "jod", "kwd", "omr", "tnd"];

/// The number of decimal places of `currency`'s API amount (ISO code, any
/// case, surrounding spaces ignored): 0, 3, or 2 for every other currency.
pub fn exponent(currency: &str) -> u32 {
    let code = currency.trim().to_ascii_lowercase();
    if ZERO_DECIMAL.contains(&code.as_str()) {
        0
    } else if THREE_DECIMAL.contains(&code.as_str()) {
        3
    } else {
        2
    }
}

/// Why a major-unit amount has no exact minor-unit value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MinorUnitsError {
    /// Not a decimal number (`NaN`, `Infinity`, or not numeric text).
    #[error("{0:?} is not a decimal number")]
    NotANumber(String),
    /// More decimal places than the currency has, and not all zero (e.g.
    /// `12.345` USD: a tenth of a cent).
    #[error("{amount} is not a whole number of minor units ({exponent} decimal places)")]
    NotWhole {
        /// The amount as the row holds it.
        amount: String,
        /// The currency's exponent.
        exponent: u32,
    },
    /// Beyond what a PaymentIntent amount (an `i64`) can hold.
    #[error("{0} is too large")]
    TooLarge(String),
}

/// Converts `major` (the decimal text of a `numeric` column, e.g. `12.00`,
/// `-1.5`, `1200`) in `currency` into minor units: `12.00` USD is 1200,
/// `1200` JPY is 1200, `1.234` KWD is 1234.
///
/// # Errors
/// [`MinorUnitsError`]: not a number, not a whole number of minor units, or
/// too large.
pub fn to_minor_units(major: &str, currency: &str) -> Result<i64, MinorUnitsError> {
    let exponent = exponent(currency);
    let text = major.trim();
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
        return Err(MinorUnitsError::NotANumber(text.to_owned()));
    }
    let places = exponent as usize;
    let (kept, rest) = fraction.split_at(fraction.len().min(places));
    if rest.bytes().any(|b| b != b'0') {
        return Err(MinorUnitsError::NotWhole {
            amount: text.to_owned(),
            exponent,
        });
    }
    let too_large = || MinorUnitsError::TooLarge(text.to_owned());
    let padded = format!("{whole}{kept:0<places$}");
    let mut minor: i64 = 0;
    for b in padded.bytes() {
        minor = minor
            .checked_mul(10)
            .and_then(|m| m.checked_add(i64::from(b - b'0')))
            .ok_or_else(too_large)?;
    }
    Ok(if negative { -minor } else { minor })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponents_follow_stripes_lists_and_special_cases() {
        for (currency, exp) in [
            ("usd", 2),
            ("EUR", 2),
            ("jpy", 0),
            (" JPY ", 0),
            ("krw", 0),
            ("ugx", 0),
            ("kwd", 3),
            ("BHD", 3),
            ("tnd", 3),
            ("isk", 2),
            ("huf", 2),
            ("twd", 2),
            ("xyz", 2),
        ] {
            assert_eq!(exponent(currency), exp, "{currency}");
        }
        assert!(ZERO_DECIMAL.iter().all(|c| !THREE_DECIMAL.contains(c)));
    }

    #[test]
    fn major_amounts_become_exact_minor_units() {
        for (major, currency, minor) in [
            ("12.00", "usd", 1200),
            ("12", "usd", 1200),
            ("12.5", "usd", 1250),
            ("0.01", "usd", 1),
            ("-3.10", "eur", -310),
            ("1200", "jpy", 1200),
            ("1200.00", "jpy", 1200),
            ("1.234", "kwd", 1234),
            ("1.2340", "KWD", 1234),
            ("5", "isk", 500),
            (".5", "usd", 50),
            ("92233720368547758.07", "usd", i64::MAX),
        ] {
            assert_eq!(
                to_minor_units(major, currency),
                Ok(minor),
                "{major} {currency}"
            );
        }
    }

    #[test]
    fn amounts_without_an_exact_minor_value_say_why() {
        assert_eq!(
            to_minor_units("12.345", "usd"),
            Err(MinorUnitsError::NotWhole {
                amount: "12.345".into(),
                exponent: 2
            })
        );
        assert!(matches!(
            to_minor_units("1200.5", "jpy"),
            Err(MinorUnitsError::NotWhole { exponent: 0, .. })
        ));
        assert!(matches!(
            to_minor_units("1.2345", "kwd"),
            Err(MinorUnitsError::NotWhole { exponent: 3, .. })
        ));
        for text in ["NaN", "Infinity", "", ".", "1e3", "1.2.3", "--1", "12 00"] {
            assert!(
                matches!(
                    to_minor_units(text, "usd"),
                    Err(MinorUnitsError::NotANumber(_))
                ),
                "{text:?}"
            );
        }
        assert!(matches!(
            to_minor_units("92233720368547758.08", "usd"),
            Err(MinorUnitsError::TooLarge(_))
        ));
    }
}
