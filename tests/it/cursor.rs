//! The cursor's promises: the whole table is walked, drift is recorded once
//! across cycles, and two runs on one cursor never both commit; a row Stripe
//! never answers for is counted once per cycle, and a payment committed after
//! the cursor passed its id is checked by the next batch.

use std::time::Duration;

use crate::support::stripe_fake::{StripeFake, RETRIEVE};
use crate::support::*;
use sqlx::PgPool;
use stripe_reconciler::reconcile::Verdict;
use stripe_reconciler::scan::RunError;
use stripe_reconciler::stripe::StripeGateway;

/// The design note's broken scan: "the 200 most recently updated rows".
async fn scan_broken(pool: &PgPool) {
    sqlx::query(
        "INSERT INTO reconciliation_payment_state (payment_id, created_at, last_reconciled_at)
         SELECT id, created_at, now() FROM payments ORDER BY updated_at DESC LIMIT 200
         ON CONFLICT (payment_id) DO UPDATE SET last_reconciled_at = now()",
    )
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_cursor_reaches_rows_that_limit_200_starves(pool: PgPool) {
    // 500 rows with distinct updated_at, as in the design note's test.
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         SELECT 'o' || i, 'pi_' || i, 'paid', now() - interval '30 days', now() - interval '1 day' + i * interval '1 second'
           FROM generate_series(1, 500) AS i",
    )
    .execute(&pool)
    .await
    .unwrap();
    let never = "SELECT count(*) FROM payments p
                  WHERE NOT EXISTS (SELECT 1 FROM reconciliation_payment_state s
                                     WHERE s.payment_id = p.id AND s.last_reconciled_at IS NOT NULL)";

    for _ in 0..10 {
        scan_broken(&pool).await;
    }
    assert_eq!(
        count(&pool, never).await,
        300,
        "ten hourly LIMIT-200 scans leave 300 rows unchecked"
    );

    sqlx::query("TRUNCATE reconciliation_payment_state")
        .execute(&pool)
        .await
        .unwrap();
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;
    let gw = gateway(&stripe);
    let mut remaining = Vec::new();
    for batch in 0..3 {
        let report = scan_with(&pool, &gw, &settings(200)).await.unwrap();
        // The third reads the table's last 100 rows and ends the cycle.
        assert_eq!(report.wrapped, batch == 2);
        remaining.push(count(&pool, never).await);
    }
    assert_eq!(
        remaining,
        vec![300, 100, 0],
        "every row confirmed within 3 batches"
    );

    // The third batch read the last rows: it ended the cycle itself (no
    // fourth batch spent on an empty read).
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 0);
    let completed = count(
        &pool,
        "SELECT count(*) FROM reconciliation_cursor WHERE last_cycle_completed_at IS NOT NULL",
    )
    .await;
    assert_eq!(completed, 1, "the wrap stamps the cycle");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn two_full_cycles_record_each_drift_once(pool: PgPool) {
    insert_paid(&pool, 40).await;
    // Drift: pi_5 and pi_25 are pending locally; Stripe says succeeded for all.
    sqlx::query("UPDATE payments SET status = 'pending' WHERE id IN (5, 25)")
        .execute(&pool)
        .await
        .unwrap();
    // pi_33 is paid locally but canceled at Stripe.
    let stripe = StripeFake::start().await;
    stripe.set_status("pi_33", "canceled");
    stripe.answer_any("succeeded");
    let gw = gateway(&stripe);

    let mut wraps = 0;
    let mut batches = 0;
    while wraps < 2 {
        let report = scan_with(&pool, &gw, &settings(15)).await.unwrap();
        wraps += usize::from(report.wrapped);
        batches += 1;
        assert!(batches < 100, "the cursor did not wrap twice");
    }
    assert_eq!(
        batches, 6,
        "3 batches, twice: the third reads the last rows and ends the cycle"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        3
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings WHERE kind = 'missed_success' AND resolved_at IS NULL").await,
        2
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM outbox").await,
        2,
        "one command per finding, not per scan"
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox WHERE event_type = 'ApplyPaymentSucceeded'"
        )
        .await,
        2
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn two_runs_racing_on_one_cursor_commit_exactly_one_batch(pool: PgPool) {
    insert_paid(&pool, 30).await;
    sqlx::query("UPDATE payments SET status = 'pending' WHERE id <= 10")
        .execute(&pool)
        .await
        .unwrap();
    // Two Stripes that disagree, so the rows show whose batch committed.
    // Each holds its first read unanswered until both have one: both
    // batches are in phase 2 at the same time, whatever the machine's speed.
    let says_succeeded = StripeFake::start().await;
    says_succeeded.answer_any("succeeded");
    let says_processing = StripeFake::start().await;
    says_processing.answer_any("processing");
    let mut held_a = says_succeeded.hold_request(RETRIEVE, 1);
    let mut held_b = says_processing.hold_request(RETRIEVE, 1);
    let (gw_a, gw_b) = (gateway(&says_succeeded), gateway(&says_processing));
    let s = settings(20);

    let both_reading = async {
        held_a.arrived().await;
        held_b.arrived().await;
        held_a.release();
        held_b.release();
    };
    let (a, b, ()) = tokio::join!(
        scan_with(&pool, &gw_a, &s),
        scan_with(&pool, &gw_b, &s),
        both_reading
    );

    let (winner_status, won, lost) = match (a, b) {
        (Ok(r), Err(e)) => ("succeeded", r, e),
        (Err(e), Ok(r)) => ("processing", r, e),
        other => panic!("expected exactly one winner: {other:?}"),
    };
    assert!(matches!(lost, RunError::ConcurrentRun { .. }), "{lost:?}");
    assert_eq!(lost.exit_code(), 75);
    assert_eq!(won.cursor_to, 20);
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 20);
    let observed: Vec<Option<String>> = sqlx::query_scalar(
        "SELECT s.observed_external_status FROM payments p LEFT JOIN reconciliation_payment_state s ON s.payment_id = p.id WHERE p.id <= 20 ORDER BY p.id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        observed.iter().all(|o| o.as_deref() == Some(winner_status)),
        "the loser wrote nothing: {observed:?}"
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        20
    );
    // "succeeded": rows 1-10 (pending) are missed_success with a command each.
    // "processing": rows 1-10 are in flight; rows 11-20 (paid) need review.
    let (kind, commands) = if winner_status == "succeeded" {
        ("missed_success", 10)
    } else {
        ("paid_locally_not_externally", 0)
    };
    let kinds: Vec<(String, i64)> =
        sqlx::query_as("SELECT kind, count(*) FROM reconciliation_findings GROUP BY kind")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        kinds,
        vec![(kind.to_owned(), 10)],
        "only the winner's findings"
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox").await, commands);
}

