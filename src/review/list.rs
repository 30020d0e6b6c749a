//! `findings list`: the queue, newest first, as a table, JSON lines or CSV,
//! saying when `--limit` cut it.

use sqlx::PgConnection;

use super::{csv_export, table, ReviewError};
use crate::dashboard::DashboardMode;
use crate::store::{findings, Context};

/// What `findings list` selects.
#[derive(Debug, Clone, Copy)]
pub struct ListQuery<'a> {
    /// Only this kind.
    pub kind: Option<&'a str>,
    /// Only unresolved findings.
    pub open: bool,
    /// At most this many rows.
    pub limit: i64,
}

/// How `findings list` prints the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListFormat {
    /// A table for people, every stored string escaped.
    Table,
    /// One JSON object a line (`--json`).
    Json,
    /// CSV with one header row (`--csv`), ready for `resolve --file`.
    Csv,
}

impl ListFormat {
    /// The format `--csv` and `--json` ask for (clap refuses both at once).
    pub fn of_flags(csv: bool, json: bool) -> Self {
        match (csv, json) {
            (true, _) => ListFormat::Csv,
            (false, true) => ListFormat::Json,
            (false, false) => ListFormat::Table,
        }
    }
}

/// One line of `findings list --json`: the finding and its Dashboard link.
#[derive(serde::Serialize)]
struct ListedFinding<'a> {
    #[serde(flatten)]
    finding: &'a findings::FindingView,
    /// `None` when the stored id is not a well-formed PaymentIntent id.
    dashboard_url: Option<String>,
    /// What disagrees: `{field, local, stripe}` (docs/review.md, "The queue").
    differs: crate::reconcile::Differs,
}

/// Prints the findings `q` selects on stdout in `format`, each with a link
/// to its PaymentIntent in the Stripe Dashboard (`mode`), and says when
/// `--limit` cut the list (on stderr with `--json` and `--csv`, so stdout
/// stays machine-readable).
///
/// # Errors
/// [`ReviewError::Store`] when the queue cannot be read,
/// [`ReviewError::Output`] when it cannot be written.
pub async fn list(
    conn: &mut PgConnection,
    q: ListQuery<'_>,
    format: ListFormat,
    mode: DashboardMode,
) -> Result<(), ReviewError> {
    if format == ListFormat::Csv {
        let rows = findings::list(&mut *conn, q.kind, q.open, q.limit).await?;
        let total = findings::count(&mut *conn, q.kind, q.open).await?;
        csv_export::write(&rows, mode)?;
        if let Some(note) = cut_note(rows.len(), total, q.limit) {
            eprintln!("{note}");
        }
        return Ok(());
    }
    let mut tx = crate::store::begin(&mut *conn)
        .await
        .context("opening a transaction")?;
    let rows = findings::list(&mut tx, q.kind, q.open, q.limit).await?;
    let total = findings::count(&mut tx, q.kind, q.open).await?;
    let cut = cut_note(rows.len(), total, q.limit);
    if format == ListFormat::Json {
        for f in &rows {
            let line = serde_json::to_string(&ListedFinding {
                finding: f,
                dashboard_url: f.dashboard_url(mode),
                differs: f.differs(),
            })?;
            println!("{line}");
        }
        if let Some(note) = cut {
            eprintln!("{note}");
        }
        return Ok(());
    }
    print!("{}", table::render(&rows, &|f| f.dashboard_url(mode)));
    println!(
        "{}",
        cut.unwrap_or_else(|| format!("{} finding(s)", rows.len()))
    );
    Ok(())
}

/// What to say when `--limit` cut the list (`None`: it did not).
fn cut_note(shown: usize, total: i64, limit: i64) -> Option<String> {
    (total > shown as i64).then(|| {
        format!(
            "showing {shown} of {total} findings, newest first (--limit {limit}; raise it to see more)"
        )
    })
}
