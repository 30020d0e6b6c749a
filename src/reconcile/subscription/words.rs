//! The application's words for Stripe's subscription statuses
//! (`RECONCILER_SUBSCRIPTION_STATUSES`, docs/subscriptions.md, "Status
//! words"): which Stripe status a word in the table stands for, and the word
//! a repair writes for a status.

use super::status::SubscriptionStatus;

/// `stripe_status=word,word;…`, validated by the settings: each status at
/// most once, each word non-empty and under one status. The first word of a
/// status is the one a repair writes; any of its words reads as it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionWords {
    /// `(status, words)`; a status left out has no words (a row cannot be
    /// repaired to it).
    statuses: Vec<(SubscriptionStatus, Vec<String>)>,
}

impl Default for SubscriptionWords {
    /// Each of Stripe's eight statuses is its own word (Cashier, Pay and
    /// enum columns of Stripe's words).
    fn default() -> Self {
        SubscriptionWords {
            statuses: SubscriptionStatus::ALL
                .into_iter()
                .map(|s| {
                    let word = s.as_str().to_owned();
                    (s, vec![word])
                })
                .collect(),
        }
    }
}

impl SubscriptionWords {
    /// A map from already validated `(status, words)` pairs (the settings'
    /// parser checks them; tests build maps directly).
    pub fn new(statuses: Vec<(SubscriptionStatus, Vec<String>)>) -> Self {
        SubscriptionWords { statuses }
    }

    /// The Stripe status a word of the table stands for; `None` for a word
    /// the map does not name (the row is then unverifiable).
    pub fn status_of(&self, word: &str) -> Option<&SubscriptionStatus> {
        self.statuses
            .iter()
            .find(|(_, words)| words.iter().any(|w| w == word))
            .map(|(s, _)| s)
    }

    /// The word a repair writes for `status` (its first); `None` when the
    /// map gives the status no word.
    pub fn first_word(&self, status: &SubscriptionStatus) -> Option<&str> {
        self.statuses
            .iter()
            .find(|(s, _)| s == status)
            .and_then(|(_, words)| words.first())
            .map(String::as_str)
    }

    /// Every word the map names, status by status (for `migrate`'s check
    /// of an enum column).
    pub fn words(&self) -> impl Iterator<Item = &str> {
        self.statuses
            .iter()
            .flat_map(|(_, words)| words.iter().map(String::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_maps_each_status_to_its_own_word() {
        let map = SubscriptionWords::default();
        for s in SubscriptionStatus::ALL {
            assert_eq!(map.status_of(s.as_str()), Some(&s));
            assert_eq!(map.first_word(&s), Some(s.as_str()));
        }
        assert_eq!(map.status_of("cancelled"), None);
        assert_eq!(map.words().count(), 8);
    }

    #[test]
    fn application_words_read_as_their_status_and_the_first_is_written() {
        let map = SubscriptionWords::new(vec![
            (SubscriptionStatus::Active, vec!["active".into()]),
            (SubscriptionStatus::Trialing, vec!["trial".into()]),
            (
                SubscriptionStatus::Canceled,
                vec!["cancelled".into(), "expired".into()],
            ),
        ]);
        assert_eq!(
            map.status_of("expired"),
            Some(&SubscriptionStatus::Canceled)
        );
        assert_eq!(map.status_of("trial"), Some(&SubscriptionStatus::Trialing));
        assert_eq!(map.status_of("canceled"), None);
        assert_eq!(
            map.first_word(&SubscriptionStatus::Canceled),
            Some("cancelled")
        );
        assert_eq!(map.first_word(&SubscriptionStatus::Unpaid), None);
    }
}
