//! Any primary key (docs/keys.md): a uuid and a text key go
//! through `migrate`, `run` (retrieve and list mode), repair and review.
//! The other subjects are in `keys_integers`, `keys_changes` and
//! `keys_connect`; the arrangement is `support::keyed`.

use std::collections::BTreeSet;

use crate::support::keyed::*;
use crate::support::stripe_fake::{StripeFake, LIST, RETRIEVE};
use crate::support::*;
use serde_json::Value;
use sqlx::PgPool;
use stripe_reconciler::config::{OutboxSettings, ReadMode};
use stripe_reconciler::key::Walk;
use stripe_reconciler::repair::{drain, RepairOptions};
use tokio_util::sync::CancellationToken;
#[sqlx::test(migrations = false)]
async fn a_uuid_table_goes_through_migrate_both_read_modes_repair_and_review(pool: PgPool) {
    app_table(&pool, "uuid", "bigint", true).await;
    let printed = migrate(&pool, &[]).await;
    assert!(printed.contains("(created_at, id) order"), "{printed}");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM information_schema.columns
              WHERE table_name IN ('reconciliation_findings', 'reconciliation_payment_state',
                                   'reconciliation_unverifiable')
                AND column_name = 'payment_id' AND data_type = 'uuid'"
        )
        .await,
        3,
        "the reconciler's key columns hold uuid"
    );
    let stripe = StripeFake::start().await;
    let drift = uuid_rows(&pool, &stripe).await;
    assert_eq!(drift.len(), 2);

    // Retrieve mode.
    let s = job(&pool, ReadMode::Retrieve, 7).await;
    assert_eq!(facts(&pool, &s).await.key.walk(), Walk::CreatedAt);
    let summary = run(&pool, &stripe, &s).await;
    assert!(summary.wrapped, "{summary:?}");
    assert_eq!(summary.rows_scanned, 60);
    assert_eq!(open_findings(&pool).await, drift);
    assert_eq!(unconfirmed(&pool).await, 0);
    let commands: Vec<(String, Value)> = sqlx::query_as(
        "SELECT aggregate_id, payload FROM outbox WHERE event_type = 'ApplyPaymentSucceeded'
          ORDER BY aggregate_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let drifted: Vec<&String> = drift.iter().map(|(id, _)| id).collect();
    assert_eq!(
        commands.iter().map(|(a, _)| a).collect::<Vec<_>>(),
        drifted,
        "aggregate ids are the uuids"
    );
    for (id, payload) in &commands {
        assert_eq!(
            payload["payment_id"],
            Value::String(id.clone()),
            "{payload}"
        );
    }

    // List mode: the same findings, ~one list page per batch, not a read per row.
    forget_scan_state(&pool).await;
    let (lists, retrieves) = (stripe.count(LIST), stripe.count(RETRIEVE));
    let s = job(&pool, ReadMode::List, 30).await;
    run(&pool, &stripe, &s).await;
    assert_eq!(open_findings(&pool).await, drift);
    assert_eq!(unconfirmed(&pool).await, 0);
    let pages = stripe.count(LIST) - lists;
    assert!(pages > 0 && pages <= 4, "{pages} list pages for 60 rows");
    assert!(
        stripe.count(RETRIEVE) - retrieves < 10,
        "rows were listed, not retrieved"
    );

    // Repair: the canonical writer's guarded update by uuid.
    let report = drain(
        &pool,
        RepairOptions {
            outbox: OutboxSettings::default(),
            chunk: 10,
            max_attempts: 3,
            timestamp_zone: Default::default(),
            checkout_session_column: None,
            subscriptions: None,
        },
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(report.applied, 2, "{report:?}");
    for (id, _) in &drift {
        let status: String = sqlx::query_scalar("SELECT status FROM payments WHERE id = $1::uuid")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(status, "paid");
    }
    assert!(open_findings(&pool).await.is_empty());

    // Review: the view and `findings list` name the payment by its uuid.
    let keys: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT payment_key, order_id FROM reconciliation_review ORDER BY 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(keys.len(), 2);
    for (key, order) in &keys {
        assert!(drifted.contains(&key), "{key}");
        assert!(order
            .as_deref()
            .is_some_and(|o| o.starts_with("order-pi_U")));
    }
    let env = [
        ("DATABASE_URL", database_url(&pool)),
        ("STRIPE_API_KEY", "sk_test_keys".to_owned()),
    ];
    let out = reconciler_output(&["findings", "list", "--json"], &env).await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert!(text.contains(drifted[0].as_str()), "{text}");
    let out = reconciler_output(&["status", "--json"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
}

#[sqlx::test(migrations = false)]
async fn a_text_keyed_table_without_a_created_at_index_walks_by_key(pool: PgPool) {
    app_table(&pool, "text", "integer", false).await;
    let printed = migrate(&pool, &[]).await;
    assert!(
        printed.contains("CREATE INDEX CONCURRENTLY payments_created_at_id"),
        "migrate names the index that would help: {printed}"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM pg_indexes WHERE tablename = 'payments' AND indexdef LIKE '%created_at%'").await,
        0,
        "migrate adds no such index itself"
    );
    let stripe = StripeFake::start().await;
    let mut drift = BTreeSet::new();
    for i in 0..12 {
        let status = if i == 5 { "pending" } else { "paid" };
        let id = insert(
            &pool,
            &format!("'pay_{:02}'", 12 - i),
            &format!("pi_T{i}"),
            status,
            60 * i,
        )
        .await;
        if status == "pending" {
            drift.insert((id, "missed_success".to_owned()));
        }
    }
    stripe.mirror(&pool, "succeeded").await;
    for mode in [ReadMode::Retrieve, ReadMode::List] {
        forget_scan_state(&pool).await;
        let s = job(&pool, mode, 5).await;
        // List mode walks the reconciler's own ordered copy (docs/keys.md).
        let key = facts(&pool, &s).await.key;
        let copy = mode == ReadMode::List;
        assert_eq!(
            (key.walk(), key.own_copy()),
            if copy {
                (Walk::CreatedAt, true)
            } else {
                (Walk::Key, false)
            }
        );
        let summary = run(&pool, &stripe, &s).await;
        assert_eq!(summary.rows_scanned, 12, "{mode:?}");
        assert_eq!(open_findings(&pool).await, drift, "{mode:?}");
        assert_eq!(unconfirmed(&pool).await, 0, "{mode:?}");
    }
    // The events feed's look-up by PaymentIntent finds the row by its key.
    let s = job(&pool, ReadMode::Retrieve, 5).await;
    let facts = facts(&pool, &s).await;
    let mut conn = pool.acquire().await.unwrap();
    let found = stripe_reconciler::store::payments::by_payment_intents(
        &mut conn,
        &["pi_T5"],
        s.run.grace,
        stripe_reconciler::store::payments::MoneyColumns::of(&s.schema, &facts),
    )
    .await
    .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].row.id.as_str(), drift.first().unwrap().0);
    assert!(found[0].last_reconciled_at.is_some());
}

/// A text key declared with its own collation (`und-x-icu` in a `C.UTF-8` or
/// `C` database orders `a < B < C`, the database `B < C < a`): `migrate`
/// gives the reconciler's key columns that collation, so every range on our
/// tables orders as the walk does (a second `migrate` changes nothing); a
/// cycle then finds exactly the drift.
#[sqlx::test(migrations = false)]
async fn a_text_key_with_its_own_collation_is_stored_in_that_collation(pool: PgPool) {
    app_table(&pool, "text COLLATE \"und-x-icu\"", "integer", false).await;
    migrate(&pool, &[]).await;
    let collations: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.relname::text, coalesce(co.collname::text, '-')
           FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
           LEFT JOIN pg_collation co ON co.oid = a.attcollation
          WHERE a.attname = 'payment_id' AND c.relname IN
                ('reconciliation_findings', 'reconciliation_payment_state', 'reconciliation_unverifiable')
          ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        collations,
        [
            ("reconciliation_findings".to_owned(), "und-x-icu".to_owned()),
            (
                "reconciliation_payment_state".to_owned(),
                "und-x-icu".to_owned()
            ),
            (
                "reconciliation_unverifiable".to_owned(),
                "und-x-icu".to_owned()
            ),
        ]
    );
    let again = migrate(&pool, &[]).await;
    assert!(
        !again.contains("now holds that type"),
        "aligned once: {again}"
    );

    let stripe = StripeFake::start().await;
    let mut drift = BTreeSet::new();
    for (i, key) in ["a", "B", "c", "D", "e", "F"].iter().enumerate() {
        let status = if i % 2 == 0 { "pending" } else { "paid" };
        let id = insert(&pool, &format!("'{key}'"), &format!("pi_K{i}"), status, 60).await;
        if status == "pending" {
            drift.insert((id, "missed_success".to_owned()));
        }
    }
    stripe.mirror(&pool, "succeeded").await;
    let s = job(&pool, ReadMode::Retrieve, 2).await;
    assert!(run(&pool, &stripe, &s).await.wrapped);
    assert_eq!(open_findings(&pool).await, drift);
    assert_eq!(unconfirmed(&pool).await, 0);
}

