//! Rows per verdict, as a batch, a run and an events run count them.

use serde::Serialize;

use crate::reconcile::Verdict;

/// Rows per verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerdictCounts([u64; 5]);

impl VerdictCounts {
    fn index(v: Verdict) -> usize {
        Verdict::ALL.iter().position(|x| *x == v).unwrap_or(0)
    }

    /// Counts one row.
    pub fn add(&mut self, v: Verdict) {
        self.0[Self::index(v)] += 1;
    }

    /// Rows with this verdict.
    pub fn get(&self, v: Verdict) -> u64 {
        self.0[Self::index(v)]
    }

    /// Adds another set of counts.
    pub fn merge(&mut self, other: &VerdictCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }

    /// `(verdict, rows)` for every verdict, in report order.
    pub fn iter(&self) -> impl Iterator<Item = (Verdict, u64)> + '_ {
        Verdict::ALL.into_iter().map(|v| (v, self.get(v)))
    }

    /// `{"in_sync": n, "in_flight": n, ...}`
    pub fn to_json(&self) -> serde_json::Value {
        self.iter()
            .map(|(v, n)| (v.as_str().to_owned(), serde_json::Value::from(n)))
            .collect()
    }
}

impl Serialize for VerdictCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}
