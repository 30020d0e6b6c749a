//! `run` and `events` through the shipped binary on every key type the
//! reconciler accepts (docs/keys.md): `smallint`, `integer`, `bigint`,
//! `uuid`, `text`, `character varying`, `numeric` and a text key with its
//! own collation. The settings are the binary's own (the key detected by
//! `run` and `events` themselves, from the environment), so a broken key
//! check or key binding in a shipped command fails here even when the
//! library-level key tests (`keys*.rs`) still pass.

use std::collections::BTreeSet;

use sqlx::PgPool;

use crate::support::keyed::{app_table, insert, migrate, open_findings, unconfirmed};
use crate::support::stripe_fake::event;
use crate::support::stripe_fake::{StripeFake, LIST};
use crate::support::*;

/// The environment of a binary run against `stripe` (default read mode:
/// list), two rows per batch so the walk crosses keys between batches.
fn env(pool: &PgPool, stripe: &StripeFake) -> Vec<(&'static str, String)> {
    vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_BATCH_SIZE", "2".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "10".to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
    ]
}

/// A `payments` keyed `id_type` holding one row per key of `keys` (SQL
/// literals, in insertion order; one a minute): row 1 and row 4 are
/// `pending` while Stripe says `succeeded`. `events` (the feed names row 1
/// only) finds row 1; `run` then finds row 4 too, every row confirmed.
async fn run_and_events_through_the_binary(pool: &PgPool, id_type: &str, keys: &[&str]) {
    assert!(keys.len() >= 5);
    app_table(pool, id_type, "integer", false).await;
    migrate(pool, &[]).await;
    let stripe = StripeFake::start().await;
    let mut ids = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let status = if i == 1 || i == 4 { "pending" } else { "paid" };
        let age = 60 * (keys.len() - i) as i64 + 3600;
        ids.push(insert(pool, key, &format!("pi_Key{i}"), status, age).await);
    }
    stripe.mirror(pool, "succeeded").await;
    stripe.push_event(None, event("evt_key1", "pi_Key1", "succeeded", 120));
    let env = env(pool, &stripe);

    let out = reconciler_output(&["events"], &env).await;
    assert_eq!(out.status.code(), Some(0), "events: {}", all_output(&out));
    let after_events = BTreeSet::from([(ids[1].clone(), "missed_success".to_owned())]);
    assert_eq!(open_findings(pool).await, after_events, "{id_type}");

    let out = reconciler_output(&["run"], &env).await;
    assert_eq!(out.status.code(), Some(0), "run: {}", all_output(&out));
    let mut after_run = after_events;
    after_run.insert((ids[4].clone(), "missed_success".to_owned()));
    assert_eq!(open_findings(pool).await, after_run, "{id_type}");
    assert_eq!(unconfirmed(pool).await, 0, "{id_type}: every row read");
    // Read by list pages (the default read mode), none failed.
    assert!(stripe.count(LIST) > 0, "{id_type}");
    stripe.assert_read_by_list(0);
    // One repair command per finding, naming the payment by its key as text.
    let commands: BTreeSet<String> = outbox(pool)
        .await
        .into_iter()
        .map(|c| c.aggregate_id)
        .collect();
    assert_eq!(
        commands,
        BTreeSet::from([ids[1].clone(), ids[4].clone()]),
        "{id_type}"
    );
}

#[sqlx::test(migrations = false)]
async fn smallint_keys_through_the_binary(pool: PgPool) {
    run_and_events_through_the_binary(&pool, "smallint", &["-3", "0", "7", "300", "32767"]).await;
}

#[sqlx::test(migrations = false)]
async fn integer_keys_through_the_binary(pool: PgPool) {
    let keys = ["-2147483648", "-1", "0", "70000", "2147483647"];
    run_and_events_through_the_binary(&pool, "integer", &keys).await;
}

#[sqlx::test(migrations = false)]
async fn bigint_keys_through_the_binary(pool: PgPool) {
    let keys = ["-5000000000", "1", "2", "5000000000", "9223372036854775807"];
    run_and_events_through_the_binary(&pool, "bigint", &keys).await;
}

#[sqlx::test(migrations = false)]
async fn uuid_keys_through_the_binary(pool: PgPool) {
    let keys = ["gen_random_uuid()"; 5];
    run_and_events_through_the_binary(&pool, "uuid", &keys).await;
}

#[sqlx::test(migrations = false)]
async fn text_keys_through_the_binary(pool: PgPool) {
    let keys = ["'01HZX3'", "'01HZX30'", "'Pay_a'", "'pay_b'", "'z'"];
    run_and_events_through_the_binary(&pool, "text", &keys).await;
}

#[sqlx::test(migrations = false)]
async fn varchar_keys_through_the_binary(pool: PgPool) {
    let keys = ["'01HZX3'", "'01HZX30'", "'Pay_a'", "'ü-key'", "'z'"];
    run_and_events_through_the_binary(&pool, "character varying(40)", &keys).await;
}

#[sqlx::test(migrations = false)]
async fn numeric_keys_through_the_binary(pool: PgPool) {
    let keys = ["-1.5", "0", "2.25", "10.50", "1e3"];
    run_and_events_through_the_binary(&pool, "numeric", &keys).await;
}

/// `und-x-icu` orders `a < B < c`, the database's default `B < a < c`:
/// the walk and the reconciler's own key columns must agree.
#[sqlx::test(migrations = false)]
async fn collated_text_keys_through_the_binary(pool: PgPool) {
    let keys = ["'a'", "'B'", "'c'", "'D'", "'e'", "'F'"];
    run_and_events_through_the_binary(&pool, "text COLLATE \"und-x-icu\"", &keys).await;
}
