//! Bounded metric label values for finding kinds (docs/operations.md,
//! "Metrics": label values are bounded): whatever strings Stripe or the database hold, the
//! `open_findings{kind}` gauge gets at most [`MAX_KIND_LABELS`] label values.
//! The raw kind stays in the finding's row; only the label is bounded.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use super::kind::FindingKind;
use super::status::{ExternalStatus, LocalStatus};

/// Every finding kind with a fixed name ([`FindingKind::ALL`], in its
/// order), each its own label value.
pub const KNOWN_KINDS: [&str; FindingKind::ALL.len()] = {
    // A reference, so the const loop never drops a `FindingKind`.
    const ALL: &[FindingKind] = &FindingKind::ALL;
    let mut names = [""; ALL.len()];
    let mut i = 0;
    while i < ALL.len() {
        names[i] = match ALL[i].fixed_name() {
            Some(name) => name,
            // `ALL` holds no `Unexpected`; the kind test proves it.
            None => OTHER_KIND,
        };
        i += 1;
    }
    names
};

/// The label of a kind that is neither known nor `unexpected:` (a kind
/// written by a newer version, or a hand-made row).
pub const OTHER_KIND: &str = "other";

/// The local statuses an `unexpected:` label keeps ([`LocalStatus::PARSED`]);
/// any other is `other`.
static LOCAL: [LocalStatus; 3] = LocalStatus::PARSED;

/// Stripe's seven documented PaymentIntent statuses
/// ([`ExternalStatus::ALL`]); any other is `unknown`.
static EXTERNAL: [ExternalStatus; 7] = ExternalStatus::ALL;

/// `UNEXPECTED[local][external]`, derived from [`LOCAL`] and [`EXTERNAL`]:
/// `unexpected:<local>-><external>`, the last row local `other`, the last
/// column Stripe `unknown`. Built once, on first use.
static UNEXPECTED: LazyLock<Vec<Vec<String>>> = LazyLock::new(|| {
    let locals = LOCAL.iter().map(LocalStatus::as_str).chain(["other"]);
    locals
        .map(|l| {
            let externals = EXTERNAL
                .iter()
                .map(ExternalStatus::as_str)
                .chain(["unknown"]);
            externals.map(|e| format!("unexpected:{l}->{e}")).collect()
        })
        .collect()
});

/// The most label values [`kind_label`] can produce: the known kinds, every
/// bounded `unexpected:` pair, and [`OTHER_KIND`].
pub const MAX_KIND_LABELS: usize =
    KNOWN_KINDS.len() + (LocalStatus::PARSED.len() + 1) * (ExternalStatus::ALL.len() + 1) + 1;

/// The metric label for a stored finding kind: a known kind as it is;
/// `unexpected:<local>-><external>` with `<local>` one of `pending`, `paid`,
/// `failed` (else `other`) and `<external>` one of Stripe's seven documented
/// statuses (else `unknown`); anything else [`OTHER_KIND`]. Allocates only
/// the `unexpected:` table, once; the result is one of at most
/// [`MAX_KIND_LABELS`] strings.
pub fn kind_label(kind: &str) -> &'static str {
    if let Some(known) = KNOWN_KINDS.iter().find(|k| **k == kind) {
        return known;
    }
    let Some(pair) = kind.strip_prefix("unexpected:") else {
        return OTHER_KIND;
    };
    // Split at the last "->": Stripe's statuses never contain it, a local
    // status from the database might.
    let (local, external) = pair.rsplit_once("->").unwrap_or((pair, ""));
    let l = LOCAL
        .iter()
        .position(|s| s.as_str() == local)
        .unwrap_or(LOCAL.len());
    let e = EXTERNAL
        .iter()
        .position(|s| s.as_str() == external)
        .unwrap_or(EXTERNAL.len());
    UNEXPECTED
        .get(l)
        .and_then(|row| row.get(e))
        .map_or(OTHER_KIND, String::as_str)
}

