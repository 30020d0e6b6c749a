//! What a test reads back from the fake: every request it received, and
//! counts per endpoint and account.

use std::time::Instant;

use super::{StripeFake, LIST, RETRIEVE};

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    /// [`RETRIEVE`], [`LIST`], [`EVENTS`], the subscription endpoints or [`OTHER`].
    pub endpoint: &'static str,
    /// `Stripe-Account` (`None`: the platform).
    pub account: Option<String>,
    /// The retrieved id, or the page's `starting_after`.
    pub id: Option<String>,
    /// `created[gte]` and `created[lte]` as sent.
    pub gte: Option<i64>,
    pub lte: Option<i64>,
    pub expand: Vec<String>,
    /// A subscription list's `status` parameter as sent (`all`, `ended`,
    /// one status); `None` when not sent.
    pub list_status: Option<String>,
    /// The HTTP status answered.
    pub status: u16,
}

impl StripeFake {
    /// Every request received, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state().seen.clone()
    }

    /// Requests to `endpoint`, all accounts.
    pub fn count(&self, endpoint: &str) -> usize {
        self.state()
            .seen
            .iter()
            .filter(|s| s.endpoint == endpoint)
            .count()
    }

    /// Requests to `endpoint` made as `account` (`None`: the platform).
    pub fn count_on(&self, account: Option<&str>, endpoint: &str) -> usize {
        self.state()
            .seen
            .iter()
            .filter(|s| s.endpoint == endpoint && s.account.as_deref() == account)
            .count()
    }

    /// List pages of a `created` window (not the `limit=1` outage probe).
    pub fn window_pages(&self) -> usize {
        self.state()
            .seen
            .iter()
            .filter(|s| s.endpoint == LIST && s.gte.is_some())
            .count()
    }

    /// List requests answered with anything but 200.
    pub fn failed_list_pages(&self) -> usize {
        self.state()
            .seen
            .iter()
            .filter(|s| s.endpoint == LIST && s.status != 200)
            .count()
    }

    /// Ids retrieved one by one, in order.
    pub fn retrieved(&self) -> Vec<String> {
        self.state()
            .seen
            .iter()
            .filter(|s| s.endpoint == RETRIEVE)
            .filter_map(|s| s.id.clone())
            .collect()
    }

    /// `Stripe-Account` of every request (`None`: absent).
    pub fn accounts_asked(&self) -> Vec<Option<String>> {
        self.state()
            .seen
            .iter()
            .map(|s| s.account.clone())
            .collect()
    }

    /// The run read through list pages (the default read mode) and none
    /// failed, so no row fell back to a retrieve because a page failed; at
    /// most `retrieves` rows were retrieved one by one (those no page held).
    pub fn assert_read_by_list(&self, retrieves: usize) {
        let seen = self.seen();
        let pages = self.window_pages();
        assert!(pages > 0, "no list page was requested: {seen:#?}");
        assert_eq!(
            self.failed_list_pages(),
            0,
            "a list page failed (rows fell back to retrieves): {seen:#?}"
        );
        let retrieved = self.retrieved();
        assert!(
            retrieved.len() <= retrieves,
            "{} retrieves after {pages} list pages (at most {retrieves} expected): {retrieved:?}",
            retrieved.len()
        );
    }
}
