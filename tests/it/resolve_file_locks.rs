//! `findings resolve --file` never blocks the application: 100,000 lines are
//! checked without a lock (`--dry-run` locks nothing at all), and the write
//! locks only the reconciler's own findings, never `payments`, while an
//! application transaction updates a payment the file names under a 1 s
//! `lock_timeout`.

use std::time::Instant;

use sqlx::PgPool;

use crate::support::wait::{reconciler_backends_waiting_on_a_lock, until};
use crate::support::*;

const LINES: i64 = 100_000;

/// `LINES` payments, each with an open finding; returns the path of a
/// resolution file naming every finding (a note with a comma and one over
/// two lines among them).
async fn seed(pool: &PgPool) -> std::path::PathBuf {
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         SELECT 'order-' || i, 'pi_Lock' || i, 'paid', now() - interval '30 days', now() - interval '1 hour'
           FROM generate_series(1, $1) AS i;",
    )
    .bind(LINES)
    .execute(pool)
    .await
    .unwrap();
    sqlx::raw_sql(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status)
         SELECT id, 'missing_externally', 'paid' FROM payments ORDER BY id;",
    )
    .execute(pool)
    .await
    .unwrap();
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM reconciliation_findings ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap();
    let mut text = String::from("id,kind,note\r\n");
    for (i, id) in ids.iter().enumerate() {
        let note = match i {
            7 => "\"checked, with the bank\"",
            8 => "\"refund agreed\r\nby phone\"",
            _ => "checked",
        };
        text.push_str(&format!("{id},missing_externally,{note}\r\n"));
    }
    let path = std::env::temp_dir().join(format!(
        "resolve-locks-{}-{}.csv",
        std::process::id(),
        database_name(pool)
    ));
    std::fs::write(&path, text).unwrap();
    path
}

/// The application's write: one payment's row updated in a transaction that
/// waits at most 1 s for a lock (a web request's budget).
async fn application_update(pool: &PgPool, payment: i64) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL lock_timeout = '1s'")
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE payments SET updated_at = now(), version = version + 1 WHERE id = $1")
        .bind(payment)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_100000_line_file_resolves_while_the_application_updates_the_payments_it_names(
    pool: PgPool,
) {
    let path = seed(&pool).await;
    let file = path.to_str().unwrap().to_owned();
    let env = [("DATABASE_URL", database_url(&pool))];
    let last: i64 = count(&pool, "SELECT max(id) FROM reconciliation_findings").await;

    // The application holds payment 1's row (a transaction in progress) and
    // a scan holds the last finding: the dry run waits for neither.
    let mut app = pool.begin().await.unwrap();
    sqlx::query("UPDATE payments SET updated_at = now() WHERE id = 1")
        .execute(&mut *app)
        .await
        .unwrap();
    let mut scan = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM reconciliation_findings WHERE id = $1 FOR UPDATE")
        .bind(last)
        .execute(&mut *scan)
        .await
        .unwrap();
    let started = Instant::now();
    let dry = reconciler_output(
        &[
            "findings",
            "resolve",
            "--file",
            &file,
            "--by",
            "alice",
            "--dry-run",
        ],
        &env,
    )
    .await;
    eprintln!(
        "dry run of {LINES} lines: {:.2} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(dry.status.code(), Some(0), "{}", all_output(&dry));
    assert!(
        stdout(&dry).contains("100000 finding(s) would be resolved"),
        "{}",
        stderr(&dry)
    );
    app.commit().await.unwrap();

    // The write waits for the scan's finding (ours to wait for) ...
    let child = reconciler(
        &["findings", "resolve", "--file", &file, "--by", "alice"],
        &env,
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let pid = until("the resolution waiting for the scan's finding", || async {
        reconciler_backends_waiting_on_a_lock(&pool)
            .await
            .first()
            .copied()
    })
    .await;
    // ... holding no lock of any kind on the application's table ...
    let on_payments: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks WHERE pid = $1 AND relation = 'payments'::regclass",
    )
    .bind(pid)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(on_payments, 0, "the resolution holds a lock on payments");
    // ... so the application updates the payments the file names at once.
    for payment in [2, LINES / 2, LINES] {
        application_update(&pool, payment)
            .await
            .unwrap_or_else(|e| panic!("the application's update of payment {payment}: {e}"));
    }
    scan.rollback().await.unwrap();

    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert!(
        stdout(&out).contains("resolved 100000 finding(s)"),
        "{}",
        all_output(&out)
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings
              WHERE resolution = 'manual' AND resolved_by = 'alice'"
        )
        .await,
        LINES
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings
              WHERE resolution_note = 'refund agreed\r\nby phone'"
        )
        .await,
        1
    );
}
