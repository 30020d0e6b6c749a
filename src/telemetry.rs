//! Tracing to stderr: JSON lines in the cluster, pretty lines in a terminal.
//! Level from `RUST_LOG` (default `info`).
//!
//! Log fields carry text from the database and from Stripe (order ids, error
//! messages). JSON lines keep it exact (serde escapes what JSON must); pretty
//! lines escape every field value with [`crate::terminal`] so a log line is
//! one line and cannot drive the terminal.

use std::fmt;
use std::io::IsTerminal;

use tracing::field::Field;
use tracing::Subscriber;
use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::format::{self, FormatFields, Writer};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. Calling it twice is harmless (the second
/// call is ignored).
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    // Colour codes only for a person at a terminal: a pipe, a file or a
    // pod's log collector gets plain text (and `NO_COLOR` is honoured).
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let _ = match format {
        LogFormat::Json => json(filter, std::io::stderr, ansi).try_init(),
        LogFormat::Pretty => pretty(filter, std::io::stderr, ansi).try_init(),
    };
}

/// One JSON object per line, event fields at the top level, values exact.
fn json<W>(filter: EnvFilter, writer: W, ansi: bool) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi)
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .finish()
}

/// The compact format, with [`escaped_fields`] for event and span fields.
fn pretty<W>(filter: EnvFilter, writer: W, ansi: bool) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi)
        .compact()
        .fmt_fields(escaped_fields())
        .finish()
}

/// Fields as the default formatter lays them out (`message` bare, then
/// `name=value` separated by spaces), each value escaped. `&str` values keep
/// their Debug quotes; a `%display` value and the message are the raw text
/// that needs the escaping.
fn escaped_fields() -> impl for<'w> FormatFields<'w> + Send + Sync + 'static {
    format::debug_fn(
        |w: &mut Writer<'_>, field: &Field, value: &dyn fmt::Debug| {
            let text = format!("{value:?}");
            let text = crate::terminal::escape(&text);
            match field.name() {
                "message" => write!(w, "{text}"),
                name => write!(w, "{name}={text}"),
            }
        },
    )
    .delimited(" ")
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Everything the subscriber writes, for the test to read back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    const HOSTILE: &str = "o-1\x1b[2J\x1b]0;pwned\x07\n  7 refunded\u{202e}\u{9b}";

    fn log_hostile() {
        let span = tracing::info_span!("batch", order = %HOSTILE);
        let _in = span.enter();
        tracing::warn!(
            order_id = %HOSTILE,
            error = HOSTILE,
            "cannot write order {HOSTILE}"
        );
    }

    #[test]
    fn pretty_lines_escape_every_field_value_and_the_message() {
        let out = Captured::default();
        let w = out.clone();
        let sub = pretty(EnvFilter::new("info"), move || w.clone(), false);
        tracing::subscriber::with_default(sub, log_hostile);

        let text = out.text();
        assert_eq!(text.lines().count(), 1, "{text:?}");
        let text = text.strip_suffix('\n').unwrap_or(&text);
        assert!(
            !text.chars().any(crate::terminal::needs_escape),
            "raw control in {text:?}"
        );
        let escaped = r"o-1\u{1b}[2J\u{1b}]0;pwned\u{7}\n  7 refunded\u{202e}\u{9b}";
        assert!(text.contains(&format!("order_id={escaped}")), "{text}");
        assert!(
            text.contains(&format!("cannot write order {escaped}")),
            "{text}"
        );
        // The compact format puts the span's fields after the event's.
        assert!(text.contains(&format!(" order={escaped}")), "{text}");
        assert!(text.contains("WARN"), "{text}");
    }

    #[test]
    fn json_lines_keep_the_exact_text() {
        let out = Captured::default();
        let w = out.clone();
        let sub = json(EnvFilter::new("info"), move || w.clone(), false);
        tracing::subscriber::with_default(sub, log_hostile);

        let text = out.text();
        assert_eq!(text.lines().count(), 1, "{text:?}");
        let line: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(line["order_id"], HOSTILE);
        assert_eq!(line["error"], HOSTILE);
        assert_eq!(line["message"], format!("cannot write order {HOSTILE}"));
    }
}
