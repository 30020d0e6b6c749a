//! The two sides of a subscription, as plain data: what the application's
//! row says ([`SubscriptionRow`]) and what Stripe says ([`SubscriptionFacts`],
//! filled by the gateway from a Subscription object). Stripe's rules for
//! reading them (docs/subscriptions.md, "Reading Stripe"): the period end is
//! the earliest over the items, the top-level field for older API versions;
//! Stripe's ends-at is `ended_at`, else `cancel_at`, else none.

use chrono::{DateTime, Utc};

use super::status::SubscriptionStatus;

/// One item of a subscription (`items.data[]`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscriptionItem {
    /// `price.id`, else `plan.id` (older API versions, some emulators).
    pub price: Option<String>,
    /// `quantity` (seats); `None` for metered prices.
    pub quantity: Option<i64>,
    /// The item's `current_period_end` (API versions since
    /// `2025-03-31.basil`).
    pub current_period_end: Option<DateTime<Utc>>,
}

/// What Stripe says about one subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionFacts {
    /// `status`.
    pub status: SubscriptionStatus,
    /// `items.data` (the first page Stripe embeds; `items.has_more` beyond
    /// it is not read).
    pub items: Vec<SubscriptionItem>,
    /// The top-level `current_period_end` (API versions before basil).
    pub current_period_end: Option<DateTime<Utc>>,
    /// `cancel_at_period_end`.
    pub cancel_at_period_end: bool,
    /// `cancel_at`: when a scheduled cancellation takes effect.
    pub cancel_at: Option<DateTime<Utc>>,
    /// `ended_at`: when the subscription actually ended.
    pub ended_at: Option<DateTime<Utc>>,
    /// `trial_end`.
    pub trial_end: Option<DateTime<Utc>>,
}

impl SubscriptionFacts {
    /// A subscription in `status` with nothing else known (tests, and the
    /// base of the gateway's parse).
    pub fn with_status(status: SubscriptionStatus) -> Self {
        SubscriptionFacts {
            status,
            items: Vec::new(),
            current_period_end: None,
            cancel_at_period_end: false,
            cancel_at: None,
            ended_at: None,
            trial_end: None,
        }
    }

    /// The paid period's end: the earliest item `current_period_end`, else
    /// the top-level one; `None` when Stripe gives neither.
    pub fn period_end(&self) -> Option<DateTime<Utc>> {
        self.items
            .iter()
            .filter_map(|i| i.current_period_end)
            .min()
            .or(self.current_period_end)
    }

    /// Stripe's ends-at: `ended_at`, else `cancel_at`, else `None` (renews).
    pub fn ends_at(&self) -> Option<DateTime<Utc>> {
        self.ended_at.or(self.cancel_at)
    }

    /// Whether any item bills `price` (by `price.id`, else `plan.id`).
    pub fn has_price(&self, price: &str) -> bool {
        self.items.iter().any(|i| i.price.as_deref() == Some(price))
    }

    /// The item whose quantity the application's is compared with: the one
    /// with the application's price when it has one Stripe bills, else the
    /// only item; `None` when that is ambiguous (several items, no price).
    pub fn item_for(&self, price: Option<&str>) -> Option<&SubscriptionItem> {
        if let Some(p) = price {
            if let Some(item) = self.items.iter().find(|i| i.price.as_deref() == Some(p)) {
                return Some(item);
            }
        }
        match self.items.as_slice() {
            [only] => Some(only),
            _ => None,
        }
    }
}

/// A configured column's value on the row: `None` when the column is not
/// configured (its kind is never judged), `Some(None)` for SQL NULL.
pub type Column<T> = Option<Option<T>>;

/// One row of the application's subscriptions table, as classification
/// needs it; only the configured columns are read (docs/subscriptions.md,
/// "Columns").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscriptionRow {
    /// `RECONCILER_SUBSCRIPTION_STATUS_COLUMN`; `None` when it is `none`
    /// (access follows the end columns). NULL reads as `Some(None)`.
    pub status: Column<String>,
    /// `RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN`.
    pub period_end: Column<DateTime<Utc>>,
    /// `RECONCILER_SUBSCRIPTION_ENDS_AT_COLUMN` (NULL: renews).
    pub ends_at: Column<DateTime<Utc>>,
    /// `RECONCILER_SUBSCRIPTION_PRICE_COLUMN` (NULL: Cashier's multi-item
    /// subscriptions; not compared).
    pub price: Column<String>,
    /// `RECONCILER_SUBSCRIPTION_QUANTITY_COLUMN` (NULL: not compared).
    pub quantity: Column<i64>,
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(secs: i64) -> Option<DateTime<Utc>> {
        Utc.timestamp_opt(secs, 0).single()
    }

    fn item(price: &str, quantity: i64, end: i64) -> SubscriptionItem {
        SubscriptionItem {
            price: Some(price.into()),
            quantity: Some(quantity),
            current_period_end: at(end),
        }
    }

    #[test]
    fn the_period_end_is_the_earliest_item_else_the_top_level() {
        let mut s = SubscriptionFacts::with_status(SubscriptionStatus::Active);
        assert_eq!(s.period_end(), None);
        s.current_period_end = at(500);
        assert_eq!(s.period_end(), at(500), "older API versions");
        s.items = vec![item("price_a", 1, 300), item("price_b", 2, 200)];
        assert_eq!(s.period_end(), at(200), "the item wins, the earliest");
    }

    #[test]
    fn ends_at_is_ended_at_else_cancel_at() {
        let mut s = SubscriptionFacts::with_status(SubscriptionStatus::Active);
        assert_eq!(s.ends_at(), None);
        s.cancel_at = at(9);
        assert_eq!(s.ends_at(), at(9));
        s.ended_at = at(5);
        assert_eq!(s.ends_at(), at(5));
    }

    #[test]
    fn the_quantity_item_follows_the_price_else_a_single_item() {
        let mut s = SubscriptionFacts::with_status(SubscriptionStatus::Active);
        s.items = vec![item("price_a", 1, 1), item("price_b", 7, 1)];
        assert_eq!(
            s.item_for(Some("price_b")).and_then(|i| i.quantity),
            Some(7)
        );
        assert_eq!(s.item_for(None), None, "ambiguous");
        assert_eq!(s.item_for(Some("price_x")), None);
        assert!(s.has_price("price_a") && !s.has_price("price_x"));
        s.items.truncate(1);
        assert_eq!(
            s.item_for(Some("price_x")).and_then(|i| i.quantity),
            Some(1)
        );
    }
}
