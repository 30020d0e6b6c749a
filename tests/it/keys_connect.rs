//! A uuid key with the other subjects of the walk (docs/keys.md): a partition
//! and a connected account on a uuid table, and the events job finding a
//! missed webhook on one.

use std::collections::BTreeSet;

use crate::support::keyed::*;
use crate::support::stripe_fake::event;
use crate::support::stripe_fake::{StripeFake, RETRIEVE};
use crate::support::*;
use serde_json::Value;
use sqlx::PgPool;
use stripe_reconciler::config::{ColumnName, PartitionSetting, ReadMode};
use stripe_reconciler::events::EventsJob;
#[sqlx::test(migrations = false)]
async fn a_partition_and_a_connected_account_on_a_uuid_table(pool: PgPool) {
    app_table(&pool, "uuid", "bigint", true).await;
    let partition_env = [
        ("RECONCILER_PARTITION_COLUMN", "legal_entity".to_owned()),
        ("RECONCILER_PARTITION_VALUE", "eu".to_owned()),
        ("RECONCILER_JOB", "payments-eu".to_owned()),
    ];
    migrate(&pool, &partition_env).await;
    let stripe = StripeFake::start().await;
    for i in 0..10 {
        let id = insert(
            &pool,
            "gen_random_uuid()",
            &format!("pi_P{i}"),
            "paid",
            600 * i,
        )
        .await;
        let (entity, account) = match i % 3 {
            0 => ("us", None),
            1 => ("eu", Some("acct_1Keys")),
            _ => ("eu", None),
        };
        sqlx::query(
            "UPDATE payments SET legal_entity = $2, stripe_account = $3 WHERE id = $1::uuid",
        )
        .bind(&id)
        .bind(entity)
        .bind(account)
        .execute(&pool)
        .await
        .unwrap();
        stripe.add(
            account,
            &format!("pi_P{i}"),
            "succeeded",
            chrono::Utc::now().timestamp() - 600 * i,
        );
    }
    let mut s = job(&pool, ReadMode::Retrieve, 3).await;
    s.run.job = "payments-eu".to_owned();
    s.schema.account_column =
        Some(ColumnName::parse("RECONCILER_ACCOUNT_COLUMN", "stripe_account").unwrap());
    s.schema.partition = Some(PartitionSetting {
        column: ColumnName::parse("RECONCILER_PARTITION_COLUMN", "legal_entity").unwrap(),
        value: "eu".to_owned(),
    });
    let summary = run(&pool, &stripe, &s).await;
    assert_eq!(summary.rows_scanned, 6, "the eu rows only");
    assert!(open_findings(&pool).await.is_empty());
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM payments p JOIN reconciliation_payment_state s ON s.payment_id = p.id
              WHERE s.last_reconciled_at IS NOT NULL AND p.legal_entity = 'eu'"
        )
        .await,
        6
    );
    assert!(
        stripe.count_on(Some("acct_1Keys"), RETRIEVE) >= 3,
        "the connected account's rows were read as that account"
    );
}

/// The events job on a random-uuid table: a missed webhook (Stripe says
/// succeeded, the row is still `pending`) surfaced through `GET /v1/events`
/// is a `missed_success` finding for that uuid, and its repair command names
/// the payment by the uuid as a string.
#[sqlx::test(migrations = false)]
async fn the_events_job_finds_a_missed_webhook_on_a_uuid_table(pool: PgPool) {
    app_table(&pool, "uuid", "bigint", true).await;
    migrate(&pool, &[]).await;
    let stripe = StripeFake::start().await;
    let missed = insert(&pool, "gen_random_uuid()", "pi_UEvents", "pending", 3600).await;
    let in_sync = insert(&pool, "gen_random_uuid()", "pi_UInSync", "paid", 3600).await;
    stripe.mirror(&pool, "succeeded").await;
    stripe.push_event(None, event("evt_u1", "pi_UEvents", "succeeded", 120));
    stripe.push_event(None, event("evt_u2", "pi_UInSync", "succeeded", 110));

    let s = job(&pool, ReadMode::Retrieve, 50).await;
    let (summary, result) = run_job(&pool, &gateway(&stripe), &s, EventsJob).await;
    result.unwrap();

    assert_eq!(summary.events_read, 2, "{summary:?}");
    assert_eq!(
        open_findings(&pool).await,
        BTreeSet::from([(missed.clone(), "missed_success".to_owned())]),
        "only the missed webhook, by its uuid (not {in_sync})"
    );
    let commands = outbox(&pool).await;
    assert_eq!(
        commands.len(),
        1,
        "{:?}",
        commands.iter().map(|c| &c.event_type).collect::<Vec<_>>()
    );
    assert_eq!(commands[0].event_type, "ApplyPaymentSucceeded");
    assert_eq!(commands[0].aggregate_id, missed);
    assert_eq!(
        commands[0].payload["payment_id"],
        Value::String(missed.clone()),
        "{}",
        commands[0].payload
    );
}
