//! The review loop (issue 33): `findings list --csv`, `findings show ID` and
//! `findings resolve --file PATH [--by WHO] [--dry-run]`.

use std::collections::HashMap;
use std::path::Path;

use secrecy::ExposeSecret;

use super::findings::ListQuery;
use super::CommandError;
use crate::cli::ShowArgs;
use crate::config::Settings;
use crate::dashboard::DashboardMode;
use crate::reconcile::RepairCommand;
use crate::repair::worker::MAX_ATTEMPTS;
use crate::store::{findings, outbox, Context};
use crate::terminal::{account_or_platform, escape, shorten_or_dash, shown};

fn mode(settings: &Settings, dashboard: Option<DashboardMode>) -> DashboardMode {
    DashboardMode::choose(
        dashboard,
        settings.stripe.api_key.as_ref().map(|k| k.expose_secret()),
    )
}

/// The Dashboard link of a finding's PaymentIntent (`None`: no well-formed id).
pub(crate) fn link(f: &findings::FindingView, mode: DashboardMode) -> Option<String> {
    crate::dashboard::finding_url(
        f.stripe_account_id.as_deref(),
        f.stripe_payment_intent_id.as_deref(),
        f.checkout_session_id.as_deref(),
        mode,
    )
}

/// The header of `findings list --csv`: the JSON's flat fields, `differs`
/// flattened, and an empty `note` to fill in for `resolve --file`.
pub const CSV_HEADER: [&str; 21] = [
    "id",
    "payment_id",
    "order_id",
    "stripe_payment_intent_id",
    "stripe_account_id",
    "kind",
    "local_status",
    "external_status",
    "detected_at",
    "resolved_at",
    "resolution",
    "resolved_by",
    "resolution_note",
    "details",
    "last_seen_at",
    "seconds_to_deadline",
    "dashboard_url",
    "differs_field",
    "differs_local",
    "differs_stripe",
    "note",
];

/// A text cell a spreadsheet must not run as a formula: one that starts with
/// `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'` (OWASP,
/// "CSV Injection"). Order ids and notes are anyone's text.
fn cell(text: Option<&str>) -> String {
    match text {
        None => String::new(),
        Some(t) if t.starts_with(['=', '+', '-', '@', '\t', '\r']) => format!("'{t}"),
        Some(t) => t.to_owned(),
    }
}

/// One finding as a CSV record, in [`CSV_HEADER`]'s order.
fn csv_record(f: &findings::FindingView, mode: DashboardMode) -> Vec<String> {
    let time =
        |t: Option<chrono::DateTime<chrono::Utc>>| t.map(|t| t.to_rfc3339()).unwrap_or_default();
    let d = f.differs();
    vec![
        f.id.to_string(),
        f.payment_key().unwrap_or_default(),
        cell(f.order_id.as_deref()),
        cell(f.stripe_payment_intent_id.as_deref()),
        cell(f.stripe_account_id.as_deref()),
        cell(Some(&f.kind)),
        cell(Some(&f.local_status)),
        cell(f.external_status.as_deref()),
        time(Some(f.detected_at)),
        time(f.resolved_at),
        cell(f.resolution.as_deref()),
        cell(f.resolved_by.as_deref()),
        cell(f.resolution_note.as_deref()),
        f.details
            .as_ref()
            .map(|d| cell(Some(&d.to_string())))
            .unwrap_or_default(),
        time(f.last_seen_at),
        f.seconds_to_deadline
            .map(|s| s.to_string())
            .unwrap_or_default(),
        link(f, mode).unwrap_or_default(),
        cell(Some(&d.field)),
        cell(d.local.as_deref()),
        cell(d.stripe.as_deref()),
        String::new(),
    ]
}

fn csv_error(e: csv::Error) -> CommandError {
    CommandError::Output(serde_json::Error::io(std::io::Error::other(e.to_string())))
}

/// `findings list --csv`: the queue as CSV on stdout, one header row; says on
/// stderr when `--limit` cut it.
pub(super) async fn list_csv(
    settings: &Settings,
    q: ListQuery<'_>,
    dashboard: Option<DashboardMode>,
) -> Result<(), CommandError> {
    let mode = mode(settings, dashboard);
    let (_pool, mut conn) = super::connect(settings).await?;
    let rows = findings::list(&mut conn, q.kind, q.open, q.limit)
        .await
        .map_err(CommandError::Store)?;
    let total = findings::count(&mut conn, q.kind, q.open)
        .await
        .map_err(CommandError::Store)?;
    let mut out = csv::Writer::from_writer(std::io::stdout().lock());
    out.write_record(CSV_HEADER).map_err(csv_error)?;
    for f in &rows {
        out.write_record(csv_record(f, mode)).map_err(csv_error)?;
    }
    out.flush().map_err(|e| csv_error(csv::Error::from(e)))?;
    if total > rows.len() as i64 {
        eprintln!(
            "showing {} of {total} findings, newest first (--limit {}; raise it to see more)",
            rows.len(),
            q.limit
        );
    }
    Ok(())
}

