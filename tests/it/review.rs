//! The review queue: `findings list` and `findings resolve` through the real
//! binary, and findings that follow Stripe's current state.

use std::process::Command;

use crate::support::stripe_fake::StripeFake;
use crate::support::*;
use chrono::{DateTime, Utc};
use sqlx::PgPool;

fn reconciler(pool: &PgPool, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stripe-reconciler"))
        .args(args)
        .env_clear()
        .env("DATABASE_URL", database_url(pool))
        .env("USER", "alice")
        .output()
        .unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_needs_review_finding_is_listed_resolved_and_reopened_by_a_later_scan(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let id = insert_payment(&pool, "pi_Shipped", "paid", 3600).await;
    stripe.set_status("pi_Shipped", "requires_payment_method");
    scan(&pool, &stripe, &settings(200)).await;
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

    // The next scan, nothing changed: the manual resolution holds (an
    // acknowledgement; tests/it/acknowledgements.rs has every kind).
    sqlx::query("UPDATE reconciliation_cursor SET last_id = 0")
        .execute(&pool)
        .await
        .unwrap();
    scan(&pool, &stripe, &settings(200)).await;
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE resolved_at IS NULL"
        )
        .await,
        0,
        "reopened although Stripe's status is the same"
    );

    // Stripe's status moves on (still not paid there): a new finding opens.
    stripe.set_status("pi_Shipped", "requires_action");
    sqlx::query("UPDATE reconciliation_cursor SET last_id = 0")
        .execute(&pool)
        .await
        .unwrap();
    scan(&pool, &stripe, &settings(200)).await;
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
    let stripe = StripeFake::start().await;
    insert_payment(&pool, "pi_Missed", "pending", 3600).await;
    stripe.set_status("pi_Missed", "succeeded");
    scan(&pool, &stripe, &settings(200)).await;
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

/// `findings list` with a chosen environment (no USER unless given).
async fn list(pool: &PgPool, args: &[&str], extra: &[(&str, &str)]) -> std::process::Output {
    let mut env = vec![("DATABASE_URL", database_url(pool))];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    let mut all = vec!["findings", "list"];
    all.extend_from_slice(args);
    reconciler_output(&all, &env).await
}

