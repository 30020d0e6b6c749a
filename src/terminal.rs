//! PURE escaping of untrusted text for a person's terminal, and
//! [`human_duration`] for the durations it prints.
//!
//! Order ids, PaymentIntent ids, statuses, notes and error messages come from
//! the database or from Stripe, and anyone who can influence an order id
//! controls them. Printed raw, an ESC sequence clears the screen or recolours
//! it, an OSC sequence sets the window title, a newline forges a row of the
//! review queue, and a bidi override reorders what the operator reads
//! (docs/design.md, "Invariants": text from the database or from Stripe is
//! escaped in every human-readable output). `--json` output needs
//! none of this: serde escapes what JSON must, and the exact bytes are kept.
//!
//! Escaped, by Unicode general category (`unicode-properties`, so a format
//! character added by a later Unicode version is covered without a list to
//! maintain):
//! - `Cc` controls: C0 (U+0000–U+001F: NUL, BEL, BS, TAB, LF, CR, ESC, …),
//!   DEL (U+007F) and C1 (U+0080–U+009F, which include the 8-bit CSI and OSC);
//! - `Cf` format characters: the bidi embeddings, overrides and isolates
//!   (U+202A–U+202E, U+2066–U+2069, U+061C, U+200E/U+200F), the zero-width
//!   characters (U+200B–U+200D, U+2060–U+2064), U+FEFF, the soft hyphen and
//!   the invisible tag characters (U+E0001–U+E007F);
//! - `Zl`/`Zp`: U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR, which
//!   some terminals and every log viewer treat as a line break.
//!
//! `\n`, `\r` and `\t` become those two-character escapes; every other
//! escaped character becomes `\u{…}` (lower-case hex, as Rust writes it).
//! Backslashes are left alone on purpose: the result is safe to print and
//! one line long, not a reversible encoding (a stored literal `\u{1b}` reads
//! the same as an ESC). The exact bytes are what `--json` is for.

use std::borrow::Cow;
use std::fmt::Write as _;

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Whether `c` must not reach a terminal as itself (see the module doc).
pub fn needs_escape(c: char) -> bool {
    matches!(
        c.general_category(),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    )
}

/// `text` with every character of [`needs_escape`] written as an escape, so
/// the result prints as exactly what it says, on one line. Borrows when
/// nothing needs escaping (the common case).
pub fn escape(text: &str) -> Cow<'_, str> {
    let Some(first) = text.find(needs_escape) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                // Writing into a String cannot fail.
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// [`escape`] for an optional stored value, `-` for `None` (the tables'
/// placeholder for "no value").
pub fn escape_or_dash(text: Option<&str>) -> Cow<'_, str> {
    text.map_or(Cow::Borrowed("-"), escape)
}

/// How many characters of one stored value a human-readable output shows
/// ([`shorten`]): every real order id, PaymentIntent id, status word and
/// note fits; a 1 MB `order_id` does not (docs/operations.md, "Very long
/// values in the tables").
pub const SHOWN_CHARS: usize = 200;

/// `text` for a table cell or a line of `status` / `findings show`: escaped
/// like [`escape`] and, when it has more than `max_chars` characters, cut to
/// its first `max_chars` followed by `…(N chars)`, N being the stored
/// value's full length in characters (`abc…(1048576 chars)`). A cut never
/// splits an escape. `--json` prints the exact value instead.
pub fn shorten(text: &str, max_chars: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max_chars) {
        None => escape(text),
        Some((cut, _)) => Cow::Owned(format!(
            "{}…({} chars)",
            escape(&text[..cut]),
            text.chars().count()
        )),
    }
}

/// [`shorten`] at [`SHOWN_CHARS`]: one stored value in a table or a line.
pub fn shown(text: &str) -> Cow<'_, str> {
    shorten(text, SHOWN_CHARS)
}

/// [`shorten`] at [`SHOWN_CHARS`] for an optional stored value, `-` for
/// `None`.
pub fn shorten_or_dash(text: Option<&str>) -> Cow<'_, str> {
    text.map_or(Cow::Borrowed("-"), |t| shorten(t, SHOWN_CHARS))
}

/// A finding's Stripe account for people: `platform` when it has none (NULL
/// or empty), else the stored id, escaped.
pub fn account_or_platform(account: Option<&str>) -> Cow<'_, str> {
    account
        .filter(|a| !a.is_empty())
        .map_or(Cow::Borrowed("platform"), |a| shorten(a, SHOWN_CHARS))
}

