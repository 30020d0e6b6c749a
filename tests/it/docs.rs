//! The documentation agrees with the code: `docs/configuration.md` documents
//! every `RECONCILER_*` variable the binary reads and names no other
//! (`stripe_reconciler::config::variables` lists what the code reads; its
//! unit tests keep that list equal to the settings groups, the command line
//! and the direct reads).

use std::collections::BTreeSet;
use std::path::Path;

use stripe_reconciler::config::variables;

const PAGE: &str = "docs/configuration.md";

fn page() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Names in backticks that look like environment variables, e.g. `RECONCILER_JOB`.
fn variable_names(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.len() > 2
                && s.starts_with(|c: char| c.is_ascii_uppercase())
                && s.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
        .map(str::to_string)
        .collect()
}

/// The variables a table row documents: the names in its first cell.
fn documented(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter_map(|line| line.strip_prefix('|'))
        .filter_map(|row| row.split('|').next())
        .flat_map(variable_names)
        .collect()
}

/// Every `RECONCILER_…` name on the page, in backticks or not (the bare
/// prefix, as in `RECONCILER_*`, is no name).
fn reconciler_mentions(page: &str) -> BTreeSet<String> {
    page.match_indices("RECONCILER_")
        .map(|(i, _)| {
            page[i..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| name.len() > "RECONCILER_".len())
        .collect()
}

#[test]
fn the_configuration_page_documents_every_variable_the_code_reads() {
    let page = page();
    let rows = documented(&page);
    assert!(
        rows.len() > 30,
        "found only {} documented variables in {PAGE}",
        rows.len()
    );
    let missing: Vec<&str> = variables::all()
        .filter(|v| v.starts_with("RECONCILER_") || variables::SETTINGS.contains(v))
        .filter(|v| !rows.contains(*v))
        .collect();
    assert!(missing.is_empty(), "{PAGE} has no row for {missing:?}");
}

#[test]
fn the_configuration_page_names_no_variable_the_code_does_not_read() {
    let page = page();
    let read: BTreeSet<&str> = variables::all().collect();
    let unknown_rows: Vec<String> = documented(&page)
        .into_iter()
        .filter(|v| !read.contains(v.as_str()))
        .collect();
    assert!(
        unknown_rows.is_empty(),
        "{PAGE} documents variables the code does not read: {unknown_rows:?}"
    );
    let unknown_mentions: Vec<String> = reconciler_mentions(&page)
        .into_iter()
        .filter(|v| !read.contains(v.as_str()))
        .collect();
    assert!(
        unknown_mentions.is_empty(),
        "{PAGE} names variables the code does not read: {unknown_mentions:?}"
    );
}