/// `findings show ID --json`.
#[derive(serde::Serialize)]
struct Shown<'a> {
    #[serde(flatten)]
    finding: &'a findings::FindingView,
    dashboard_url: Option<String>,
    differs: crate::reconcile::Differs,
    history: &'a [findings::HistoryEntry],
}

/// `findings show ID`: the finding, what differs, its Dashboard link and its
/// history (every finding of the same payment and kind), escaped; `--json`
/// prints one object.
pub(super) async fn show(settings: &Settings, args: &ShowArgs) -> Result<(), CommandError> {
    let mode = mode(settings, args.dashboard);
    let (_pool, mut conn) = super::connect(settings).await?;
    let Some(f) = findings::find(&mut conn, args.id)
        .await
        .map_err(CommandError::Store)?
    else {
        return Err(CommandError::Refused(format!(
            "finding {} does not exist",
            args.id
        )));
    };
    let history = findings::history(&mut conn, args.id)
        .await
        .map_err(CommandError::Store)?;
    if args.json {
        let shown = Shown {
            finding: &f,
            dashboard_url: link(&f, mode),
            differs: f.differs(),
            history: &history,
        };
        println!("{}", serde_json::to_string(&shown)?);
        return Ok(());
    }
    print!("{}", render_show(&f, link(&f, mode).as_deref(), &history));
    Ok(())
}

fn render_show(
    f: &findings::FindingView,
    link: Option<&str>,
    history: &[findings::HistoryEntry],
) -> String {
    let state = match (&f.resolution, &f.resolved_at) {
        (Some(r), Some(at)) => format!("{} at {}", shown(r), at.format("%Y-%m-%d %H:%M:%S")),
        _ => "open".to_owned(),
    };
    let mut out = format!(
        "finding {}  {}  {state}\n\
         payment:        {}\n\
         order:          {}\n\
         payment intent: {}\n\
         account:        {}\n\
         local status:   {}\n\
         stripe status:  {}\n\
         differs:        {}\n\
         details:        {}\n\
         detected:       {}\n\
         dashboard:      {}\n",
        f.id,
        shown(&f.kind),
        shorten_or_dash(f.payment_key().as_deref()),
        shorten_or_dash(f.order_id.as_deref()),
        shorten_or_dash(f.stripe_payment_intent_id.as_deref()),
        account_or_platform(f.stripe_account_id.as_deref()),
        shown(&f.local_status),
        shorten_or_dash(f.external_status.as_deref()),
        shown(&f.differs().phrase),
        shown(
            &f.details
                .as_ref()
                .map_or_else(|| "-".to_owned(), |d| d.to_string())
        ),
        f.detected_at.format("%Y-%m-%d %H:%M:%S"),
        shorten_or_dash(link),
    );
    out.push_str("history:\n");
    for h in history {
        out.push_str(&format!(
            "  {}  finding {:<8} {:<9}  by {}{}{}\n",
            h.at.format("%Y-%m-%d %H:%M:%S"),
            h.finding_id,
            shown(&h.what),
            shorten_or_dash(h.who.as_deref()),
            h.resolution
                .as_deref()
                .map(|r| format!(" ({})", shown(r)))
                .unwrap_or_default(),
            h.note
                .as_deref()
                .map(|n| format!(": {}", shown(n)))
                .unwrap_or_default(),
        ));
    }
    out
}

/// One resolution a file asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLine {
    /// The line of the file (1 is the header).
    pub line: u64,
    /// The finding.
    pub id: i64,
    /// Why (not empty).
    pub note: String,
    /// Who (the line's `by`, else `--by`).
    pub by: String,
}

/// The line (1-based, as an editor counts it) where the record at `position`
/// starts. The csv crate's own line count is one short after a CRLF line
/// ending (a spreadsheet's CSV) and counts a blank line before a record as
/// the record's: its byte offset, past any line breaks, is exact.
fn line_of(text: &str, position: &csv::Position) -> u64 {
    let start = usize::try_from(position.byte())
        .unwrap_or(usize::MAX)
        .min(text.len());
    let skipped = text.as_bytes()[start..]
        .iter()
        .take_while(|b| matches!(b, b'\r' | b'\n'))
        .count();
    let newlines = text.as_bytes()[..start + skipped]
        .iter()
        .filter(|b| **b == b'\n')
        .count();
    newlines as u64 + 1
}

