//! List mode when something goes wrong: a rejected key on a list page, a
//! page that is not a Stripe list, and a cursor moved by another writer
//! while overlapping batches read.

use super::list_mode::{an_hour_ago, list_settings};
use crate::support::stripe_fake::{StripeFake, LIST, RETRIEVE};
use crate::support::*;
use sqlx::PgPool;
use stripe_reconciler::config::{Settings, Sizing, StripeSettings};
use stripe_reconciler::reconcile::Verdict;
use stripe_reconciler::scan::{RunError, ScanJob};

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_rejected_key_on_a_list_page_stops_the_batch_and_writes_nothing(pool: PgPool) {
    let account = StripeFake::start().await;
    let t = an_hour_ago();
    for i in 0..5 {
        let pi = format!("pi_Key{i:03}");
        insert_at(&pool, &pi, "pending", t + i).await;
        account.add(None, &pi, "succeeded", t + i);
    }
    account.fail_list(0, err(401, "invalid_request_error", "api_key_invalid"));

    let e = scan_with(&pool, &gateway(&account), &list_settings(100))
        .await
        .unwrap_err();

    assert!(matches!(e, RunError::StripeRejected(_)), "{e:?}");
    assert_eq!(e.exit_code(), 78);
    assert_eq!(account.count(RETRIEVE), 0);
    assert!(findings(&pool).await.is_empty());
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 0);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_page_that_is_not_a_stripe_list_is_a_failed_read(pool: PgPool) {
    let account = StripeFake::start().await;
    let t = an_hour_ago();
    for i in 0..8 {
        let pi = format!("pi_Proxy{i:03}");
        insert_at(&pool, &pi, "paid", t + i).await;
        account.add(None, &pi, "succeeded", t + i);
    }
    // A proxy's HTML page instead of the list: the rows are retrieved.
    account.fail_list(
        0,
        wiremock::ResponseTemplate::new(200).set_body_raw("<html>hi</html>", "text/html"),
    );

    let report = scan(&pool, &account, &list_settings(100)).await;

    assert_eq!(report.verdicts.get(Verdict::InSync), 8);
    assert_eq!(account.count(RETRIEVE), 8);
}

/// Overlapping batches keep the compare-and-set as the guarantee: when
/// another writer moves the cursor while batch 2 is being read (and batch 3
/// already reads its rows), batch 2 rolls back, batch 3 is abandoned, and the
/// run stops with ConcurrentRun (exit 75); only batch 1 is written.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_cursor_moved_during_overlapping_batches_rolls_back_and_stops(pool: PgPool) {
    let account = StripeFake::start().await;
    let t = an_hour_ago();
    for i in 0..60 {
        let pi = format!("pi_Race{i:03}");
        insert_at(&pool, &pi, "paid", t - 600 + i).await;
        account.add(None, &pi, "succeeded", t - 600 + i);
    }
    // Two requests a second: batch 2's page leaves half a second after batch
    // 1's (answered at once), so the batches overlap; batch 2's page is
    // held below until batch 1 has committed and the cursor was moved.
    let s = Settings {
        scan: ScanSettings {
            batches_per_run: Sizing::Fixed(10),
            ..list_settings(20).scan
        },
        stripe: StripeSettings {
            rate_limit_rps: 2,
            ..list_settings(20).stripe
        },
        ..list_settings(20)
    };
    // Batch 2's page is held unanswered by the fake until the intruder has
    // moved the cursor: batch 2 cannot commit first, however slowly the
    // machine runs.
    let mut page_2 = account.hold_request(LIST, 2);
    let intruder = {
        let pool = pool.clone();
        tokio::spawn(async move {
            // Once batch 1 has committed and batch 2 reads, another writer
            // moves the cursor.
            page_2.arrived().await;
            wait::until_true("batch 1 committed", || async {
                cursor(&pool, "payments-vs-stripe").await >= 20
            })
            .await;
            sqlx::query("UPDATE reconciliation_cursor SET last_id = 1000")
                .execute(&pool)
                .await
                .unwrap();
            page_2.release();
        })
    };

    let (summary, result) = run_job(
        &pool,
        &gateway_with(&account, 2, std::time::Duration::from_secs(2)),
        &s,
        ScanJob::default(),
    )
    .await;
    intruder.await.unwrap();

    let e = result.unwrap_err();
    assert!(matches!(e, RunError::ConcurrentRun { .. }), "{e:?}");
    assert_eq!(e.exit_code(), 75);
    assert_eq!(summary.batches, 1, "{summary:?}");
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 1000);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        20,
        "only batch 1's rows are stamped"
    );
}
