//! How many HTTP requests a gateway sent, per Stripe endpoint (the
//! `stripe_requests{endpoint}` gauge). Every attempt counts, retries
//! included: each one is spent from Stripe's rate limit.

use std::sync::atomic::{AtomicU64, Ordering};

use url::Url;

/// A Stripe endpoint the reconciler calls (bounded metric label values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `GET /v1/payment_intents/{id}`.
    Retrieve,
    /// `GET /v1/payment_intents` (list reads and the probe).
    List,
    /// `GET /v1/events`.
    Events,
}

impl Endpoint {
    /// Every endpoint, in label order.
    pub const ALL: [Endpoint; 3] = [Endpoint::Retrieve, Endpoint::List, Endpoint::Events];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Retrieve => "retrieve",
            Endpoint::List => "list",
            Endpoint::Events => "events",
        }
    }

    /// The endpoint a request URL (`{base}/v1/...`) goes to: the last one or
    /// two path segments decide, so a base URL with a path prefix works.
    pub fn of(url: &Url) -> Endpoint {
        let segments: Vec<&str> = url
            .path_segments()
            .map(|s| s.filter(|s| !s.is_empty()).collect())
            .unwrap_or_default();
        match segments.as_slice() {
            [.., "v1", "events"] => Endpoint::Events,
            [.., "v1", "payment_intents"] => Endpoint::List,
            _ => Endpoint::Retrieve,
        }
    }
}

/// Requests sent per endpoint, shared by every concurrent read of a run.
#[derive(Debug, Default)]
pub struct RequestCounts {
    retrieve: AtomicU64,
    list: AtomicU64,
    events: AtomicU64,
}

impl RequestCounts {
    /// Counts one request to `endpoint`.
    pub fn add(&self, endpoint: Endpoint) {
        self.counter(endpoint).fetch_add(1, Ordering::Relaxed);
    }

    /// Requests sent to `endpoint` so far.
    pub fn get(&self, endpoint: Endpoint) -> u64 {
        self.counter(endpoint).load(Ordering::Relaxed)
    }

    fn counter(&self, endpoint: Endpoint) -> &AtomicU64 {
        match endpoint {
            Endpoint::Retrieve => &self.retrieve,
            Endpoint::List => &self.list,
            Endpoint::Events => &self.events,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_told_apart_by_path() {
        let of = |u: &str| Endpoint::of(&Url::parse(u).unwrap());
        assert_eq!(
            of("https://api.stripe.com/v1/events?limit=100"),
            Endpoint::Events
        );
        assert_eq!(
            of("http://127.0.0.1:1/proxy/v1/payment_intents?limit=1"),
            Endpoint::List
        );
        assert_eq!(
            of("https://api.stripe.com/v1/payment_intents/pi_1?expand[]=latest_charge"),
            Endpoint::Retrieve
        );
    }
}