/// Why a resolution CSV was refused (nothing is resolved). Each message
/// names the line of the file (1 = the header) so the user can fix it.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The first line is not a CSV header.
    #[error("line 1: not a CSV header: {0}")]
    Header(#[source] csv::Error),
    /// The header lacks `id` or `note`.
    #[error("line 1: the header must name the columns `id` and `note`")]
    Columns,
    /// A line the CSV reader rejects (wrong number of fields, bad quoting).
    #[error("line {line}: malformed CSV: {source}")]
    Malformed {
        line: u64,
        #[source]
        source: csv::Error,
    },
    /// An id that is not a number (the raw text, escaped).
    #[error("line {line}: id {raw:?} is not a finding id")]
    Id { line: u64, raw: String },
    /// A line with an empty note.
    #[error("line {line}: finding {id} has an empty note (say why it is resolved)")]
    EmptyNote { line: u64, id: i64 },
    /// No `by` on the line and none given by `--by` or `USER`.
    #[error("line {line}: finding {id} has no `by` and no --by was given (or USER set)")]
    NoBy { line: u64, id: i64 },
    /// The same finding on two lines.
    #[error("line {line}: finding {id} is already named on line {first}")]
    Twice { line: u64, id: i64, first: u64 },
    /// A header and no line.
    #[error("the file names no finding (a header row, then one line per finding)")]
    Empty,
}

/// Reads a resolution CSV: a header row with `id` and `note` (optional
/// `by`; other columns ignored), then one finding a line. Every line is
/// checked before anything is written.
///
/// # Errors
/// [`FileError`], naming the line: a malformed line (wrong number of fields,
/// bad quoting), an id that is not a number, an empty note, no `by` on the
/// line and no `--by`, an id named twice; or no header / no line at all.
pub fn parse_file(text: &str, default_by: Option<&str>) -> Result<Vec<FileLine>, FileError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(text.as_bytes());
    let headers = reader.headers().map_err(FileError::Header)?.clone();
    let column = |name: &str| headers.iter().position(|h| h.trim() == name);
    let (Some(id_col), Some(note_col)) = (column("id"), column("note")) else {
        return Err(FileError::Columns);
    };
    let by_col = column("by");
    let default_by = default_by.map(str::trim).filter(|b| !b.is_empty());
    let mut seen: HashMap<i64, u64> = HashMap::new();
    let mut lines = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|source| FileError::Malformed {
            line: source.position().map_or(0, |p| line_of(text, p)),
            source,
        })?;
        let line = record.position().map_or(0, |p| line_of(text, p));
        let field = |i: usize| record.get(i).unwrap_or("").trim();
        let raw_id = field(id_col);
        let id: i64 = raw_id.parse().map_err(|_| FileError::Id {
            line,
            raw: escape(raw_id).into_owned(),
        })?;
        let note = field(note_col);
        if note.is_empty() {
            return Err(FileError::EmptyNote { line, id });
        }
        let by = by_col
            .map(field)
            .filter(|b| !b.is_empty())
            .or(default_by)
            .ok_or(FileError::NoBy { line, id })?;
        if let Some(first) = seen.insert(id, line) {
            return Err(FileError::Twice { line, id, first });
        }
        lines.push(FileLine {
            line,
            id,
            note: note.to_owned(),
            by: by.to_owned(),
        });
    }
    if lines.is_empty() {
        return Err(FileError::Empty);
    }
    Ok(lines)
}

