//! The HTTP status of a wiremock answer. Shared, by `#[path]`, with the
//! demo's Stripe stand-in (`examples/stripe_standin.rs`), whose list guard
//! reads it as the fake's drop guard does.

use wiremock::ResponseTemplate;

/// The HTTP status `r` answers (wiremock keeps it private; its `Debug`
/// shows it); 0 when it cannot be read.
pub(crate) fn status_of(r: &ResponseTemplate) -> u16 {
    let text = format!("{r:?}");
    text.split("status_code: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