/// Open findings per kind (as the store counts them) per bounded label,
/// summing the kinds that share a label; ordered by label.
pub fn open_findings_by_label<S: AsRef<str>>(by_kind: &[(S, i64)]) -> Vec<(&'static str, i64)> {
    let mut by_label: BTreeMap<&'static str, i64> = BTreeMap::new();
    for (kind, n) in by_kind {
        *by_label.entry(kind_label(kind.as_ref())).or_default() += n;
    }
    by_label.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::classify_status;

    fn random_from(alphabet: &[u8]) -> String {
        let len = fastrand::usize(1..24);
        (0..len)
            .map(|_| fastrand::choice(alphabet).map_or('x', |b| char::from(*b)))
            .collect()
    }

    /// A status Stripe might add: snake_case, never one of the seven.
    fn random_status() -> String {
        random_from(b"abcdefghijklmnopqrstuvwxyz_0123456789")
    }

    /// Anything a database column might hold, separators included.
    fn random_garbage() -> String {
        random_from(b"abcdefghijklmnopqrstuvwxyz_->:0123456789 ")
    }

    /// Every label [`kind_label`] may return.
    fn allowed() -> HashSet<&'static str> {
        KNOWN_KINDS
            .iter()
            .copied()
            .chain(UNEXPECTED.iter().flatten().map(String::as_str))
            .chain([OTHER_KIND])
            .collect()
    }

    #[test]
    fn fifty_random_undocumented_statuses_make_one_label() {
        let kinds: Vec<(String, i64)> = (0..50)
            .map(|i| (format!("unexpected:failed->{}_{i}", random_status()), 1))
            .collect();
        let labels = open_findings_by_label(&kinds);
        assert_eq!(labels, [("unexpected:failed->unknown", 50)]);
    }

    #[test]
    fn random_kinds_on_both_sides_stay_in_the_bounded_set() {
        let allowed = allowed();
        assert_eq!(allowed.len(), MAX_KIND_LABELS, "labels are distinct");
        let mut kinds: Vec<(String, i64)> = Vec::new();
        for i in 0..50 {
            let (l, e) = (random_garbage(), random_garbage());
            kinds.push((format!("unexpected:{l}->{e}"), i));
            kinds.push((random_garbage(), 1));
            // What classify really produces for random statuses.
            let d = classify_status(&LocalStatus::parse(&l), &ExternalStatus::parse(&e));
            if let Some(k) = d.kind {
                kinds.push((k.as_str().into_owned(), 1));
            }
        }
        let labels = open_findings_by_label(&kinds);
        for (label, _) in &labels {
            assert!(allowed.contains(label), "{label} is not a bounded label");
        }
        assert!(labels.len() <= MAX_KIND_LABELS);
        let total: i64 = kinds.iter().map(|(_, n)| n).sum();
        assert_eq!(
            labels.iter().map(|(_, n)| n).sum::<i64>(),
            total,
            "no finding lost"
        );
    }

    #[test]
    fn known_and_documented_kinds_keep_their_names() {
        for k in KNOWN_KINDS {
            assert_eq!(kind_label(k), k);
        }
        for l in &LOCAL {
            for e in &EXTERNAL {
                let kind = format!("unexpected:{l}->{e}");
                assert_eq!(kind_label(&kind), kind);
            }
        }
        assert_eq!(
            kind_label("unexpected:refunded->succeeded"),
            "unexpected:other->succeeded"
        );
        assert_eq!(
            kind_label("unexpected:paid->blocked"),
            "unexpected:paid->unknown"
        );
        assert_eq!(
            kind_label("unexpected:a->b->succeeded"),
            "unexpected:other->succeeded"
        );
        assert_eq!(kind_label("unexpected:"), "unexpected:other->unknown");
        assert_eq!(kind_label("brand_new_kind"), OTHER_KIND);
    }

    #[test]
    fn the_derived_table_is_the_hand_written_one() {
        assert_eq!(UNEXPECTED.len(), 4);
        assert_eq!(
            UNEXPECTED[0][0],
            "unexpected:pending->requires_payment_method"
        );
        assert_eq!(UNEXPECTED[1][6], "unexpected:paid->succeeded");
        assert_eq!(UNEXPECTED[2][5], "unexpected:failed->canceled");
        assert_eq!(UNEXPECTED[3][7], "unexpected:other->unknown");
        assert!(UNEXPECTED.iter().all(|row| row.len() == 8));
        assert_eq!(MAX_KIND_LABELS, KNOWN_KINDS.len() + 33);
    }

    #[test]
    fn kinds_sharing_a_label_are_summed() {
        let kinds = [
            ("missed_success", 2),
            ("unexpected:failed->x", 3),
            ("unexpected:failed->y", 4),
            ("zzz", 1),
            ("yyy", 1),
        ];
        assert_eq!(
            open_findings_by_label(&kinds),
            [
                ("missed_success", 2),
                (OTHER_KIND, 2),
                ("unexpected:failed->unknown", 7)
            ]
        );
    }
}
