//! The interactive commands' errors: one readable line (no secret echoed),
//! usage errors exit 2 and refusals 65, each naming what to fix.

use serde_json::Value;
use sqlx::PgPool;

use crate::support::*;

/// An unreachable PostgreSQL (a port nobody listens on).
fn dead_database() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("postgres://root@127.0.0.1:{port}/gone")
}

#[sqlx::test(migrations = false)]
async fn errors_of_interactive_commands_are_one_readable_line(_pool: PgPool) {
    let dead = [("DATABASE_URL", dead_database())];
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["findings", "list"],
        &["migrate"],
    ] {
        let out = reconciler_output(args, &dead).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(
            err.starts_with("stripe-reconciler: error: "),
            "{args:?}: {err}"
        );
        assert!(
            err.contains("cannot connect to PostgreSQL"),
            "{args:?}: {err}"
        );
    }

    // A configuration error of `run` is for a person too.
    let out = reconciler_output(&["run"], &dead).await;
    assert_eq!(out.status.code(), Some(78));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("STRIPE_API_KEY is required"), "{err}");

    // A run in a pod keeps JSON lines for the log collector.
    let out = reconciler_output(
        &["run"],
        &[dead[0].clone(), ("STRIPE_API_KEY", API_KEY.to_owned())],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let last = stderr(&out).lines().last().unwrap_or_default().to_owned();
    let line: Value = serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {last}"));
    assert_eq!(line["level"], "ERROR");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn usage_errors_exit_2_and_refusals_65_naming_what_to_fix(pool: PgPool) {
    let db = ("DATABASE_URL", database_url(&pool));
    let out = reconciler_output(
        &["findings", "resolve", "1", "--note", "  ", "--by", "bob"],
        std::slice::from_ref(&db),
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--note"), "{}", stderr(&out));

    // Neither --by nor USER: who resolved it must not be "unknown".
    let out = reconciler_output(
        &["findings", "resolve", "1", "--note", "checked"],
        std::slice::from_ref(&db),
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--by"), "{}", stderr(&out));

    let out = reconciler_output(&["frobnicate"], std::slice::from_ref(&db)).await;
    assert_eq!(out.status.code(), Some(2));

    let out = reconciler_output(
        &[
            "findings", "resolve", "999", "--note", "checked", "--by", "bob",
        ],
        &[db],
    )
    .await;
    assert_eq!(out.status.code(), Some(65), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("finding 999 does not exist"),
        "{}",
        stderr(&out)
    );
}
