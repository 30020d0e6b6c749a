//! How the application's `payments` table speaks (docs/schema.md, "Status
//! words" and "Amounts in major units"): its words for the canonical local states
//! (`RECONCILER_LOCAL_STATUSES`, [`StatusMap`]) and the unit of its amount
//! column (`RECONCILER_AMOUNT_UNIT`, [`AmountUnit`]).

use serde::Deserialize;

use super::error::{invalid, ConfigError};
use super::value;
use super::word_map::WordMapSyntax;
use crate::reconcile::LocalStatus;

const STATUSES_VAR: &str = "RECONCILER_LOCAL_STATUSES";
const UNIT_VAR: &str = "RECONCILER_AMOUNT_UNIT";

/// The default `RECONCILER_LOCAL_STATUSES`: the design note's own words.
pub const DEFAULT_LOCAL_STATUSES: &str = "pending=pending;paid=paid;failed=failed";

/// The application's words for each canonical local state, validated:
/// `state=word,word;state=word` with states among `pending`, `paid`,
/// `failed`, `refunded` (the first three required), every word non-empty
/// and mapped once. The first word of a state is the one the canonical
/// writer writes; any word of a state matches it (`WHERE status =
/// ANY($words)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusMap {
    /// `(state, words)` in [`LocalStatus::ALL`] order; a state left
    /// out of the variable (only `refunded` may be) has no words.
    states: Vec<(LocalStatus, Vec<String>)>,
}

impl Default for StatusMap {
    fn default() -> Self {
        Self::identity()
    }
}

impl StatusMap {
    fn identity() -> Self {
        let states = LocalStatus::ALL
            .into_iter()
            .map(|s| {
                let words = match s {
                    LocalStatus::Refunded => Vec::new(),
                    _ => vec![s.as_str().to_owned()],
                };
                (s, words)
            })
            .collect();
        StatusMap { states }
    }

    /// Parses `RECONCILER_LOCAL_STATUSES`, e.g.
    /// `pending=pending,awaiting_payment;paid=paid,complete;failed=failed,canceled;refunded=refunded`.
    /// Spaces around words are ignored.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the variable: an entry without `=`,
    /// an unknown or repeated state, an empty word, a word mapped twice, or
    /// `pending`, `paid` or `failed` missing.
    pub fn parse(raw: &str) -> Result<Self, ConfigError> {
        let syntax = WordMapSyntax {
            var: STATUSES_VAR,
            key: "state",
            parse_key: |name| {
                LocalStatus::canonical(name).ok_or_else(|| {
                    format!("{name:?} is not a local state (pending, paid, failed, refunded)")
                })
            },
        };
        let given = syntax.parse(raw)?;
        for required in [LocalStatus::Pending, LocalStatus::Paid, LocalStatus::Failed] {
            if !given.iter().any(|(s, _)| *s == required) {
                return Err(invalid(
                    STATUSES_VAR,
                    format!("{required} is missing (pending, paid and failed are required)"),
                ));
            }
        }
        let states = LocalStatus::ALL
            .into_iter()
            .map(|s| {
                let words = given
                    .iter()
                    .find(|(g, _)| *g == s)
                    .map(|(_, w)| w.clone())
                    .unwrap_or_default();
                (s, words)
            })
            .collect();
        Ok(StatusMap { states })
    }

    /// The canonical state of a `payments.status` value; a word the map does
    /// not hold (or NULL, as `""`) is [`LocalStatus::Other`] with the word.
    pub fn local(&self, word: &str) -> LocalStatus {
        self.states
            .iter()
            .find(|(_, words)| words.iter().any(|w| w == word))
            .map_or_else(|| LocalStatus::Other(word.to_owned()), |(s, _)| s.clone())
    }

    /// Every word of `state`, first the one the writer writes; empty for
    /// `refunded` when not mapped and for [`LocalStatus::Other`].
    pub fn words(&self, state: &LocalStatus) -> &[String] {
        self.states
            .iter()
            .find(|(s, _)| s == state)
            .map_or(&[], |(_, words)| words.as_slice())
    }

    /// The word the canonical writer writes for `state` (its first); `None`
    /// when the state has no words.
    pub fn first_word(&self, state: &LocalStatus) -> Option<&str> {
        self.words(state).first().map(String::as_str)
    }
}

/// `RECONCILER_AMOUNT_UNIT`: how `RECONCILER_AMOUNT_COLUMN` holds amounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AmountUnit {
    /// `minor` (default): an integer column in minor units (cents, yen), as
    /// Stripe's `amount`.
    #[default]
    Minor,
    /// `major`: a `numeric` column in major units (`12.00` dollars),
    /// converted per row with Stripe's exponent of the row's currency; needs
    /// `RECONCILER_CURRENCY_COLUMN`.
    Major,
}

impl AmountUnit {
    /// The variable's value.
    pub fn as_str(self) -> &'static str {
        match self {
            AmountUnit::Minor => "minor",
            AmountUnit::Major => "major",
        }
    }
}

#[derive(Deserialize)]
struct StatusVars {
    local_statuses: Option<String>,
    amount_unit: Option<String>,
}

/// The group, validated.
pub(super) struct Vocabulary {
    pub(super) statuses: StatusMap,
    pub(super) amount_unit: AmountUnit,
}