/// A duration in seconds for people: `3d 4h`, `2h 5m`, `42s`.
pub fn human_duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(human_duration(42.0), "42s");
        assert_eq!(human_duration(3_725.0), "1h 2m");
        assert_eq!(human_duration(273_600.0), "3d 4h");
    }

    /// No character a terminal could act on survives.
    fn assert_inert(out: &str) {
        for c in out.chars() {
            assert!(!needs_escape(c), "{c:?} survived in {out:?}");
        }
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        for s in [
            "",
            "order-42",
            "pi_3MtwBwLkdIwHu7ix28a3tqPa",
            "Zoë 東京 💳 €",
        ] {
            assert!(matches!(escape(s), Cow::Borrowed(b) if b == s), "{s}");
        }
    }

    #[test]
    fn the_attacks_of_issue_21_become_visible_text() {
        let cases = [
            ("a\x1b[2Jb", r"a\u{1b}[2Jb"),
            ("\x1b]0;pwned\x07", r"\u{1b}]0;pwned\u{7}"),
            ("\x07", r"\u{7}"),
            ("o-1\n      7  refunded", r"o-1\n      7  refunded"),
            ("o-1\r\tx", r"o-1\r\tx"),
            ("\u{202e}gnp.exe", r"\u{202e}gnp.exe"),
            ("\x7f\0", r"\u{7f}\u{0}"),
        ];
        for (input, want) in cases {
            assert_eq!(escape(input), want, "{input:?}");
        }
    }

    #[test]
    fn every_c0_del_and_c1_control_is_escaped() {
        let controls = (0u32..0x20).chain([0x7f]).chain(0x80..0xa0);
        for c in controls.filter_map(char::from_u32) {
            let out = escape(&c.to_string()).into_owned();
            assert!(out.starts_with('\\'), "{c:?} -> {out:?}");
            assert_inert(&out);
        }
    }

    #[test]
    fn bidi_and_invisible_formatting_characters_are_escaped() {
        let listed = (0x200b..=0x200f)
            .chain(0x202a..=0x202e)
            .chain(0x2066..=0x2069)
            .chain([0xfeff, 0x2028, 0x2029, 0x061c, 0x2060, 0xe0041]);
        for c in listed.filter_map(char::from_u32) {
            assert_eq!(
                escape(&format!("x{c}y")),
                format!("x\\u{{{:x}}}y", u32::from(c)),
                "U+{:04X}",
                u32::from(c)
            );
        }
    }

    #[test]
    fn the_result_is_one_line_with_nothing_a_terminal_acts_on() {
        let hostile = "1\x1b[2J\x1b]0;t\x07\n2\r\u{85}3\u{2028}4\u{202e}5\u{9b}31m";
        let out = escape(hostile);
        assert_eq!(out.lines().count(), 1, "{out:?}");
        assert_inert(&out);
    }

    #[test]
    fn a_long_value_is_cut_with_its_full_length() {
        let order = "a".repeat(1_048_576);
        let shown = shorten(&order, 3);
        assert_eq!(shown, "aaa…(1048576 chars)");
        assert_eq!(
            shorten_or_dash(Some(&order)),
            format!("{}…(1048576 chars)", "a".repeat(SHOWN_CHARS))
        );
        // At the width or under: the value itself, borrowed.
        assert!(matches!(shorten("abc", 3), Cow::Borrowed("abc")));
        assert_eq!(shorten("", 0), "");
        // Characters, not bytes: a cut never splits one.
        assert_eq!(shorten("東京💳€", 2), "東京…(4 chars)");
        // The head is escaped, whole escapes only; the length is the stored one.
        assert_eq!(shorten("a\nbcd", 2), r"a\n…(5 chars)");
        assert_eq!(shorten("\x1b[2J", 1), r"\u{1b}…(4 chars)");
        assert_inert(&shorten("\u{202e}x\ny", 2));
        assert_eq!(shorten_or_dash(None), "-");
    }

    #[test]
    fn none_is_a_dash() {
        assert_eq!(escape_or_dash(None), "-");
        assert_eq!(escape_or_dash(Some("a\nb")), r"a\nb");
    }
}
