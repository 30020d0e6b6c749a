//! The user's own schema, created before `migrate` (docs/schema.md): a
//! Debezium-shaped outbox is used as it is and never altered, an outbox of a
//! third shape and a `payments.id` of a type the reconciler cannot key by (bytea) stop with exit 78 before anything is
//! created.

use std::time::Duration;

use sqlx::PgPool;

use crate::support::*;

/// The application's tables: `payments` without the reconciler's UNIQUE
/// index, and a Debezium outbox-event-router table.
async fn application_with_debezium_outbox(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE payments (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text NOT NULL,
             status text NOT NULL,
             version bigint NOT NULL DEFAULT 0,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now());
         CREATE TABLE outbox (
             id uuid PRIMARY KEY,
             aggregatetype varchar(255) NOT NULL,
             aggregateid varchar(255) NOT NULL,
             type varchar(255) NOT NULL,
             payload jsonb,
             timestamp timestamptz NOT NULL);
         CREATE INDEX outbox_app_type ON outbox (type);",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// Columns (name, type, nullability) and index definitions of `outbox`.
async fn outbox_layout(pool: &PgPool) -> (Vec<(String, String, String)>, Vec<String>) {
    let columns = sqlx::query_as(
        "SELECT column_name::text, data_type::text, is_nullable::text
           FROM information_schema.columns WHERE table_name = 'outbox' ORDER BY ordinal_position",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let indexes = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE tablename = 'outbox' ORDER BY indexname",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    (columns, indexes)
}

#[sqlx::test(migrations = false)]
async fn a_debezium_outbox_is_used_as_it_is_and_its_relay_delivers(pool: PgPool) {
    application_with_debezium_outbox(&pool).await;
    let before = outbox_layout(&pool).await;
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;
    let env = |extra: &[(&'static str, &str)]| {
        let mut env = vec![
            ("DATABASE_URL", database_url(&pool)),
            ("RECONCILER_OUTBOX_SHAPE", "debezium".to_owned()),
            ("STRIPE_API_KEY", "sk_test_your_schema".to_owned()),
            ("STRIPE_API_BASE", stripe.uri()),
            ("RECONCILER_READ_MODE", "retrieve".to_owned()),
            ("RECONCILER_LOG_FORMAT", "pretty".to_owned()),
        ];
        env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        env
    };

    let out = reconciler_output(&["migrate"], &env(&[])).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(
        outbox_layout(&pool).await,
        before,
        "the outbox is untouched"
    );

    let payment = insert_payment(&pool, "pi_Missed", "pending", 3600).await;
    let out = reconciler_output(&["run"], &env(&[])).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let rows: Vec<(uuid_text::Id, String, String, String, serde_json::Value)> = sqlx::query_as(
        "SELECT id::text, aggregatetype::text, aggregateid::text, type::text, payload FROM outbox",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (id, aggregatetype, aggregateid, event_type, payload) = &rows[0];
    assert_eq!(id.0.len(), 36, "a uuid: {id:?}");
    assert_eq!(aggregatetype, "payment");
    assert_eq!(aggregateid, &payment.to_string());
    assert_eq!(event_type, "ApplyPaymentSucceeded");
    assert_eq!(payload["payment_id"], payment);
    assert_eq!(payload["stripe_payment_intent_id"], "pi_Missed");
    assert_eq!(payload["expected_local_status"], "pending");

    // `repair` leaves the relay's outbox alone.
    let out = reconciler_output(&["repair"], &env(&[])).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("relay"),
        "{}",
        all_output(&out)
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox").await, 1);

    // A run that sees the finding again enqueues nothing more, even after
    // the relay deleted its row.
    sqlx::query("DELETE FROM outbox")
        .execute(&pool)
        .await
        .unwrap();
    let out = reconciler_output(&["run"], &env(&[("RECONCILER_BATCHES_PER_RUN", "2")])).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox").await, 0);

    // The application's writer applied it; the next read in sync clears it.
    sqlx::query(
        "UPDATE payments SET status = 'paid', updated_at = now() - interval '1 hour' WHERE id = $1",
    )
    .bind(payment)
    .execute(&pool)
    .await
    .unwrap();
    let out = reconciler_output(&["run"], &env(&[("RECONCILER_BATCHES_PER_RUN", "2")])).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let resolution: Option<String> =
        sqlx::query_scalar("SELECT resolution FROM reconciliation_findings WHERE payment_id = $1")
            .bind(payment)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(resolution.as_deref(), Some("cleared"));
    assert_eq!(outbox_layout(&pool).await, before, "still untouched");
}

/// The design note's own outbox (`aggregate_type`, `aggregate_id`,
/// `event_type`, `payload`; no `processed_at`, `attempts`, `last_error`),
/// drained by the application's relay: refused under the default shape with
/// a sentence naming `plain`, then written to with
/// `RECONCILER_OUTBOX_SHAPE=plain` like the Debezium shape, never altered,
/// never drained by `repair`.
#[sqlx::test(migrations = false)]
async fn the_design_notes_outbox_is_written_with_the_plain_shape_and_left_to_its_relay(
    pool: PgPool,
) {
    sqlx::raw_sql(
        "CREATE TABLE payments (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text NOT NULL,
             status text NOT NULL,
             version bigint NOT NULL DEFAULT 0,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now());
         CREATE TABLE outbox (
             id bigserial PRIMARY KEY,
             aggregate_type text NOT NULL,
             aggregate_id text NOT NULL,
             event_type text NOT NULL,
             payload jsonb NOT NULL,
             created_at timestamptz NOT NULL DEFAULT now());",
    )
    .execute(&pool)
    .await
    .unwrap();
    let before = outbox_layout(&pool).await;
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;
    let env = |shape: &str| {
        vec![
            ("DATABASE_URL", database_url(&pool)),
            ("RECONCILER_OUTBOX_SHAPE", shape.to_owned()),
            ("STRIPE_API_KEY", "sk_test_your_schema".to_owned()),
            ("STRIPE_API_BASE", stripe.uri()),
            ("RECONCILER_READ_MODE", "retrieve".to_owned()),
            ("RECONCILER_BATCHES_PER_RUN", "2".to_owned()),
        ]
    };

    let out = reconciler_output(&["migrate"], &env("reconciler")).await;
    assert_eq!(out.status.code(), Some(78), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("RECONCILER_OUTBOX_SHAPE=plain (it has the plain shape)"),
        "{}",
        all_output(&out)
    );

    let out = reconciler_output(&["migrate"], &env("plain")).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let payment = insert_payment(&pool, "pi_MissedPlain", "pending", 3600).await;
    let out = reconciler_output(&["run"], &env("plain")).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let rows: Vec<(String, String, String, serde_json::Value)> =
        sqlx::query_as("SELECT aggregate_type, aggregate_id, event_type, payload FROM outbox")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (aggregate_type, aggregate_id, event_type, payload) = &rows[0];
    assert_eq!(aggregate_type, "Payment");
    assert_eq!(aggregate_id, &payment.to_string());
    assert_eq!(event_type, "ApplyPaymentSucceeded");
    assert_eq!(payload["payment_id"], payment);
    assert_eq!(payload["expected_local_status"], "pending");

    // `repair` leaves it to the relay; `status` counts no backlog of ours.
    let out = reconciler_output(&["repair"], &env("plain")).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert!(stdout(&out).contains("relay"), "{}", all_output(&out));
    let out = reconciler_output(&["status", "--json"], &env("plain")).await;
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["outbox_shape"], "plain");
    assert!(s["outbox_pending"].is_null(), "{s}");

    // The relay deleted the row it delivered: the next run enqueues no second.
    sqlx::query("DELETE FROM outbox")
        .execute(&pool)
        .await
        .unwrap();
    let out = reconciler_output(&["run"], &env("plain")).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox").await, 0);
    assert_eq!(
        outbox_layout(&pool).await,
        before,
        "the outbox is untouched"
    );
}

mod uuid_text {
    /// A uuid read as text.
    #[derive(Debug, sqlx::Type)]
    #[sqlx(transparent)]
    pub struct Id(pub String);
}

#[sqlx::test(migrations = false)]
async fn an_outbox_of_a_third_shape_stops_migrate_run_and_repair_naming_its_missing_columns(
    pool: PgPool,
) {
    create_demo_payments(&pool).await;
    sqlx::raw_sql(
        "CREATE TABLE outbox (id bigserial PRIMARY KEY, topic text NOT NULL, body jsonb NOT NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let env = [
        ("DATABASE_URL", database_url(&pool)),
        ("STRIPE_API_KEY", "sk_test_your_schema".to_owned()),
    ];
    for args in [&["migrate"][..], &["run"], &["repair"]] {
        let out = reconciler_output(args, &env).await;
        assert_eq!(
            out.status.code(),
            Some(78),
            "{args:?}: {}",
            all_output(&out)
        );
        let text = all_output(&out);
        for needle in [
            "aggregate_type, aggregate_id, event_type, payload",
            "RECONCILER_OUTBOX_TABLE to another table",
            "RECONCILER_OUTBOX_SHAPE=debezium",
        ] {
            assert!(text.contains(needle), "{args:?}: {needle} not in {text}");
        }
    }
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'reconciliation%'"
        )
        .await,
        0,
        "nothing was created"
    );
}

#[sqlx::test(migrations = false)]
async fn a_bytea_payment_id_stops_migrate_and_run_with_one_sentence(pool: PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE payments (
             id bytea PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text NOT NULL,
             status text NOT NULL,
             version bigint NOT NULL DEFAULT 0,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now())",
    )
    .execute(&pool)
    .await
    .unwrap();
    let env = [
        ("DATABASE_URL", database_url(&pool)),
        ("STRIPE_API_KEY", "sk_test_your_schema".to_owned()),
    ];
    for args in [&["migrate"][..], &["run"]] {
        let out = reconciler_output(args, &env).await;
        assert_eq!(
            out.status.code(),
            Some(78),
            "{args:?}: {}",
            all_output(&out)
        );
        let text = all_output(&out);
        assert!(
            text.contains("payments.id is of type bytea") && text.contains("uuid, text"),
            "{args:?}: {text}"
        );
        assert!(!text.contains("foreign key"), "{text}");
    }
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'payments'"
        )
        .await,
        0,
        "nothing was created"
    );
}