/// Parses `RECONCILER_LOCAL_STATUSES` and `RECONCILER_AMOUNT_UNIT`;
/// `has_currency_column`: `RECONCILER_CURRENCY_COLUMN` is set (major units
/// need the row's currency for the exponent).
///
/// # Errors
/// [`ConfigError::Invalid`] naming the malformed variable.
pub(super) fn parse<I>(vars: I, has_currency_column: bool) -> Result<Vocabulary, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: StatusVars = value::read(Some("RECONCILER_"), vars)?;
    let statuses = match raw.local_statuses.as_deref().map(str::trim) {
        None | Some("") => StatusMap::default(),
        Some(text) => StatusMap::parse(text)?,
    };
    let amount_unit = match raw.amount_unit.as_deref().map(str::trim) {
        None | Some("") | Some("minor") => AmountUnit::Minor,
        Some("major") => AmountUnit::Major,
        Some(other) => {
            return Err(invalid(
                UNIT_VAR,
                format!("{other:?} is not minor or major"),
            ))
        }
    };
    if amount_unit == AmountUnit::Major && !has_currency_column {
        return Err(invalid(
            UNIT_VAR,
            "major needs RECONCILER_CURRENCY_COLUMN: without the row's currency the number of decimal places is unknown",
        ));
    }
    Ok(Vocabulary {
        statuses,
        amount_unit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "pending=pending,awaiting_payment;paid=paid,complete;\
                           failed=failed,canceled,expired;refunded=refunded,partially_refunded";

    #[test]
    fn the_default_is_the_design_notes_words() {
        let parsed = StatusMap::parse(DEFAULT_LOCAL_STATUSES).unwrap();
        assert_eq!(parsed, StatusMap::default());
        for word in ["pending", "paid", "failed"] {
            assert_eq!(parsed.local(word), LocalStatus::parse(word));
        }
        assert_eq!(
            parsed.local("refunded"),
            LocalStatus::Other("refunded".into())
        );
        assert!(parsed.words(&LocalStatus::Refunded).is_empty());
    }

    #[test]
    fn application_words_map_to_canonical_states() {
        let map = StatusMap::parse(EXAMPLE).unwrap();
        for (word, state) in [
            ("pending", LocalStatus::Pending),
            ("awaiting_payment", LocalStatus::Pending),
            ("complete", LocalStatus::Paid),
            ("canceled", LocalStatus::Failed),
            ("expired", LocalStatus::Failed),
            ("partially_refunded", LocalStatus::Refunded),
            ("refunded", LocalStatus::Refunded),
            ("on_hold", LocalStatus::Other("on_hold".into())),
            ("Complete", LocalStatus::Other("Complete".into())),
            ("", LocalStatus::Other(String::new())),
        ] {
            assert_eq!(map.local(word), state, "{word}");
        }
        assert_eq!(
            map.words(&LocalStatus::Pending),
            ["pending", "awaiting_payment"]
        );
        assert_eq!(map.first_word(&LocalStatus::Failed), Some("failed"));
        assert_eq!(
            StatusMap::parse("paid=complete,paid; pending = awaiting ;failed=canceled")
                .unwrap()
                .first_word(&LocalStatus::Paid),
            Some("complete")
        );
        assert_eq!(map.first_word(&LocalStatus::Other("x".into())), None);
    }

    #[test]
    fn a_malformed_map_names_the_variable_and_the_fault() {
        for (raw, fault) in [
            (
                "pending=pending;paid=paid;failed=failed;shipped=sent",
                "not a local state",
            ),
            (
                "pending=pending;paid=paid,pending;failed=failed",
                "mapped twice",
            ),
            (
                "pending=pending;paid=paid;failed=failed,failed",
                "mapped twice",
            ),
            ("pending=pending;paid=;failed=failed", "empty word"),
            (
                "pending=pending;paid=paid,,complete;failed=failed",
                "empty word",
            ),
            ("pending=pending;paid=paid", "failed is missing"),
            ("paid=paid;failed=failed", "pending is missing"),
            (
                "pending=pending;failed=failed;refunded=refunded",
                "paid is missing",
            ),
            (
                "pending=pending;paid=paid;failed=failed;paid=complete",
                "given twice",
            ),
            ("pending=pending;paid;failed=failed", "not state=word"),
        ] {
            let e = StatusMap::parse(raw).unwrap_err();
            assert_eq!(e.var(), Some(STATUSES_VAR), "{raw}");
            assert!(e.to_string().starts_with(STATUSES_VAR), "{raw}: {e}");
            assert!(e.to_string().contains(fault), "{raw}: {e}");
        }
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_amount_unit_is_minor_unless_major_with_a_currency() {
        let unit = |v: &[(&str, &str)], currency| parse(vars(v), currency).map(|g| g.amount_unit);
        assert_eq!(unit(&[], false).unwrap(), AmountUnit::Minor);
        assert_eq!(
            unit(&[(UNIT_VAR, "minor")], false).unwrap(),
            AmountUnit::Minor
        );
        assert_eq!(
            unit(&[(UNIT_VAR, "major")], true).unwrap(),
            AmountUnit::Major
        );
        let e = unit(&[(UNIT_VAR, "major")], false).unwrap_err();
        assert_eq!(e.var(), Some(UNIT_VAR));
        assert!(e.to_string().contains("RECONCILER_CURRENCY_COLUMN"), "{e}");
        let e = unit(&[(UNIT_VAR, "cents")], true).unwrap_err();
        assert_eq!(e.var(), Some(UNIT_VAR));
    }
}