/// Runs batches until one reports `wrapped`; returns the batches run (the
/// wrapping one included).
async fn one_cycle(pool: &PgPool, gw: &StripeGateway, s: &Settings) -> u32 {
    for n in 1..=50 {
        if scan_with(pool, gw, s).await.unwrap().wrapped {
            return n;
        }
    }
    panic!("the cursor did not wrap in 50 batches");
}

async fn unverifiable_findings(
    pool: &PgPool,
    id: i64,
) -> Vec<(bool, Option<String>, Option<String>)> {
    sqlx::query_as(
        "SELECT resolved_at IS NULL, details->>'last_error', resolution
           FROM reconciliation_findings
          WHERE payment_id = $1 AND kind = 'persistently_unverifiable' ORDER BY id",
    )
    .bind(id)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_row_stripe_never_answers_for_gets_one_finding_after_three_cycles_and_it_clears(
    pool: PgPool,
) {
    let stripe = StripeFake::start().await;
    let bad = insert_payment(&pool, "pi_Broken", "paid", 3600).await;
    stripe.fail_object(stripe_fake::RETRIEVE, "pi_Broken", server_error());
    for i in 0..5 {
        let pi = format!("pi_Good{i}");
        insert_payment(&pool, &pi, "paid", 3600).await;
        stripe.set_status(&pi, "succeeded");
    }
    let gw = gateway(&stripe);
    let mut s = settings(10);
    s.run.unverifiable_cycles = 3;

    // Cycle 1, retried three times before it completes: counts once (a
    // batch of one row, so it does not read the table's end).
    let first_row = Settings {
        scan: ScanSettings {
            batch_size: 1,
            ..s.clone().scan
        },
        ..s.clone()
    };
    for _ in 0..3 {
        let r = scan_with(&pool, &gw, &first_row).await.unwrap();
        assert!(!r.wrapped);
        assert_eq!(r.verdicts.get(Verdict::Unverifiable), 1);
        rewind_cursor(&pool).await;
    }
    assert!(
        unverifiable_findings(&pool, bad).await.is_empty(),
        "retries within one cycle counted more than once"
    );
    assert_eq!(
        count_for(
            &pool,
            "SELECT cycles::bigint FROM reconciliation_unverifiable WHERE payment_id = $1",
            bad
        )
        .await,
        1
    );
    one_cycle(&pool, &gw, &s).await; // wrap 1
    one_cycle(&pool, &gw, &s).await; // wrap 2
    assert!(
        unverifiable_findings(&pool, bad).await.is_empty(),
        "a finding before the third cycle"
    );

    one_cycle(&pool, &gw, &s).await; // wrap 3

    let found = unverifiable_findings(&pool, bad).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].0, "open");
    let last_error = found[0].1.clone().unwrap_or_default();
    assert!(
        last_error.contains("500"),
        "details.last_error says what Stripe answered: {last_error:?}"
    );
    // Still failing: still one finding, never a second.
    one_cycle(&pool, &gw, &s).await;
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE kind = 'persistently_unverifiable'"
        )
        .await,
        1
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        1,
        "no other finding for the healthy rows"
    );

    // Stripe answers for it again, in sync: the finding is cleared.
    stripe.heal("pi_Broken");
    stripe.set_status("pi_Broken", "succeeded");
    for i in 0..5 {
        let pi = format!("pi_Good{i}");
        stripe.set_status(&pi, "succeeded");
    }
    one_cycle(&pool, &gw, &s).await;

    assert_eq!(
        unverifiable_findings(&pool, bad).await,
        vec![(false, Some(last_error), Some("cleared".into()))]
    );
    assert_eq!(verified(&pool, bad).await, (Some("succeeded".into()), true));
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_unverifiable").await,
        0,
        "the streak is forgotten"
    );
}

