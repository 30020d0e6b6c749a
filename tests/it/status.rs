//! `status` and `status --json`: what it reports on a known data set, the
//! payment that holds the lag, and the documented JSON shape.

use std::process::Command;

use serde_json::Value;
use sqlx::PgPool;

use crate::support::*;

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn status_json_reports_the_known_data_set(pool: PgPool) {
    insert_paid(&pool, 100).await;
    sqlx::raw_sql(
        "UPDATE payments SET created_at = now() - interval '1 hour' WHERE id = 100;
         INSERT INTO reconciliation_payment_state (payment_id, created_at, last_reconciled_at)
         SELECT id, created_at, CASE WHEN id = 100 THEN NULL
                                     WHEN id <= 40 THEN now() - interval '2 hours'
                                     ELSE now() - interval '10 minutes' END
           FROM payments;
         INSERT INTO reconciliation_cursor (job, last_id, cycle_started_at) VALUES ('payments-vs-stripe', 25, now() - interval '3 hours');
         INSERT INTO reconciliation_findings (payment_id, kind, local_status) VALUES
             (1, 'missed_success', 'pending'), (2, 'missed_success', 'pending'), (3, 'paid_locally_not_externally', 'paid');
         INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at) VALUES
             ('Payment', '1', 'ApplyPaymentSucceeded', '{}', now() - interval '30 minutes'),
             ('Order', '9', 'OrderShipped', '{}', now() - interval '5 hours');
         -- Two hourly runs of 500 rows; 100 new payments arrived between them.
         INSERT INTO reconciliation_runs (job, started_at, finished_at, batch_size, batches, rows_scanned, outcome, max_payment_id) VALUES
             ('payments-vs-stripe', now() - interval '2 hours', now() - interval '2 hours' + interval '1 minute', 50, 10, 500, 'completed', 0),
             ('payments-vs-stripe', now() - interval '1 hour', now() - interval '1 hour' + interval '1 minute', 50, 10, 500, 'completed', 100);",
    )
    .execute(&pool)
    .await
    .unwrap();

    let p = pool.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_stripe-reconciler"))
            .args(["status", "--json"])
            .env_clear()
            .env("DATABASE_URL", database_url(&p))
            .output()
            .unwrap()
    })
    .await
    .unwrap();

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let lag = s["lag_seconds"].as_f64().unwrap();
    assert!(
        (7190.0..7260.0).contains(&lag),
        "lag is the 2-hour-old confirmation: {lag}"
    );
    assert_eq!(s["rows"], 100);
    assert_eq!(s["cursor_position"], 25);
    assert_eq!(s["cycle_progress_percent"], 25.0);
    let age = s["cycle_age_seconds"].as_f64().unwrap();
    assert!((10_790.0..10_860.0).contains(&age), "{age}");
    assert_eq!(
        s["open_findings"],
        serde_json::json!({"missed_success": 2, "paid_locally_not_externally": 1})
    );
    assert_eq!(
        s["outbox_pending"], 1,
        "the application's own events are not counted"
    );
    let oldest = s["outbox_oldest_pending_seconds"].as_f64().unwrap();
    assert!((1790.0..1860.0).contains(&oldest), "{oldest}");
    // B*R = 500 rows in the hour between the two runs, G = 100 ids in that hour.
    let c = &s["capacity"];
    assert_eq!(
        c["scanned_rows_per_hour"].as_f64().map(f64::round),
        Some(500.0)
    );
    assert_eq!(c["new_rows_per_hour"].as_f64().map(f64::round), Some(100.0));
    assert_eq!(
        c["ratio"].as_f64().map(|r| (r * 100.0).round() / 100.0),
        Some(5.0)
    );
    // N / (B*R - G) = 100 / 400 h = 900 s.
    assert_eq!(
        c["expected_cycle_seconds"].as_f64().map(f64::round),
        Some(900.0)
    );
    assert!(s["last_success_unix"].as_f64().is_some());
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn status_names_the_payment_that_holds_the_lag(pool: PgPool) {
    insert_paid(&pool, 10).await;
    sqlx::raw_sql(
        "UPDATE payments SET created_at = now() - interval '6 days',
                             order_id = 'order-stuck', stripe_payment_intent_id = 'pi_Stuck'
          WHERE id = 4;
         INSERT INTO reconciliation_payment_state (payment_id, created_at, last_reconciled_at)
         SELECT id, created_at, CASE WHEN id = 4 THEN NULL ELSE now() - interval '5 minutes' END
           FROM payments;
         INSERT INTO reconciliation_cursor (job, last_id) VALUES ('payments-vs-stripe', 7);
         INSERT INTO reconciliation_findings (payment_id, kind, local_status) VALUES (4, 'missing_externally', 'paid');
         INSERT INTO reconciliation_unverifiable (job, payment_id, last_cycle, cycles, last_error)
         VALUES ('payments-vs-stripe', 4, now() - interval '1 hour', 2, 'Stripe answered 503 after 3 attempts');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let db = [("DATABASE_URL", database_url(&pool))];

    let out = reconciler_output(&["status"], &db).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let screen = stdout(&out);
    assert!(
        screen.contains("reconciliation lag                6d"),
        "{screen}"
    );
    assert!(
        screen.contains(
            "held by payment                 4 (order order-stuck, pi_Stuck, local paid)"
        ),
        "{screen}"
    );
    assert!(screen.contains("never (created 6d"), "{screen}");
    assert!(
        screen.contains("Stripe gave no definitive answer for it in 2 consecutive cycle(s) (unverifiable: timeout, 429, 5xx; last error: Stripe answered 503 after 3 attempts)"),
        "{screen}"
    );
    assert!(screen.contains("missing_externally"), "{screen}");

    let out = reconciler_output(&["status", "--json"], &db).await;
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["lag_held_by"]["payment_id"], 4);
    assert_eq!(s["lag_held_by"]["open_finding_kind"], "missing_externally");
}

