//! `status`, `status --json` and the pushed outbox gauges follow
//! `RECONCILER_OUTBOX_TABLE` and `RECONCILER_OUTBOX_SHAPE` (docs/schema.md, "Outbox"): a
//! reconciler outbox of any name is counted, a debezium outbox (drained by
//! the application's relay) is reported as not applicable and not pushed.

use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;

use crate::support::pushgateway::{self, value};
use crate::support::*;

const JOB: (&str, &str) = ("job", "payments-vs-stripe");

/// The application's `payments`, created before `migrate`, with one payment
/// whose success webhook was missed (a repair command on the next run).
async fn application_with_a_missed_success(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE payments (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text NOT NULL,
             status text NOT NULL,
             version bigint NOT NULL DEFAULT 0,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now());",
    )
    .execute(pool)
    .await
    .unwrap();
    insert_paid(pool, 3).await;
    insert_payment(pool, "pi_Missed", "pending", 3600).await;
}

/// `migrate`, then one `run` pushing to a fresh Pushgateway; returns its scrape.
async fn migrate_and_run(pool: &PgPool, env: &[(&str, String)]) -> String {
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;
    let gw = pushgateway::start().await;
    let mut env = env.to_vec();
    env.extend([
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("PUSHGATEWAY_URL", gw.url.clone()),
        ("RECONCILER_READ_MODE", "retrieve".to_owned()),
    ]);
    let out = reconciler_output(&["migrate"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let out = reconciler_output(&["run"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    gw.scrape().await
}

async fn status_json(pool: &PgPool, env: &[(&str, String)]) -> Value {
    let mut env = env.to_vec();
    env.push(("DATABASE_URL", database_url(pool)));
    let out = reconciler_output(&["status", "--json"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn status_screen(pool: &PgPool, env: &[(&str, String)]) -> String {
    let mut env = env.to_vec();
    env.push(("DATABASE_URL", database_url(pool)));
    let out = reconciler_output(&["status"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    String::from_utf8(out.stdout).unwrap()
}

#[sqlx::test(migrations = false)]
async fn a_custom_named_outbox_is_the_one_status_and_the_metrics_count(pool: PgPool) {
    application_with_a_missed_success(&pool).await;
    let env = [("RECONCILER_OUTBOX_TABLE", "repair_commands".to_owned())];

    let m = migrate_and_run(&pool, &env).await;

    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM repair_commands WHERE processed_at IS NULL"
        )
        .await,
        1,
        "the run enqueued its repair in the configured table"
    );
    assert_eq!(
        value(&m, "stripe_reconciler_outbox_pending", &[JOB]),
        Some(1.0),
        "{m}"
    );
    assert!(
        value(
            &m,
            "stripe_reconciler_outbox_oldest_pending_age_seconds",
            &[JOB]
        )
        .is_some_and(|age| age >= 0.0),
        "{m}"
    );
    let s = status_json(&pool, &env).await;
    assert_eq!(s["outbox_pending"], 1, "{s}");
    assert!(s["outbox_oldest_pending_seconds"].is_f64(), "{s}");
    assert_eq!(s["outbox_shape"], "reconciler", "{s}");
    let screen = status_screen(&pool, &env).await;
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with("outbox repairs pending") && l.contains(" 1 (oldest ")),
        "{screen}"
    );
}

#[sqlx::test(migrations = false)]
async fn a_debezium_outbox_reports_no_backlog_and_pushes_no_outbox_gauges(pool: PgPool) {
    application_with_a_missed_success(&pool).await;
    sqlx::raw_sql(
        "CREATE TABLE outbox (
             id uuid PRIMARY KEY,
             aggregatetype varchar(255) NOT NULL,
             aggregateid varchar(255) NOT NULL,
             type varchar(255) NOT NULL,
             payload jsonb);",
    )
    .execute(&pool)
    .await
    .unwrap();
    let env = [("RECONCILER_OUTBOX_SHAPE", "debezium".to_owned())];

    let m = migrate_and_run(&pool, &env).await;

    assert_eq!(
        count(&pool, "SELECT count(*) FROM outbox").await,
        1,
        "the run handed its repair to the relay"
    );
    assert!(
        value(&m, "stripe_reconciler_lag_seconds", &[JOB]).is_some(),
        "the state was pushed: {m}"
    );
    assert!(!m.contains("stripe_reconciler_outbox_pending"), "{m}");
    assert!(
        !m.contains("stripe_reconciler_outbox_oldest_pending_age_seconds"),
        "{m}"
    );
    let s = status_json(&pool, &env).await;
    assert_eq!(s["outbox_pending"], Value::Null, "{s}");
    assert_eq!(s["outbox_oldest_pending_seconds"], Value::Null, "{s}");
    assert_eq!(s["outbox_shape"], "debezium", "{s}");
    assert_eq!(s["open_findings"]["missed_success"], 1, "{s}");
    let screen = status_screen(&pool, &env).await;
    assert!(
        screen.contains("drained by the application's relay (debezium shape)"),
        "{screen}"
    );
    assert!(!screen.contains("outbox repairs pending"), "{screen}");
}