async fn thirty_findings(pool: &PgPool) {
    sqlx::raw_sql(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status)
         SELECT 'order-' || i, 'pi_Review' || i, 'paid' FROM generate_series(1, 30) AS i;
         INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status)
         SELECT id, 'paid_locally_not_externally', 'paid', 'requires_payment_method' FROM payments;",
    )
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_review_queue_shows_order_payment_intent_and_a_dashboard_link(pool: PgPool) {
    thirty_findings(&pool).await;

    // A test key links into the Dashboard's test mode.
    let out = list(
        &pool,
        &["--limit", "3"],
        &[("STRIPE_API_KEY", "sk_test_abc")],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let newest = table.lines().nth(1).unwrap();
    assert!(newest.contains("order-30"), "{table}");
    assert!(newest.contains("pi_Review30"), "{table}");
    assert!(
        newest.contains("https://dashboard.stripe.com/test/payments/pi_Review30"),
        "{table}"
    );
    assert_eq!(
        table.lines().count(),
        1 + 3 + 1,
        "header, 3 rows, footer: {table}"
    );
    assert!(
        table.contains("showing 3 of 30 findings"),
        "the cut is said: {table}"
    );

    // No key: live mode, the documented default; an explicit choice wins.
    let out = list(&pool, &["--json", "--limit", "1"], &[]).await;
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        row["dashboard_url"],
        "https://dashboard.stripe.com/payments/pi_Review30"
    );
    assert_eq!(row["order_id"], "order-30");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("showing 1 of 30"),
        "{out:?}"
    );
    let out = list(
        &pool,
        &["--json", "--limit", "1"],
        &[
            ("STRIPE_API_KEY", "rk_live_abc"),
            ("RECONCILER_DASHBOARD_MODE", "test"),
        ],
    )
    .await;
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        row["dashboard_url"],
        "https://dashboard.stripe.com/test/payments/pi_Review30"
    );

    // The whole list: no cut to report, the default limit is 100.
    let out = list(&pool, &[], &[]).await;
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(table.ends_with("30 finding(s)\n"), "{table}");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn resolve_records_an_explicit_by_over_the_environment(pool: PgPool) {
    thirty_findings(&pool).await;
    let env = [
        ("DATABASE_URL", database_url(&pool)),
        ("USER", "root".to_owned()),
    ];

    let out = reconciler_output(
        &[
            "findings",
            "resolve",
            "5",
            "--note",
            "refunded, PAY-7",
            "--by",
            "carol",
        ],
        &env,
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = reconciler_output(&["findings", "resolve", "6", "--note", "checked"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    let by: Vec<(i64, String)> = sqlx::query_as(
        "SELECT id, resolved_by FROM reconciliation_findings WHERE resolved_at IS NOT NULL ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(by, [(5, "carol".to_owned()), (6, "root".to_owned())]);
}

async fn last_seen(pool: &PgPool, finding: i64) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT last_seen_at FROM reconciliation_findings WHERE id = $1")
        .bind(finding)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn age_last_seen(pool: &PgPool) {
    sqlx::query("UPDATE reconciliation_findings SET last_seen_at = now() - interval '1 hour'")
        .execute(pool)
        .await
        .unwrap();
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_review_queue_follows_stripes_current_state(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let failed = insert_payment(&pool, "pi_Failed", "failed", 3600).await;
    let paid = insert_payment(&pool, "pi_Paid", "paid", 3600).await;
    stripe.set_status("pi_Failed", "requires_action");
    stripe.set_status("pi_Paid", "requires_action");
    let gw = gateway(&stripe);
    let s = settings(10);
    scan_with(&pool, &gw, &s).await.unwrap();
    let first = findings_of(&pool, failed).await;
    assert_eq!(
        first
            .iter()
            .map(|f| (f.kind.as_str(), f.external_status.as_deref(), f.open))
            .collect::<Vec<_>>(),
        vec![(
            "unexpected:failed->requires_action",
            Some("requires_action"),
            true
        )]
    );
    let old_unexpected = first[0].id;
    let paid_finding = findings_of(&pool, paid).await[0].id;

    // Seen again, unchanged: the same finding, last seen now.
    age_last_seen(&pool).await;
    rewind_cursor(&pool).await;
    let before = Utc::now() - chrono::Duration::minutes(1);
    scan_with(&pool, &gw, &s).await.unwrap();
    assert_eq!(findings_of(&pool, failed).await.len(), 1);
    assert!(
        last_seen(&pool, old_unexpected).await > before,
        "last_seen_at refreshed"
    );

    // Stripe moves on to `processing`.
    stripe.set_status("pi_Failed", "processing");
    stripe.set_status("pi_Paid", "processing");
    age_last_seen(&pool).await;
    rewind_cursor(&pool).await;
    let report = scan_with(&pool, &gw, &s).await.unwrap();

    let now = findings_of(&pool, failed).await;
    assert_eq!(
        now.iter()
            .map(|f| (
                f.id,
                f.kind.as_str(),
                f.external_status.as_deref(),
                f.resolution.as_deref(),
                f.open
            ))
            .collect::<Vec<_>>(),
        vec![
            (
                old_unexpected,
                "unexpected:failed->requires_action",
                Some("requires_action"),
                Some("superseded"),
                false
            ),
            (
                now[1].id,
                "unexpected:failed->processing",
                Some("processing"),
                None,
                true
            ),
        ],
        "{report:?}"
    );
    // Same kind, new Stripe status: the open finding is refreshed, not duplicated.
    let paid_now = findings_of(&pool, paid).await;
    assert_eq!(
        paid_now
            .iter()
            .map(|f| (
                f.id,
                f.kind.as_str(),
                f.external_status.as_deref(),
                f.resolution.as_deref(),
                f.open
            ))
            .collect::<Vec<_>>(),
        vec![(
            paid_finding,
            "paid_locally_not_externally",
            Some("processing"),
            None,
            true
        )]
    );
    assert!(last_seen(&pool, paid_finding).await > before);
}
