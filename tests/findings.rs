//! The review queue: `findings list` and `findings resolve` through the real binary.

mod support;

use std::process::Command;

use sqlx::PgPool;
use support::*;
use wiremock::MockServer;

fn reconciler(pool: &PgPool, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stripe-reconciler"))
        .args(args)
        .env_clear()
        .env("DATABASE_URL", database_url(pool))
        .env("USER", "alice")
        .output()
        .unwrap()
}

async fn scan(pool: &PgPool, stripe: &MockServer) {
    stripe_reconciler::scan::run_batch(
        pool,
        &gateway(stripe),
        &settings(200),
        stripe_reconciler::scan::Mode::Write,
        None,
    )
    .await
    .unwrap();
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_needs_review_finding_is_listed_resolved_and_reopened_by_a_later_scan(pool: PgPool) {
    let stripe = MockServer::start().await;
    let id = insert_payment(&pool, "pi_Shipped", "paid", 3600).await;
    mount(
        &stripe,
        "pi_Shipped",
        ok("pi_Shipped", "requires_payment_method"),
    )
    .await;
    scan(&pool, &stripe).await;
    let finding = count(&pool, "SELECT id FROM reconciliation_findings").await;

    let p = pool.clone();
    let listed = tokio::task::spawn_blocking(move || {
        reconciler(
            &p,
            &[
                "findings",
                "list",
                "--open",
                "--json",
                "--kind",
                "paid_locally_not_externally",
            ],
        )
    })
    .await
    .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    let rows: Vec<serde_json::Value> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], finding);
    assert_eq!(rows[0]["payment_id"], id);
    assert_eq!(rows[0]["stripe_payment_intent_id"], "pi_Shipped");
    assert_eq!(rows[0]["external_status"], "requires_payment_method");

    let p = pool.clone();
    let fid = finding.to_string();
    let resolved = tokio::task::spawn_blocking(move || {
        reconciler(
            &p,
            &[
                "findings",
                "resolve",
                &fid,
                "--note",
                "refunded the customer, ticket PAY-12",
            ],
        )
    })
    .await
    .unwrap();
    assert!(resolved.status.success(), "{resolved:?}");
    let kept: (Option<String>, Option<String>, Option<String>) =
        sqlx::query_as("SELECT resolution, resolved_by, resolution_note FROM reconciliation_findings WHERE id = $1")
            .bind(finding)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        kept,
        (
            Some("manual".into()),
            Some("alice".into()),
            Some("refunded the customer, ticket PAY-12".into())
        )
    );

    // Resolving twice is refused (exit 65: nothing changed, not a retry-later failure).
    let p = pool.clone();
    let fid = finding.to_string();
    let again = tokio::task::spawn_blocking(move || {
        reconciler(&p, &["findings", "resolve", &fid, "--note", "again"])
    })
    .await
    .unwrap();
    assert_eq!(again.status.code(), Some(65));

    // The drift is still there: the next scan opens a new finding.
    sqlx::query("UPDATE reconciliation_cursor SET last_id = 0")
        .execute(&pool)
        .await
        .unwrap();
    scan(&pool, &stripe).await;
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        2
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE resolved_at IS NULL"
        )
        .await,
        1
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_finding_with_a_pending_repair_cannot_be_resolved_by_hand(pool: PgPool) {
    let stripe = MockServer::start().await;
    insert_payment(&pool, "pi_Missed", "pending", 3600).await;
    mount(&stripe, "pi_Missed", ok("pi_Missed", "succeeded")).await;
    scan(&pool, &stripe).await;
    let finding = count(&pool, "SELECT id FROM reconciliation_findings")
        .await
        .to_string();

    let p = pool.clone();
    let out = tokio::task::spawn_blocking(move || {
        reconciler(&p, &["findings", "resolve", &finding, "--note", "x"])
    })
    .await
    .unwrap();

    assert_eq!(
        out.status.code(),
        Some(65),
        "refused, not a failure to retry"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("repair command pending"),
        "{out:?}"
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE resolved_at IS NULL"
        )
        .await,
        1
    );
}
