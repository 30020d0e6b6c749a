//! Faults forced, not waited for: a trigger on one of the reconciler's own
//! tables (in the test's own database) makes phase 3 of the first batch
//! lose a race exactly once, as a deadlock (40P01) or a serialization
//! failure (40001); the shipped `run` must run the write again
//! (docs/scan.md, "Guards") and say so in its JSON log. Phase 3 retries at
//! two levels, each forced here: the whole transaction (`src/scan/commit.rs`,
//! `store::retry`) when the race is lost moving the cursor, and the record
//! set alone, at its savepoint (`src/record/isolate.rs`), when it is lost
//! writing findings. Without the retry the run fails, so these tests cannot
//! pass by luck.

use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;

use crate::support::*;

/// A trigger on `table` for `event` (`INSERT`, or `UPDATE OF last_id` with
/// its row condition) that raises `sqlstate` the first time it fires and
/// never again: the count is a sequence, which the failed transaction's
/// rollback does not undo.
async fn fail_once(pool: &PgPool, table: &str, event: &str, sqlstate: &str) {
    sqlx::raw_sql(&format!(
        "CREATE SEQUENCE forced_fault_fired;
         CREATE FUNCTION forced_fault() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF nextval('forced_fault_fired') = 1 THEN
                 RAISE EXCEPTION 'forced by the test on %', TG_TABLE_NAME
                     USING ERRCODE = TG_ARGV[0];
             END IF;
             RETURN NULL;
         END $$;
         CREATE TRIGGER forced_fault AFTER {event} ON {table}
             FOR EACH {condition} EXECUTE FUNCTION forced_fault('{sqlstate}');",
        condition = if event.starts_with("UPDATE") {
            "ROW WHEN (OLD.last_id IS DISTINCT FROM NEW.last_id)"
        } else {
            "STATEMENT"
        }
    ))
    .execute(pool)
    .await
    .unwrap();
}

/// Ten paid rows, rows 2 and 3 left `pending` while Stripe says succeeded;
/// one batch of four rows through the binary with the fault armed on
/// `table`'s `event`: the run succeeds with exactly the two findings, the
/// two repair commands and the cursor at 4, the trigger fired on both
/// attempts, and exactly one log line whose `message` contains `said`
/// carries the forced error; returns that line.
async fn the_batch_commits_on_the_second_attempt(
    pool: &PgPool,
    (table, event, sqlstate): (&str, &str, &str),
    said: &str,
) -> Value {
    arrange::paid_with_pending(pool, 10, &[2, 3]).await;
    let stripe = stripe_mirroring(pool, "succeeded", Duration::ZERO).await;
    fail_once(pool, table, event, sqlstate).await;
    let env = vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_BATCH_SIZE", "4".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "1".to_owned()),
    ];
    let out = reconciler_output(&["run"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));

    assert_eq!(
        findings(pool).await,
        [2, 3]
            .map(|payment_id| FindingRow {
                payment_id,
                kind: "missed_success".into(),
                local_status: "pending".into(),
                external_status: Some("succeeded".into()),
                open: true,
            })
            .into_iter()
            .collect::<Vec<_>>()
    );
    let commands: Vec<String> = outbox(pool)
        .await
        .into_iter()
        .map(|c| c.aggregate_id)
        .collect();
    assert_eq!(commands, ["2", "3"]);
    assert_eq!(cursor(pool, SCAN_JOB).await, 4);
    assert_eq!(
        count(pool, "SELECT last_value FROM forced_fault_fired").await,
        2,
        "the trigger fired on the first attempt and on the retry, no more"
    );

    let retries: Vec<Value> = stderr(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["message"].as_str().is_some_and(|m| m.contains(said)))
        .collect();
    assert_eq!(retries.len(), 1, "{}", stderr(&out));
    retries.into_iter().next().unwrap()
}

/// The whole phase-3 transaction again (`store::retry`), from the
/// observations phase 2 made: the race is lost moving the cursor.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_deadlock_moving_the_cursor_reruns_phase_3_once(pool: PgPool) {
    let fault = ("reconciliation_cursor", "UPDATE OF last_id", "40P01");
    let line = the_batch_commits_on_the_second_attempt(&pool, fault, "victim of a race").await;
    assert_eq!(line["transaction"], "committing the batch", "{line}");
    assert_eq!(line["attempt"], 1, "{line}");
    let error = line["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("forced by the test on reconciliation_cursor"),
        "{line}"
    );
}

/// The record set again at its savepoint: the race is lost writing the
/// findings. The run reports the retry, never a refused write.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_serialization_failure_writing_findings_is_retried_at_its_savepoint(pool: PgPool) {
    let fault = ("reconciliation_findings", "INSERT", "40001");
    let line = the_batch_commits_on_the_second_attempt(&pool, fault, "phase 3 lost a race").await;
    assert_eq!(
        (&line["write"], &line["retries"]),
        (&"finding".into(), &1.into()),
        "{line}"
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE kind = 'write_refused'"
        )
        .await,
        0
    );
}
