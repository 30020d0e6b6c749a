//! Requests sent to Stripe per endpoint: the metric
//! `stripe_reconciler_stripe_requests{endpoint}` (docs/design.md, "Reading
//! Stripe: retrieve, list, events"). Every attempt counts, retries included: each one
//! spends the rate budget.

use std::sync::atomic::{AtomicU64, Ordering};

/// A Stripe endpoint the gateway calls; its [`Endpoint::as_str`] is the
/// `endpoint` label of `stripe_requests`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `GET /v1/payment_intents/{id}`.
    Retrieve,
    /// `GET /v1/payment_intents` (list pages and the outage probe).
    List,
    /// `GET /v1/events`.
    Events,
}

impl Endpoint {
    /// Every endpoint, in the order the metric lists them.
    pub const ALL: [Endpoint; 3] = [Endpoint::Retrieve, Endpoint::List, Endpoint::Events];

    /// The metric label (bounded: one per variant).
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Retrieve => "retrieve",
            Endpoint::List => "list",
            Endpoint::Events => "events",
        }
    }

    /// Position in [`Endpoint::ALL`] and in [`RequestCounter`]'s slots.
    fn index(self) -> usize {
        match self {
            Endpoint::Retrieve => 0,
            Endpoint::List => 1,
            Endpoint::Events => 2,
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A snapshot of requests sent per endpoint. Serialises as
/// `{"retrieve": n, "list": n, "events": n}` (the run summary's JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RequestCounts {
    /// [`Endpoint::Retrieve`] requests.
    pub retrieve: u64,
    /// [`Endpoint::List`] requests.
    pub list: u64,
    /// [`Endpoint::Events`] requests.
    pub events: u64,
}

impl RequestCounts {
    /// Counts built from one figure per endpoint.
    pub fn from_fn(mut count: impl FnMut(Endpoint) -> u64) -> RequestCounts {
        RequestCounts {
            retrieve: count(Endpoint::Retrieve),
            list: count(Endpoint::List),
            events: count(Endpoint::Events),
        }
    }

    /// Requests sent to `endpoint`.
    pub fn get(&self, endpoint: Endpoint) -> u64 {
        match endpoint {
            Endpoint::Retrieve => self.retrieve,
            Endpoint::List => self.list,
            Endpoint::Events => self.events,
        }
    }

    /// `(endpoint label, count)` for the metric, in [`Endpoint::ALL`] order.
    pub fn by_endpoint(&self) -> [(&'static str, u64); Endpoint::ALL.len()] {
        Endpoint::ALL.map(|e| (e.as_str(), self.get(e)))
    }

    /// All requests.
    pub fn total(&self) -> u64 {
        Endpoint::ALL.iter().map(|e| self.get(*e)).sum()
    }

    /// The requests sent since `earlier` (the same gateway's counts).
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        RequestCounts::from_fn(|e| self.get(e).saturating_sub(earlier.get(e)))
    }
}

/// The gateway's live counters, shared by every concurrent request.
#[derive(Debug, Default)]
pub(super) struct RequestCounter {
    slots: [AtomicU64; Endpoint::ALL.len()],
}

impl RequestCounter {
    /// One more request to `endpoint`.
    pub(super) fn count(&self, endpoint: Endpoint) {
        self.slots[endpoint.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far.
    pub(super) fn snapshot(&self) -> RequestCounts {
        RequestCounts::from_fn(|e| self.slots[e.index()].load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_has_its_own_slot_and_label() {
        let counter = RequestCounter::default();
        for (n, endpoint) in Endpoint::ALL.iter().enumerate() {
            assert_eq!(endpoint.index(), n, "ALL is in index order");
            for _ in 0..=n {
                counter.count(*endpoint);
            }
        }
        let counts = counter.snapshot();
        assert_eq!(
            counts.by_endpoint(),
            [("retrieve", 1), ("list", 2), ("events", 3)]
        );
        assert_eq!(counts.total(), 6);
        let labels: std::collections::HashSet<_> =
            Endpoint::ALL.iter().map(|e| e.as_str()).collect();
        assert_eq!(labels.len(), Endpoint::ALL.len(), "labels are distinct");
    }

    #[test]
    fn since_subtracts_per_endpoint() {
        let before = RequestCounts {
            retrieve: 2,
            list: 1,
            events: 0,
        };
        let after = RequestCounts {
            retrieve: 5,
            list: 1,
            events: 4,
        };
        assert_eq!(
            after.since(&before),
            RequestCounts {
                retrieve: 3,
                list: 0,
                events: 4
            }
        );
    }
}
