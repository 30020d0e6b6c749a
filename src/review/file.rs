//! A resolution CSV for `findings resolve --file`: a header row with `id`
//! and `note` (optional `by`; other columns ignored), then one finding a
//! line, every line checked before anything is written.

use std::collections::HashMap;
use std::path::Path;

use super::ReviewError;
use crate::terminal::escape;

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

/// Reads and checks the resolution CSV at `path` ([`parse_file`]);
/// `default_by` is `--by`.
///
/// # Errors
/// [`ReviewError::Usage`] when the file cannot be read,
/// [`ReviewError::Refused`] naming the first bad line.
pub fn read_file(path: &Path, default_by: Option<&str>) -> Result<Vec<FileLine>, ReviewError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ReviewError::Usage(format!(
            "cannot read {}: {e}",
            escape(&path.display().to_string())
        ))
    })?;
    parse_file(&text, default_by)
        .map_err(|e| ReviewError::Refused(format!("{e}; nothing was resolved")))
}

/// The line (1-based, as an editor counts it) where each record starts,
/// counted once over the text: records come in order, so each call only
/// scans the bytes since the previous one (linear in the file, however
/// many records). The csv crate's own line count is one short after a CRLF
/// line ending (a spreadsheet's CSV) and counts a blank line before a record
/// as the record's: its byte offset, past any line breaks, is exact.
struct LineCounter<'a> {
    text: &'a [u8],
    /// Bytes counted so far.
    offset: usize,
    /// Newlines in `text[..offset]`.
    newlines: u64,
}

impl<'a> LineCounter<'a> {
    fn new(text: &'a str) -> Self {
        LineCounter {
            text: text.as_bytes(),
            offset: 0,
            newlines: 0,
        }
    }

    /// The line of the record at `position` (positions never go back).
    fn line_of(&mut self, position: &csv::Position) -> u64 {
        let start = usize::try_from(position.byte())
            .unwrap_or(usize::MAX)
            .min(self.text.len());
        let skipped = self.text[start..]
            .iter()
            .take_while(|b| matches!(b, b'\r' | b'\n'))
            .count();
        let end = start + skipped;
        if end > self.offset {
            self.newlines += self.text[self.offset..end]
                .iter()
                .filter(|b| **b == b'\n')
                .count() as u64;
            self.offset = end;
        }
        self.newlines + 1
    }
}

/// The field separator of a resolution CSV, read from its header line: `;`
/// when the header holds more semicolons than commas outside quotes (the
/// CSV a spreadsheet writes where the decimal separator is a comma, as in
/// most of Europe), else `,`.
fn separator(text: &str) -> u8 {
    let header = text.split('\n').next().unwrap_or("");
    let (mut quoted, mut commas, mut semicolons) = (false, 0usize, 0usize);
    for b in header.bytes() {
        match b {
            b'"' => quoted = !quoted,
            b',' if !quoted => commas += 1,
            b';' if !quoted => semicolons += 1,
            _ => {}
        }
    }
    if semicolons > commas {
        b';'
    } else {
        b','
    }
}

/// Reads a resolution CSV: a header row with `id` and `note` (optional
/// `by`; other columns ignored), then one finding a line. The separator is
/// `,` or `;`, whichever the header line uses ([`separator`]). Every line
/// is checked before anything is written; the whole file is read in one
/// pass (time linear in its size).
///
/// # Errors
/// [`FileError`], naming the line: a malformed line (wrong number of fields,
/// bad quoting), an id that is not a number, an empty note, no `by` on the
/// line and no `--by`, an id named twice; or no header / no line at all.
pub fn parse_file(text: &str, default_by: Option<&str>) -> Result<Vec<FileLine>, FileError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .delimiter(separator(text))
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
    let mut counter = LineCounter::new(text);
    for record in reader.records() {
        let record = record.map_err(|source| FileError::Malformed {
            line: source.position().map_or(0, |p| counter.line_of(p)),
            source,
        })?;
        let line = record.position().map_or(0, |p| counter.line_of(p));
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
        // A spreadsheet's `;`-separated CSV (a comma inside a note).
        let semi = parse_file(
            "id;note;by\r\n3;checked, ok;ann\r\n4;\"a;b\";\r\n",
            Some("bob"),
        )
        .unwrap();
        assert_eq!(
            (semi[0].id, semi[0].note.as_str(), semi[0].by.as_str()),
            (3, "checked, ok", "ann")
        );
        assert_eq!((semi[1].note.as_str(), semi[1].line), ("a;b", 3));
        assert!(err("id;note\n3;x\n4;\n").starts_with("line 3: finding 4 has an empty note"));
        assert_eq!(separator("id,note;x\n"), b',');
        assert_eq!(separator("\"a;b;c\",id,note\n"), b',');
        assert!(parse_file("id,note\n3,x\n", None)
            .unwrap_err()
            .to_string()
            .contains("no `by`"));
    }
}
