//! The documentation agrees with the code: `docs/configuration.md` documents
//! every `RECONCILER_*` variable the binary reads and names no other
//! (`stripe_reconciler::config::variables` lists what the code reads; its
//! unit tests keep that list equal to the settings groups, the command line
//! and the direct reads); and every relative link of the README and the
//! `docs/` pages leads to a file that exists and, with a `#fragment`, to a
//! heading or `<a id>` on that page (GitHub's anchors).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

/// The pages whose links are checked: the README, every `docs/*.md`, and the
/// other READMEs they send a reader to.
fn linked_pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<PathBuf> = [
        "README.md",
        "BENCHMARKS.md",
        "helm/stripe-reconciler/README.md",
        "monitoring/README.md",
        "k8s/README.md",
        "migrations/README.md",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    let docs = std::fs::read_dir(root.join("docs")).unwrap_or_else(|e| panic!("read docs/: {e}"));
    for entry in docs {
        let path = entry.unwrap_or_else(|e| panic!("read docs/: {e}")).path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    pages
}

/// The page's lines outside fenced code blocks (```), which hold no links or
/// headings.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// GitHub's anchor for a heading: lower case, letters, digits, `_` and `-`
/// kept, spaces become `-`, everything else (backticks, `:`, `(`, `'`, `,`)
/// dropped; a repeated heading gets `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut found = BTreeSet::new();
    for line in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let slug: String = line[hashes..]
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            let n = seen.entry(slug.clone()).or_insert(0);
            found.insert(if *n == 0 {
                slug.clone()
            } else {
                format!("{slug}-{n}")
            });
            *n += 1;
        }
        for (i, _) in line.match_indices("<a id=\"") {
            let rest = &line[i + "<a id=\"".len()..];
            if let Some(end) = rest.find('"') {
                found.insert(rest[..end].to_string());
            }
        }
    }
    found
}

/// The targets of the page's Markdown links `[text](target)`, outside fenced
/// code, with their line numbers.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut targets = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for (i, _) in line.match_indices("](") {
            let rest = &line[i + 2..];
            if let Some(end) = rest.find(')') {
                targets.push((n + 1, rest[..end].to_string()));
            }
        }
    }
    targets
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    let mut broken = Vec::new();
    for page in linked_pages() {
        let text = std::fs::read_to_string(&page)
            .unwrap_or_else(|e| panic!("read {}: {e}", page.display()));
        let name = page
            .strip_prefix(root)
            .unwrap_or(&page)
            .display()
            .to_string();
        for (line, target) in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, fragment) = match target.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (target.as_str(), None),
            };
            let dir = page.parent().unwrap_or(root);
            let linked = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            if !linked.exists() {
                broken.push(format!("{name}:{line}: {target}: no such file"));
                continue;
            }
            if let Some(fragment) = fragment {
                let linked_text = std::fs::read_to_string(&linked).unwrap_or_default();
                if !anchors(&linked_text).contains(fragment) {
                    broken.push(format!("{name}:{line}: {target}: no such anchor"));
                }
            }
        }
    }
    assert!(checked > 50, "found only {checked} relative links");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_follow_githubs_rule() {
    let page = "# Outbox: `RECONCILER_OUTBOX_TABLE`, `RECONCILER_OUTBOX_SHAPE`\n\
                ## Sizing (`auto`)\n## The reconciler's own state\n## Sizing (`auto`)\n\
                ```\n# not a heading\n```\n<a id=\"stripereconcilerlaghigh\"></a>`x`\n";
    let expected: BTreeSet<String> = [
        "outbox-reconciler_outbox_table-reconciler_outbox_shape",
        "sizing-auto",
        "sizing-auto-1",
        "the-reconcilers-own-state",
        "stripereconcilerlaghigh",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(anchors(page), expected);
}