/// Sequence order is not commit order: a payment whose id was taken before,
/// but committed after, the cursor passed it is checked by the next batch
/// (an anti-join over a bounded id range below the highest seen id), not a whole cycle later; a
/// row behind the cursor that Stripe cannot answer for waits for the next
/// cycle instead of being retried by every batch.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_payment_committed_after_the_cursor_passed_its_id_is_checked_by_the_next_batch(
    pool: PgPool,
) {
    let stripe = StripeFake::start().await;
    for i in 1..=20 {
        let pi = format!("pi_Row{i}");
        insert_payment(&pool, &pi, "paid", 3600).await;
        stripe.set_status(&pi, "succeeded");
    }
    // Ids 21 and 22 are taken by two long transactions; the cursor passes
    // them (rows 23..=30 commit first).
    sqlx::query("SELECT setval(pg_get_serial_sequence('payments', 'id'), 22)")
        .execute(&pool)
        .await
        .unwrap();
    for i in 23..=30 {
        let pi = format!("pi_Row{i}");
        insert_payment(&pool, &pi, "paid", 3600).await;
        stripe.set_status(&pi, "succeeded");
    }
    let gw = gateway(&stripe);
    // Batches of 20 read up to 2 rows behind the cursor each.
    let s = settings(20);
    for _ in 0..2 {
        scan_with(&pool, &gw, &s).await.unwrap();
    }
    let cursor: i64 = sqlx::query_scalar("SELECT last_id FROM reconciliation_cursor")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        cursor, 0,
        "the cursor passed ids 21 and 22 and ended the cycle at 30"
    );
    // Where it was when they commit (a new cycle, part-way).
    sqlx::query("UPDATE reconciliation_cursor SET last_id = 30")
        .execute(&pool)
        .await
        .unwrap();

    // Now they commit: 21 is a missed webhook, 22 a PaymentIntent that
    // always answers 500 (Stripe itself answers the probe).
    for (id, pi) in [(21, "pi_Late"), (22, "pi_LateBroken")] {
        sqlx::query(
            "INSERT INTO payments (id, order_id, stripe_payment_intent_id, status, created_at, updated_at)
             OVERRIDING SYSTEM VALUE
             VALUES ($1, 'order-late', $2, 'pending', now() - interval '1 hour', now() - interval '1 hour')",
        )
        .bind(id)
        .bind(pi)
        .execute(&pool)
        .await
        .unwrap();
    }
    stripe.set_status("pi_Late", "succeeded");
    stripe.fail_object(stripe_fake::RETRIEVE, "pi_LateBroken", server_error());
    mount_probe(&stripe, empty_list()).await;
    // 21 rows after the cursor: the batch reads 20, not the table's end.
    for i in 31..=51 {
        let pi = format!("pi_Row{i}");
        insert_payment(&pool, &pi, "paid", 3600).await;
        stripe.set_status(&pi, "succeeded");
    }

    let next = scan_with(&pool, &gw, &s).await.unwrap();
    assert!(!next.wrapped);
    assert_eq!(
        next.scanned, 22,
        "twenty rows after the cursor and the two late ones"
    );
    assert_eq!(
        count_for(
            &pool,
            "SELECT count(*) FROM reconciliation_findings
              WHERE payment_id = $1 AND kind = 'missed_success' AND resolved_at IS NULL",
            21
        )
        .await,
        1,
        "the late missed webhook is found by the next batch"
    );
    let reads_after_first = reads_of(&stripe, "/pi_LateBroken").await;
    assert!(reads_after_first > 0);

    // The next batch (the wrap) and a rewound batch in the same cycle do not
    // retry the failing late row.
    rewind_cursor(&pool).await;
    sqlx::query("UPDATE reconciliation_cursor SET last_id = 50")
        .execute(&pool)
        .await
        .unwrap();
    for i in 52..=56 {
        let pi = format!("pi_Row{i}");
        insert_payment(&pool, &pi, "paid", 3600).await;
        stripe.set_status(&pi, "succeeded");
    }
    let later = scan_with(&pool, &gw, &s).await.unwrap();
    assert_eq!(
        later.scanned, 6,
        "only the rows after the cursor: the failing late row waits for the next cycle"
    );
    assert_eq!(reads_of(&stripe, "/pi_LateBroken").await, reads_after_first);
}