/// In steady state the row holding the lag is the one the cursor reaches
/// next, confirmed in the previous cycle (which has completed since): the
/// screen says so, and sends nobody after Stripe errors that did not
/// happen. Only a recorded streak of unanswered reads says Stripe did not
/// answer.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn in_steady_state_the_lag_holder_was_confirmed_last_cycle_not_failed(pool: PgPool) {
    insert_paid(&pool, 10).await;
    // The previous cycle confirmed every row between 2 h and 1 h ago and
    // ended an hour ago; this one has confirmed rows 1 to 5 since.
    sqlx::raw_sql(
        "INSERT INTO reconciliation_payment_state (payment_id, created_at, last_reconciled_at)
         SELECT id, created_at, CASE WHEN id <= 5 THEN now() - interval '10 minutes'
                                     ELSE now() - interval '2 hours' + id * interval '1 minute' END
           FROM payments;
         INSERT INTO reconciliation_cursor (job, last_id, last_key, cycle_started_at, last_cycle_completed_at)
         VALUES ('payments-vs-stripe', 5, '5', now() - interval '1 hour', now() - interval '1 hour');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let db = [("DATABASE_URL", database_url(&pool))];
    let screen = stdout(&reconciler_output(&["status"], &db).await);
    assert!(
        screen.contains("held by payment                 6 "),
        "{screen}"
    );
    assert!(
        screen.contains(
            "confirmed in an earlier cycle, not reached yet in this one (cursor at id 5)"
        ),
        "{screen}"
    );
    assert!(!screen.contains("without a definitive answer"), "{screen}");
    assert!(!screen.contains("unverifiable"), "{screen}");

    // The same row with two cycles of unanswered reads recorded.
    sqlx::raw_sql(
        "INSERT INTO reconciliation_unverifiable (job, payment_id, last_cycle, cycles, last_error)
         VALUES ('payments-vs-stripe', 6, now() - interval '1 hour', 2, 'timed out after 10s');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let screen = stdout(&reconciler_output(&["status"], &db).await);
    assert!(
        screen.contains("Stripe gave no definitive answer for it in 2 consecutive cycle(s) (unverifiable: timeout, 429, 5xx; last error: timed out after 10s)"),
        "{screen}"
    );
    let out = reconciler_output(&["status", "--json"], &db).await;
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["lag_held_by"]["unverifiable_cycles"], 2);
}

/// The documented shape of `status --json` (README, "status --json"):
/// scripts depend on these keys and types; keys are only ever added.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn status_json_has_the_documented_shape(pool: PgPool) {
    insert_paid(&pool, 3).await;
    sqlx::raw_sql(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status) VALUES
             (1, 'missed_success', 'pending'), (2, 'missed_success', 'pending'),
             (3, 'unexpected:failed->succeeded', 'failed');",
    )
    .execute(&pool)
    .await
    .unwrap();

    let out = reconciler_output(
        &["status", "--json"],
        &[("DATABASE_URL", database_url(&pool))],
    )
    .await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut keys: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "capacity",
            "cursor_key",
            "cursor_position",
            "cycle_age_seconds",
            "cycle_last_completed_unix",
            "cycle_progress_percent",
            "events",
            "job",
            "lag_held_by",
            "lag_seconds",
            "last_success_unix",
            "open_findings",
            "outbox_oldest_pending_seconds",
            "outbox_pending",
            "outbox_shape",
            "partition",
            "plan",
            "rows",
        ]
    );
    for key in ["rows", "cursor_position", "outbox_pending"] {
        assert!(s[key].is_i64(), "{key} is an integer: {}", s[key]);
    }
    assert_eq!(
        s["open_findings"],
        serde_json::json!({"missed_success": 2, "unexpected:failed->succeeded": 1})
    );
    assert!(s["open_findings"]["missed_success"].is_i64());
    assert!(s["lag_seconds"].is_f64());
    assert!(s["capacity"].is_null(), "unknown without run history");
    let holder = s["lag_held_by"].as_object().unwrap();
    for key in [
        "payment_id",
        "order_id",
        "stripe_payment_intent_id",
        "status",
        "created_at",
        "updated_at",
        "last_reconciled_at",
        "open_finding_id",
        "open_finding_kind",
        "repair_last_error",
        "unverifiable_cycles",
        "unverifiable_last_error",
    ] {
        assert!(holder.contains_key(key), "lag_held_by.{key}: {holder:?}");
    }
}
