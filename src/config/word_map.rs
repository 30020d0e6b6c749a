//! The word map form shared by `RECONCILER_LOCAL_STATUSES` and
//! `RECONCILER_SUBSCRIPTION_STATUSES` (docs/configuration.md, "Status
//! words"): `key=word,word;key=word`, spaces around words ignored, each key
//! once, each word non-empty and under one key.

use super::error::{invalid, ConfigError};

/// The variable a map comes from and how its keys read.
pub(super) struct WordMapSyntax<K> {
    /// The variable's name, for errors.
    pub(super) var: &'static str,
    /// What a key is, for errors (`state`, `status`).
    pub(super) key: &'static str,
    /// The key a name stands for; `Err` with the reason when it is none.
    pub(super) parse_key: fn(&str) -> Result<K, String>,
}

impl<K: PartialEq + Clone> WordMapSyntax<K> {
    /// Parses `raw` into `(key, words)` in the order given.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the variable: an entry without `=`,
    /// a key the syntax rejects or that is given twice, an empty word, a
    /// word mapped twice.
    pub(super) fn parse(&self, raw: &str) -> Result<Vec<(K, Vec<String>)>, ConfigError> {
        let bad = |reason: String| invalid(self.var, reason);
        let mut out: Vec<(K, Vec<String>)> = Vec::new();
        let mut seen: Vec<String> = Vec::new();
        for entry in raw.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, words) = entry
                .split_once('=')
                .ok_or_else(|| bad(format!("{entry:?} is not {}=word,word", self.key)))?;
            let name = name.trim();
            let key = (self.parse_key)(name).map_err(bad)?;
            if out.iter().any(|(k, _)| *k == key) {
                return Err(bad(format!("{name} is given twice")));
            }
            let mut list = Vec::new();
            for word in words.split(',').map(str::trim) {
                if word.is_empty() {
                    return Err(bad(format!("{name} has an empty word")));
                }
                if seen.iter().any(|w| w == word) {
                    return Err(bad(format!(
                        "{word:?} is mapped twice (a word names one {})",
                        self.key
                    )));
                }
                seen.push(word.to_owned());
                list.push(word.to_owned());
            }
            out.push((key, list));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNTAX: WordMapSyntax<String> = WordMapSyntax {
        var: "RECONCILER_TEST_MAP",
        key: "colour",
        parse_key: |name| match name {
            "red" | "blue" => Ok(name.to_owned()),
            other => Err(format!("{other:?} is not a colour")),
        },
    };

    #[test]
    fn entries_keep_their_order_and_words() {
        let map = SYNTAX.parse(" red = a , b ; blue=c;").unwrap();
        assert_eq!(
            map,
            [
                ("red".to_owned(), vec!["a".to_owned(), "b".to_owned()]),
                ("blue".to_owned(), vec!["c".to_owned()])
            ]
        );
        assert!(SYNTAX.parse("").unwrap().is_empty());
    }

    #[test]
    fn each_fault_names_the_variable() {
        for (raw, fault) in [
            ("red", "is not colour=word,word"),
            ("green=a", "is not a colour"),
            ("red=a;red=b", "given twice"),
            ("red=a,,b", "empty word"),
            ("red=a;blue=a", "mapped twice (a word names one colour)"),
        ] {
            let e = SYNTAX.parse(raw).unwrap_err();
            assert_eq!(e.var(), Some("RECONCILER_TEST_MAP"), "{raw}");
            assert!(e.to_string().contains(fault), "{raw}: {e}");
        }
    }
}
