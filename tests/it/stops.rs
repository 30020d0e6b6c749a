//! `run` and `repair` through the real binary, stopped part-way: SIGTERM
//! while phase 3 commits, SIGINT, a signal during `repair`, and another run
//! moving the cursor mid-batch (exit 75). What a user checks: the exit code,
//! and that every batch or command is written whole or not at all.

use std::process::{Child, Output, Stdio};
use std::time::Duration;

use sqlx::PgPool;

use crate::support::arrange;
use crate::support::stripe_fake::{StripeFake, RETRIEVE};
use crate::support::*;

fn env(pool: &PgPool, stripe: &str, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
        // These fakes answer retrieves only.
        ("RECONCILER_READ_MODE", "retrieve".to_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}

fn all_output(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn spawn(args: &[&str], env: &[(&str, String)]) -> Child {
    reconciler(args, env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

async fn finish(child: Child) -> Output {
    tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap()
}

async fn stamped(pool: &PgPool) -> i64 {
    count(
        pool,
        "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL",
    )
    .await
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn sigterm_while_phase_3_waits_commits_that_batch_whole_and_starts_no_other(pool: PgPool) {
    arrange::paid_with_pending(&pool, 10, &[3]).await;
    let stripe = StripeFake::start().await;
    for id in 1..=10 {
        stripe.add(None, &format!("pi_{id}"), "succeeded", 0);
    }
    // Batch 1 (ids 1-5) waits for its first read; batch 2's reads (ids
    // 6-10) would take 60 s.
    let mut first_read = stripe.hold_request(RETRIEVE, 1);
    for n in 6..=10 {
        stripe.answer_slowly(RETRIEVE, n, Duration::from_secs(60));
    }
    // The log goes to a file the test reads while the process runs.
    let log = std::env::temp_dir().join(format!("{}-phase-3.log", database_name(&pool)));
    let child = reconciler(
        &["run"],
        &env(
            &pool,
            &stripe.uri(),
            &[
                ("RECONCILER_BATCH_SIZE", "5"),
                ("RECONCILER_BATCHES_PER_RUN", "10"),
            ],
        ),
    )
    .stdout(Stdio::piped())
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .unwrap();

    // While batch 1's first read is held, hold the cursor row: its phase 3
    // waits.
    first_read.arrived().await;
    let mut blocker = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM reconciliation_cursor FOR UPDATE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    first_read.release();
    // Batch 2's phase 1 waits on that row too; phase 3 is the waiter that
    // has already written.
    let phase_3 = || async {
        wait::reconciler_writers_waiting_on_a_lock(&pool, "reconciliation_payment_state").await
    };
    wait::until_true("phase 3 waiting on the cursor", || async {
        !phase_3().await.is_empty()
    })
    .await;
    wait::signal(&child, "-TERM");
    // Only once the process has the signal: a phase 3 that gave up on it
    // would have stopped waiting by now (the cursor row is still held).
    wait::until_logged(&log, "shutdown signal received").await;
    assert!(
        !phase_3().await.is_empty(),
        "phase 3 still waits after the signal"
    );
    blocker.rollback().await.unwrap();
    let out = finish(child).await;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        std::fs::read_to_string(&log).unwrap()
    );
    std::fs::remove_file(&log).unwrap();

    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("interrupted"), "{said}");
    // Phase 3 is never interrupted: batch 1 is written whole; batch 2 not at all.
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, 5);
    assert_eq!(stamped(&pool).await, 5, "batch 1's rows, only");
    assert_eq!(findings(&pool).await.len(), 1);
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox").await, 1);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn sigint_abandons_the_batch_in_phase_2_and_exits_1(pool: PgPool) {
    arrange::paid_with_pending(&pool, 10, &[3]).await;
    // Reads answered after two minutes, and an HTTP timeout longer still:
    // a run that waited for its reads (or their timeout) cannot end before
    // the first answer, however fast the machine.
    let answer = Duration::from_secs(120);
    let slow = stripe_answering("succeeded", answer).await;
    let child = spawn(
        &["run"],
        &env(
            &pool,
            &slow.uri(),
            &[("RECONCILER_HTTP_TIMEOUT_SECONDS", "300")],
        ),
    );

    wait::requests_seen(&slow, 1).await;
    let started = std::time::Instant::now();
    wait::signal(&child, "-INT");
    let out = finish(child).await;

    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(
        started.elapsed() < answer,
        "stopped before any read was answered, not after the reads: {:?}",
        started.elapsed()
    );
    assert!(
        all_output(&out).contains("interrupted"),
        "{}",
        all_output(&out)
    );
    assert_eq!(
        phase_3_commits(&pool).await,
        0,
        "the cursor moved or a cycle was stamped"
    );
    assert_eq!(stamped(&pool).await, 0);
    assert_eq!(findings(&pool).await.len(), 0);
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox").await, 0);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn another_run_moving_the_cursor_mid_batch_stops_the_run_with_exit_75(pool: PgPool) {
    arrange::paid_with_pending(&pool, 10, &[3]).await;
    // While the batch reads Stripe, another run commits a batch: the fake
    // moves the cursor when the first read arrives, before answering it, so
    // the move always falls inside phase 2, however slowly the machine runs.
    let slow = StripeFake::start().await;
    slow.answer_any("succeeded");
    let url = database_url(&pool);
    slow.on_request(RETRIEVE, 1, move || {
        wait::execute_now(
            &url,
            "UPDATE reconciliation_cursor SET last_id = 1000 WHERE job = 'payments-vs-stripe'",
        );
    });
    let child = spawn(
        &["run"],
        &env(&pool, &slow.uri(), &[("RECONCILER_BATCHES_PER_RUN", "1")]),
    );
    let out = finish(child).await;

    assert_eq!(out.status.code(), Some(75), "{}", all_output(&out));
    assert_eq!(
        cursor(&pool, "payments-vs-stripe").await,
        1000,
        "theirs stays"
    );
    assert_eq!(stamped(&pool).await, 0, "the batch rolled back");
    assert_eq!(findings(&pool).await.len(), 0);
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox").await, 0);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn sigterm_during_repair_finishes_the_chunk_in_progress_and_exits_1(pool: PgPool) {
    // 250 pending payments, each with a missed_success finding and its
    // command: three chunks of 100.
    sqlx::raw_sql(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status)
         SELECT 'o' || i, 'pi_' || i, 'pending' FROM generate_series(1, 250) AS i;
         INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status)
         SELECT id, 'missed_success', 'pending', 'succeeded' FROM payments;
         INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
         SELECT 'Payment', f.payment_id::text, 'ApplyPaymentSucceeded',
                jsonb_build_object('payment_id', f.payment_id, 'finding_id', f.id,
                                   'expected_local_status', 'pending')
           FROM reconciliation_findings f;",
    )
    .execute(&pool)
    .await
    .unwrap();
    // Hold one payment of the first chunk: the drain waits on it.
    let mut blocker = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM payments WHERE id = 50 FOR UPDATE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    // The log goes to a file the test reads while the process runs.
    let log = std::env::temp_dir().join(format!("{}-repair.log", database_name(&pool)));
    let child = reconciler(&["repair"], &env(&pool, "http://127.0.0.1:9", &[]))
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait::until_true("repair waiting on payment 50", || async {
        !wait::reconciler_backends_waiting_on_a_lock(&pool)
            .await
            .is_empty()
    })
    .await;
    wait::signal(&child, "-TERM");
    // The chunk is released only once the process has the signal, so the
    // drain's check between chunks sees it: exactly one chunk is applied.
    wait::until_logged(&log, "shutdown signal received").await;
    blocker.rollback().await.unwrap();
    let out = finish(child).await;
    let said = std::fs::read_to_string(&log).unwrap();
    std::fs::remove_file(&log).unwrap();

    assert_eq!(out.status.code(), Some(1), "{said}");
    let paid = count(
        &pool,
        "SELECT count(*) FROM payments WHERE status = 'paid' AND version = 1",
    )
    .await;
    // A chunk is 100 commands (`RepairOptions::chunk`), claimed in outbox
    // order: the first chunk (payments 1 to 100, 50 among them) finishes
    // whole, no other starts.
    assert_eq!(paid, 100, "the chunk in progress finished, the rest waits");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM payments WHERE status = 'paid' AND id BETWEEN 1 AND 100"
        )
        .await,
        100
    );
    // Each command is written whole: a paid payment has its event, its
    // resolved finding and its processed command; the others have none.
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox WHERE event_type = 'PaymentStatusChanged'"
        )
        .await,
        paid
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE resolution = 'repaired'"
        )
        .await,
        paid
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox WHERE event_type = 'ApplyPaymentSucceeded' AND processed_at IS NOT NULL"
        )
        .await,
        paid
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM payments WHERE status = 'pending' AND version = 0"
        )
        .await,
        250 - paid
    );

    // The next `repair` applies the rest, once.
    let out = reconciler_output(&["repair"], &env(&pool, "http://127.0.0.1:9", &[])).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM payments WHERE status = 'paid' AND version = 1"
        )
        .await,
        250
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox WHERE event_type = 'PaymentStatusChanged'"
        )
        .await,
        250
    );
}