/// A key type the other tests do not walk: every row read once in both read
/// modes, exactly the injected drift found, nothing left unconfirmed.
async fn walk_every_row(pool: &PgPool, id_type: &str, keys: &[&str]) {
    app_table(pool, id_type, "integer", false).await;
    migrate(pool, &[]).await;
    let stripe = StripeFake::start().await;
    let mut drift = BTreeSet::new();
    for (i, key) in keys.iter().enumerate() {
        let status = if i % 3 == 1 { "pending" } else { "paid" };
        let id = insert(pool, &format!("'{key}'"), &format!("pi_O{i}"), status, 60).await;
        if status == "pending" {
            drift.insert((id, "missed_success".to_owned()));
        }
    }
    stripe.mirror(pool, "succeeded").await;
    for mode in [ReadMode::Retrieve, ReadMode::List] {
        forget_scan_state(pool).await;
        let s = job(pool, mode, 2).await;
        let summary = run(pool, &stripe, &s).await;
        assert!(summary.wrapped, "{mode:?}");
        assert_eq!(summary.rows_scanned, keys.len() as u64, "{mode:?}");
        assert_eq!(open_findings(pool).await, drift, "{mode:?}");
        assert_eq!(unconfirmed(pool).await, 0, "{mode:?}");
    }
}

#[sqlx::test(migrations = false)]
async fn numeric_keys_with_fractions_and_scales_are_walked(pool: PgPool) {
    walk_every_row(
        &pool,
        "numeric",
        &["-1.5", "0", "2.25", "10", "10.50", "1e3"],
    )
    .await;
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE payment_id = 10.5"
        )
        .await,
        1
    );
}

#[sqlx::test(migrations = false)]
async fn varchar_keys_are_walked(pool: PgPool) {
    walk_every_row(
        &pool,
        "character varying(40)",
        &["01HZX3", "01HZX30", "pay_b", "Pay_a", "ü-key", "z"],
    )
    .await;
}
