//! The events job on a partitioned table: an event about another
//! partition's row is neither read nor an orphan, and `events` keeps to an
//! integer partition through the binary.

use super::partition::{env, open_kinds, partition_columns, payment, US_KEY};
use crate::support::stripe_fake::{event, StripeFake};
use crate::support::*;
use serde_json::json;
use sqlx::PgPool;
use stripe_reconciler::config::{ColumnName, PartitionSetting};
use stripe_reconciler::events::EventsJob;

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_event_about_another_partitions_row_is_neither_read_nor_an_orphan(pool: PgPool) {
    partition_columns(&pool).await;
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    let eu_row = payment(&pool, "pi_EuRow", "pending", Some("eu"), 1).await;
    payment(&pool, "pi_UsRow", "pending", Some("us"), 2).await;
    feed.push(event("evt_1", "pi_EuRow", "succeeded", 900));
    feed.push(event("evt_2", "pi_UsRow", "succeeded", 900));
    feed.push(event("evt_3", "pi_NoRow", "succeeded", 900));
    for pi in ["pi_EuRow", "pi_UsRow", "pi_NoRow"] {
        let mut object = payment_intent(pi, "succeeded");
        object["metadata"] = json!({"shop_order": format!("order-{pi}")});
        stripe.add_object(None, object);
    }
    let mut s = settings(200);
    s.run.job = "payments-eu".into();
    s.schema.partition = Some(PartitionSetting {
        column: ColumnName::parse("RECONCILER_PARTITION_COLUMN", "legal_entity").unwrap(),
        value: "eu".into(),
    });

    let (summary, result) = run_job(&pool, &gateway(&stripe), &s, EventsJob).await;
    result.unwrap();
    let retrieved: Vec<String> = stripe
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| r.url.path().to_owned())
        .filter(|p| p.starts_with("/v1/payment_intents/"))
        .collect();
    assert!(
        !retrieved.iter().any(|p| p.ends_with("pi_UsRow")),
        "another partition's row is not re-read: {retrieved:?}"
    );
    assert_eq!(summary.missing_locally_created, 1, "only pi_NoRow");
    let findings: Vec<(Option<i64>, Option<String>, String)> = sqlx::query_as(
        "SELECT payment_id, CASE WHEN payment_id IS NULL THEN stripe_payment_intent_id END, kind
           FROM reconciliation_findings ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        findings,
        [
            (Some(eu_row), None, "missed_success".into()),
            (None, Some("pi_NoRow".into()), "missing_locally".into()),
        ]
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_events_command_keeps_to_an_integer_partition(pool: PgPool) {
    partition_columns(&pool).await;
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    payment(&pool, "pi_One", "pending", Some("eu"), 1).await;
    let two = payment(&pool, "pi_Two", "pending", Some("us"), 2).await;
    feed.push(event("evt_1", "pi_One", "succeeded", 900));
    feed.push(event("evt_2", "pi_Two", "succeeded", 900));
    for pi in ["pi_One", "pi_Two"] {
        stripe.add_object(None, payment_intent(pi, "succeeded"));
    }
    let who = [
        ("STRIPE_API_KEY", US_KEY),
        ("RECONCILER_JOB", "entity-2"),
        ("RECONCILER_PARTITION_COLUMN", "entity_no"),
        ("RECONCILER_PARTITION_VALUE", "2"),
    ];
    let out = reconciler_output(&["events"], &env(&pool, &stripe, &who)).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let paths: Vec<String> = stripe
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| r.url.path().to_owned())
        .collect();
    assert!(
        paths.contains(&"/v1/payment_intents/pi_Two".to_owned()),
        "{paths:?}"
    );
    assert!(
        !paths.contains(&"/v1/payment_intents/pi_One".to_owned()),
        "{paths:?}"
    );
    assert_eq!(open_kinds(&pool).await, [(two, "missed_success".into())]);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE kind = 'missing_locally'"
        )
        .await,
        0
    );
}
