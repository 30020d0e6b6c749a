//! `findings resolve --file` names the line a person opens in an editor:
//! a spreadsheet's CSV (CRLF line endings, a BOM), a note spanning lines, and
//! blank lines do not shift the number in the error.

use sqlx::PgPool;

use crate::support::*;

async fn open_finding(pool: &PgPool, pi: &str) -> i64 {
    let p = insert_payment(pool, pi, "paid", 0).await;
    sqlx::query_scalar(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status)
         VALUES ($1, 'missing_externally', 'paid', NULL) RETURNING id",
    )
    .bind(p)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn refused(pool: &PgPool, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!(
        "resolve-lines-{}-{}",
        std::process::id(),
        database_url(pool).rsplit('/').next().unwrap()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("decisions.csv");
    std::fs::write(&path, text).unwrap();
    let env = [("DATABASE_URL", database_url(pool))];
    let out = reconciler_output(
        &[
            "findings",
            "resolve",
            "--file",
            path.to_str().unwrap(),
            "--by",
            "alice",
        ],
        &env,
    )
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(65), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_error_names_the_line_as_an_editor_counts_it(pool: PgPool) {
    let a = open_finding(&pool, "pi_LineA").await;
    let b = open_finding(&pool, "pi_LineB").await;
    let cases = [
        // Excel's "CSV UTF-8": a BOM and CRLF; the empty note is on line 3.
        (format!("\u{feff}id,note\r\n{a},checked\r\n{b},\r\n"), 3),
        // CRLF, a quoted note over two lines (lines 2-3): line 4.
        (
            format!("id,note\r\n{a},\"checked,\r\nwith the bank\"\r\n{b},\r\n"),
            4,
        ),
        // A blank line between the records: line 4.
        (format!("id,note\n{a},checked\n\n{b},\n"), 4),
        // Plain LF: line 3.
        (format!("id,note\n{a},checked\n{b},\n"), 3),
    ];
    for (text, line) in cases {
        let err = refused(&pool, &text).await;
        assert!(
            err.contains(&format!("line {line}: finding {b} has an empty note")),
            "{text:?}: {err}"
        );
    }
    // A malformed line (one field too few) is named too.
    let err = refused(&pool, &format!("id,note\r\n{a},checked\r\n{b}\r\n")).await;
    assert!(err.contains("line 3: malformed CSV"), "{err}");
    // Nothing was resolved.
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE resolved_at IS NOT NULL"
        )
        .await,
        0
    );
}

/// A spreadsheet in a comma-decimal locale (most of Europe) saves CSV with
/// `;` between fields: the separator is read from the header line, and a
/// comma inside a note stays in the note.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_semicolon_separated_file_resolves(pool: PgPool) {
    let a = open_finding(&pool, "pi_SemiA").await;
    let b = open_finding(&pool, "pi_SemiB").await;
    let dir = std::env::temp_dir().join(format!(
        "resolve-semi-{}-{}",
        std::process::id(),
        database_name(&pool)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("decisions.csv");
    std::fs::write(
        &path,
        format!("\u{feff}id;kind;note;by\r\n{a};missing_externally;checked, refunded 10,50 EUR;ann\r\n{b};missing_externally;\"a;b\";\r\n"),
    )
    .unwrap();
    let env = [("DATABASE_URL", database_url(&pool))];
    let out = reconciler_output(
        &[
            "findings",
            "resolve",
            "--file",
            path.to_str().unwrap(),
            "--by",
            "bob",
        ],
        &env,
    )
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let rows: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT id, resolved_by, resolution_note FROM reconciliation_findings ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            (
                a,
                "ann".to_owned(),
                "checked, refunded 10,50 EUR".to_owned()
            ),
            (b, "bob".to_owned(), "a;b".to_owned())
        ]
    );
}