/// `findings resolve --file PATH`: resolves every finding the file names in
/// one transaction, or none (the first problem is reported with its line and
/// nothing changes). `--dry-run` prints what would be resolved.
pub(super) async fn resolve_file(
    settings: &Settings,
    path: &Path,
    by: Option<&str>,
    dry_run: bool,
) -> Result<(), CommandError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        CommandError::Usage(format!(
            "cannot read {}: {e}",
            escape(&path.display().to_string())
        ))
    })?;
    let lines = parse_file(&text, by)
        .map_err(|e| CommandError::Refused(format!("{e}; nothing was resolved")))?;
    let (_pool, mut conn) = super::connect(settings).await?;
    let mut tx = crate::store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(CommandError::Store)?;
    let ids: Vec<i64> = lines.iter().map(|l| l.id).collect();
    let named = findings::lock_named(&mut tx, &ids)
        .await
        .map_err(CommandError::Store)?;
    let named: HashMap<i64, &findings::NamedFinding> = named.iter().map(|n| (n.id, n)).collect();
    let types = RepairCommand::EVENT_TYPES;
    check_resolvable(&mut tx, settings, &lines, &named).await?;
    if dry_run {
        print_dry_run(&lines, &named);
        return Ok(());
    }
    let by: Vec<&str> = lines.iter().map(|l| l.by.as_str()).collect();
    let notes: Vec<&str> = lines.iter().map(|l| l.note.as_str()).collect();
    let done = findings::resolve_many(&mut tx, &ids, &by, &notes)
        .await
        .map_err(CommandError::Store)?;
    if done != lines.len() as u64 {
        return Err(CommandError::Refused(format!(
            "{done} of {} findings could be resolved; nothing was resolved",
            lines.len()
        )));
    }
    outbox::close_for_findings(
        &mut tx,
        &settings.outbox,
        &types,
        &ids,
        "superseded by a manual resolution",
    )
    .await
    .map_err(CommandError::Store)?;
    tx.commit()
        .await
        .context("committing the resolutions")
        .map_err(CommandError::Store)?;
    tracing::info!(findings = done, "findings resolved by hand from a file");
    println!(
        "resolved {done} finding(s) from {}",
        escape(&path.display().to_string())
    );
    Ok(())
}

/// Refuses the whole file when a line names a finding that does not exist,
/// is already resolved, or has a repair command pending.
async fn check_resolvable(
    tx: &mut sqlx::PgConnection,
    settings: &Settings,
    lines: &[FileLine],
    named: &HashMap<i64, &findings::NamedFinding>,
) -> Result<(), CommandError> {
    let types = RepairCommand::EVENT_TYPES;
    for l in lines {
        let refuse = |why: String| {
            CommandError::Refused(format!(
                "line {}: finding {} {why}; nothing was resolved",
                l.line, l.id
            ))
        };
        match named.get(&l.id) {
            None => return Err(refuse("does not exist".into())),
            Some(n) if !n.open => return Err(refuse("is already resolved".into())),
            Some(_) => {}
        }
        if outbox::has_pending_repair(&mut *tx, &settings.outbox, &types, l.id, MAX_ATTEMPTS)
            .await
            .map_err(CommandError::Store)?
        {
            return Err(refuse(
                "has a repair command pending in the outbox (run `stripe-reconciler repair`)"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// What `--dry-run` prints: each finding that would be resolved, escaped.
fn print_dry_run(lines: &[FileLine], named: &HashMap<i64, &findings::NamedFinding>) {
    for l in lines {
        let kind = named.get(&l.id).map_or("", |n| n.kind.as_str());
        println!(
            "would resolve finding {} ({}) by {}: {}",
            l.id,
            escape(kind),
            escape(&l.by),
            escape(&l.note)
        );
    }
    println!(
        "{} finding(s) would be resolved; nothing changed (--dry-run)",
        lines.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_whole_before_anything_is_written() {
        let ok = parse_file("id,note,by\n3,checked,ann\n4, fine ,\n", Some("bob")).unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!((ok[0].id, ok[0].by.as_str(), ok[0].line), (3, "ann", 2));
        assert_eq!((ok[1].note.as_str(), ok[1].by.as_str()), ("fine", "bob"));

        let err = |text: &str| parse_file(text, Some("bob")).unwrap_err().to_string();
        assert!(err("id,note\n3,x\n4,\n").starts_with("line 3: finding 4 has an empty note"));
        assert!(err("id,note\n3,x\nabc,y\n").starts_with("line 3: id \"abc\""));
        assert!(err("id,note\n3,x\n3,y\n").contains("line 3: finding 3 is already named on line 2"));
        assert!(err("id,note\n3,x\n4,y,extra\n").starts_with("line 3: malformed CSV"));
        assert!(err("id,why\n3,x\n").starts_with("line 1:"));
        assert!(err("id,note\n").contains("names no finding"));
        assert!(parse_file("id,note\n3,x\n", None)
            .unwrap_err()
            .to_string()
            .contains("no `by`"));
    }

    #[test]
    fn csv_cells_never_start_a_formula() {
        assert_eq!(cell(Some("=HYPERLINK(\"x\")")), "'=HYPERLINK(\"x\")");
        assert_eq!(cell(Some("@SUM(A1)")), "'@SUM(A1)");
        assert_eq!(cell(Some("A-17")), "A-17");
        assert_eq!(
            CSV_HEADER.len(),
            CSV_HEADER
                .iter()
                .collect::<std::collections::HashSet<_>>()
                .len()
        );
    }
}
