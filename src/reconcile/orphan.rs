//! PURE: whether a PaymentIntent no `payments` row points at is money with
//! no order (a `missing_locally` finding; docs/events.md).

use super::facts::PaymentIntentFacts;
use super::status::ExternalStatus;

/// The details of the `missing_locally` finding a PaymentIntent without a
/// row records, or `None` when it is not an orphan: not succeeded, or
/// (when `metadata_key` is set, `RECONCILER_EVENTS_ORPHAN_METADATA_KEY`)
/// without that metadata key, so payments taken by other systems on the same
/// account are not reported. Details: `amount`, `amount_received` (minor
/// units), `currency`, `created` (RFC 3339) and the marking `metadata`.
pub fn orphan_details(
    facts: &PaymentIntentFacts,
    metadata_key: Option<&str>,
) -> Option<serde_json::Value> {
    if facts.status != ExternalStatus::parse("succeeded") {
        return None;
    }
    let marker = match metadata_key {
        Some(key) => Some((key, facts.metadata.get(key)?)),
        None => None,
    };
    let mut details = serde_json::json!({
        "amount": facts.amount,
        "amount_received": facts.amount_received,
        "currency": facts.currency,
        "created": facts.created.map(|c| c.to_rfc3339()),
    });
    if let Some((key, value)) = marker {
        details["metadata"] = serde_json::json!({ key: value });
    }
    Some(details)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn succeeded() -> PaymentIntentFacts {
        let mut facts = PaymentIntentFacts::with_status(ExternalStatus::parse("succeeded"));
        facts.amount = Some(1099);
        facts.amount_received = Some(1099);
        facts.currency = Some("eur".into());
        facts
    }

    #[test]
    fn only_succeeded_money_is_an_orphan() {
        let details = orphan_details(&succeeded(), None);
        assert_eq!(
            details.as_ref().and_then(|d| d.get("amount_received")),
            Some(&serde_json::json!(1099))
        );
        let pending = PaymentIntentFacts::with_status(ExternalStatus::parse("processing"));
        assert_eq!(orphan_details(&pending, None), None);
    }

    #[test]
    fn with_a_metadata_key_only_marked_payment_intents_are_orphans() {
        assert_eq!(orphan_details(&succeeded(), Some("order_id")), None);
        let mut marked = succeeded();
        marked.metadata.insert("order_id".into(), "A-17".into());
        let details = orphan_details(&marked, Some("order_id"));
        assert_eq!(
            details.as_ref().and_then(|d| d.get("metadata")),
            Some(&serde_json::json!({"order_id": "A-17"}))
        );
    }
}
