//! Any primary key (issue 31, docs/keys.md): `payments.id` of type integer,
//! smallint, uuid or text goes through `migrate`, `run` (retrieve and list
//! mode), repair and review; ids ≤ 0 and near ±2^63 are read; a row
//! committed late with an old `created_at` is verified by the next cycle; a
//! partition and a connected account on a uuid table.

use std::collections::BTreeSet;

use crate::support::events_feed::event;
use crate::support::stripe_fake::{StripeFake, LIST, RETRIEVE};
use crate::support::*;
use serde_json::Value;
use sqlx::PgPool;
use stripe_reconciler::config::{
    ColumnName, JobSettings, OutboxSettings, Partition, PartitionKind, ReadMode, Sizing,
};
use stripe_reconciler::events::run_events;
use stripe_reconciler::key::Walk;
use stripe_reconciler::repair::{drain, RepairOptions};
use stripe_reconciler::scan::{self, RunOptions, RunSummary};
use stripe_reconciler::store::keys;
use tokio_util::sync::CancellationToken;

/// The application's own `payments`, keyed by `id_type`, with a `version`
/// of `version_type`, a `legal_entity` and a connected account column, and
/// an index on `created_at` when `created_index`.
async fn app_table(pool: &PgPool, id_type: &str, version_type: &str, created_index: bool) {
    sqlx::raw_sql(&format!(
        "CREATE TABLE payments (
             id {id_type} PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text NOT NULL,
             status text NOT NULL,
             version {version_type} NOT NULL DEFAULT 0,
             legal_entity text NOT NULL DEFAULT 'eu',
             stripe_account text,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now());
         {}",
        if created_index {
            "CREATE INDEX payments_created_at ON payments (created_at);"
        } else {
            ""
        }
    ))
    .execute(pool)
    .await
    .unwrap();
}

/// `migrate` through the binary, as a user runs it; returns what it printed.
async fn migrate(pool: &PgPool, extra: &[(&str, String)]) -> String {
    let mut env = vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", "sk_test_keys".to_owned()),
    ];
    env.extend(extra.iter().cloned());
    let out = reconciler_output(&["migrate"], &env).await;
    let text = all_output(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    text
}

/// Inserts a row keyed `id` (an SQL expression), created `created_secs_ago`,
/// last updated an hour ago; returns its key as text.
async fn insert(pool: &PgPool, id: &str, pi: &str, status: &str, created_secs_ago: i64) -> String {
    sqlx::query_scalar(&format!(
        "INSERT INTO payments (id, order_id, stripe_payment_intent_id, status, created_at, updated_at)
         VALUES ({id}, 'order-' || $1, $1, $2, now() - make_interval(secs => $3),
                 now() - interval '1 hour')
         RETURNING id::text"
    ))
    .bind(pi)
    .bind(status)
    .bind(created_secs_ago as f64)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// The job's settings with `payments.id`'s type detected, as `run` does.
async fn job(pool: &PgPool, mode: ReadMode, batch_size: u32) -> JobSettings {
    let mut conn = pool.acquire().await.unwrap();
    let key = keys::detect(&mut conn).await.unwrap().unwrap();
    let mut s = settings(batch_size);
    s.scan.read_mode = mode;
    s.scan.batches_per_run = Sizing::Fixed(100);
    s.schema.key = key;
    s
}

async fn run(pool: &PgPool, stripe: &StripeFake, s: &JobSettings) -> RunSummary {
    let (summary, result) = scan::run(
        pool,
        &gateway(stripe),
        s,
        RunOptions::default(),
        CancellationToken::new(),
    )
    .await;
    result.unwrap();
    summary
}

/// `(payment key, kind)` of every open finding.
async fn open_findings(pool: &PgPool) -> BTreeSet<(String, String)> {
    sqlx::query_as(
        "SELECT payment_id::text, kind FROM reconciliation_findings WHERE resolved_at IS NULL",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

/// Rows never confirmed with Stripe.
async fn unconfirmed(pool: &PgPool) -> i64 {
    count(
        pool,
        "SELECT count(*) FROM payments p
          WHERE NOT EXISTS (SELECT 1 FROM reconciliation_payment_state s
                             WHERE s.payment_id = p.id AND s.last_reconciled_at IS NOT NULL)",
    )
    .await
}

async fn forget_everything_but_payments(pool: &PgPool) {
    sqlx::raw_sql(
        "TRUNCATE reconciliation_findings, outbox, reconciliation_cursor, reconciliation_runs,
                  reconciliation_unverifiable RESTART IDENTITY CASCADE;
         TRUNCATE reconciliation_payment_state",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// 60 rows on a random-uuid table (one a minute), two of them `pending`
/// while Stripe says succeeded: exactly two `missed_success` findings.
async fn uuid_rows(pool: &PgPool, stripe: &StripeFake) -> BTreeSet<(String, String)> {
    let mut drift = BTreeSet::new();
    for i in 0..60 {
        let status = if i % 29 == 7 { "pending" } else { "paid" };
        let id = insert(
            pool,
            "gen_random_uuid()",
            &format!("pi_U{i:03}"),
            status,
            60 * (60 - i),
        )
        .await;
        if status == "pending" {
            drift.insert((id, "missed_success".to_owned()));
        }
    }
    stripe.mirror(pool, "succeeded").await;
    drift
}

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
    assert_eq!(s.schema.key.walk(), Walk::CreatedAt);
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
    forget_everything_but_payments(&pool).await;
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
        forget_everything_but_payments(&pool).await;
        let s = job(&pool, mode, 5).await;
        assert_eq!(s.schema.key.walk(), Walk::Key);
        let summary = run(&pool, &stripe, &s).await;
        assert_eq!(summary.rows_scanned, 12, "{mode:?}");
        assert_eq!(open_findings(&pool).await, drift, "{mode:?}");
        assert_eq!(unconfirmed(&pool).await, 0, "{mode:?}");
    }
    // The events feed's look-up by PaymentIntent finds the row by its key.
    let mut conn = pool.acquire().await.unwrap();
    let s = job(&pool, ReadMode::Retrieve, 5).await;
    let found = stripe_reconciler::store::payments::by_payment_intents(
        &mut conn,
        &["pi_T5"],
        s.run.grace,
        stripe_reconciler::store::payments::MoneyColumns::of(&s.schema),
    )
    .await
    .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].row.id.as_str(), drift.first().unwrap().0);
    assert!(found[0].last_reconciled_at.is_some());
}

/// `integer` or `smallint` ids and versions: migrate, run, status.
async fn small_integer_table(pool: &PgPool, int_type: &str) {
    app_table(pool, int_type, int_type, false).await;
    migrate(pool, &[]).await;
    let stripe = StripeFake::start().await;
    let mut drift = BTreeSet::new();
    for i in -3..4 {
        let status = if i == -2 { "pending" } else { "paid" };
        let id = insert(pool, &i.to_string(), &format!("pi_I{}", i + 3), status, 60).await;
        if status == "pending" {
            drift.insert((id, "missed_success".to_owned()));
        }
    }
    stripe.mirror(pool, "succeeded").await;
    let s = job(pool, ReadMode::Retrieve, 3).await;
    let summary = run(pool, &stripe, &s).await;
    assert_eq!(summary.rows_scanned, 7);
    assert_eq!(open_findings(pool).await, drift);
    assert_eq!(unconfirmed(pool).await, 0);
    let env = [
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", "sk_test_keys".to_owned()),
    ];
    let out = reconciler_output(&["status", "--json"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
}

#[sqlx::test(migrations = false)]
async fn integer_ids_and_versions(pool: PgPool) {
    small_integer_table(&pool, "integer").await;
}

#[sqlx::test(migrations = false)]
async fn smallint_ids_and_versions(pool: PgPool) {
    small_integer_table(&pool, "smallint").await;
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn ids_at_and_below_zero_and_near_2_63_are_read(pool: PgPool) {
    let ids = [i64::MIN, -5, -1, 0, 1, 2, 1_000_000_000_000, i64::MAX];
    let stripe = StripeFake::start().await;
    for (n, id) in ids.iter().enumerate() {
        let status = if *id == i64::MIN { "pending" } else { "paid" };
        sqlx::query(
            "INSERT INTO payments (id, order_id, stripe_payment_intent_id, status, created_at, updated_at)
             OVERRIDING SYSTEM VALUE
             VALUES ($1, 'o', $2, $3, now() - interval '1 day', now() - interval '1 hour')",
        )
        .bind(id)
        .bind(format!("pi_N{n}"))
        .bind(status)
        .execute(&pool)
        .await
        .unwrap();
    }
    stripe.mirror(&pool, "succeeded").await;
    let s = job(&pool, ReadMode::Retrieve, 3).await;
    let summary = run(&pool, &stripe, &s).await;
    assert!(summary.wrapped);
    assert_eq!(summary.rows_scanned, 8);
    assert_eq!(unconfirmed(&pool).await, 0, "every id was read");
    assert_eq!(
        open_findings(&pool).await,
        BTreeSet::from([(i64::MIN.to_string(), "missed_success".to_owned())])
    );
    let payload: Value = sqlx::query_scalar("SELECT payload FROM outbox")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        payload["payment_id"],
        Value::from(i64::MIN),
        "a number, as before"
    );
    // The next cycle starts before every row again (no sentinel 0).
    let mut conn = pool.acquire().await.unwrap();
    let c = stripe_reconciler::store::cursor::read(&mut conn, &s.run.job)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.position, None);
}

#[sqlx::test(migrations = false)]
async fn a_late_committed_row_with_an_old_created_at_is_verified_by_the_next_cycle(pool: PgPool) {
    app_table(&pool, "uuid", "bigint", true).await;
    migrate(&pool, &[]).await;
    let stripe = StripeFake::start().await;
    for i in 0..12 {
        insert(
            &pool,
            "gen_random_uuid()",
            &format!("pi_L{i:02}"),
            "paid",
            3600 - 60 * i,
        )
        .await;
    }
    stripe.mirror(&pool, "succeeded").await;
    let mut s = job(&pool, ReadMode::Retrieve, 4).await;
    s.scan.batches_per_run = Sizing::Fixed(1);
    run(&pool, &stripe, &s).await; // rows 0..4 of the first cycle
                                   // Committed now, created two days ago: behind the cursor, never seen.
    let late = insert(&pool, "gen_random_uuid()", "pi_Late", "pending", 2 * 86400).await;
    stripe.mirror(&pool, "succeeded").await;
    let mut cycles = 0;
    let mut runs = 0;
    while cycles < 2 {
        cycles += u32::from(run(&pool, &stripe, &s).await.wrapped);
        runs += 1;
        assert!(runs < 20, "the cycles end");
    }
    assert_eq!(unconfirmed(&pool).await, 0, "the late row was verified");
    assert_eq!(
        open_findings(&pool).await,
        BTreeSet::from([(late, "missed_success".to_owned())])
    );
}

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
    s.schema.partition = Some(Partition {
        column: ColumnName::parse("RECONCILER_PARTITION_COLUMN", "legal_entity").unwrap(),
        value: "eu".to_owned(),
        kind: PartitionKind::Text,
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

#[sqlx::test(migrations = false)]
async fn a_row_whose_key_or_created_at_changes_is_read_as_a_new_row(pool: PgPool) {
    app_table(&pool, "uuid", "bigint", true).await;
    migrate(&pool, &[]).await;
    let stripe = StripeFake::start().await;
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(
            insert(
                &pool,
                "gen_random_uuid()",
                &format!("pi_C{i}"),
                "paid",
                3600 - 60 * i,
            )
            .await,
        );
    }
    stripe.mirror(&pool, "succeeded").await;
    let s = job(&pool, ReadMode::Retrieve, 4).await;
    assert!(run(&pool, &stripe, &s).await.wrapped);
    assert!(open_findings(&pool).await.is_empty());

    // The application moves one row's created_at (now the newest) and
    // drifts it; it gives another row a new key.
    sqlx::query(
        "UPDATE payments SET created_at = now() - interval '1 second', status = 'pending',
                updated_at = now() - interval '1 hour'
          WHERE id = $1::uuid",
    )
    .bind(&ids[0])
    .execute(&pool)
    .await
    .unwrap();
    let new_key: String = sqlx::query_scalar(
        "UPDATE payments SET id = gen_random_uuid(), status = 'pending' WHERE id = $1::uuid
         RETURNING id::text",
    )
    .bind(&ids[1])
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(run(&pool, &stripe, &s).await.wrapped, "the next cycle");
    assert_eq!(
        open_findings(&pool).await,
        BTreeSet::from([
            (ids[0].clone(), "missed_success".to_owned()),
            (new_key, "missed_success".to_owned()),
        ])
    );
    assert_eq!(unconfirmed(&pool).await, 0);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state s
              WHERE NOT EXISTS (SELECT 1 FROM payments p WHERE p.id = s.payment_id)"
        )
        .await,
        0,
        "the old key's state is forgotten"
    );
    let moved: bool = sqlx::query_scalar(
        "SELECT s.created_at = p.created_at FROM reconciliation_payment_state s
           JOIN payments p ON p.id = s.payment_id WHERE p.id = $1::uuid",
    )
    .bind(&ids[0])
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(moved, "the state row follows the new created_at");
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
    let (summary, result) =
        run_events(&pool, &gateway(&stripe), &s, CancellationToken::new()).await;
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

#[sqlx::test(migrations = false)]
async fn migrate_registers_a_uuid_tables_rows_and_a_deleted_payments_finding_resolves_when_the_walk_passes_it(
    pool: PgPool,
) {
    app_table(&pool, "uuid", "bigint", true).await;
    let mut drifted = Vec::new();
    for i in 0..12 {
        let status = if i % 5 == 2 { "pending" } else { "paid" };
        let id = insert(
            &pool,
            "gen_random_uuid()",
            &format!("pi_D{i:02}"),
            status,
            3600 - 60 * i,
        )
        .await;
        if status == "pending" {
            drifted.push(id);
        }
    }
    migrate(&pool, &[]).await;
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM payments p JOIN reconciliation_payment_state s
                ON s.payment_id = p.id AND s.created_at = p.created_at
             WHERE s.last_reconciled_at IS NULL"
        )
        .await,
        12,
        "migrate registered every existing row, unconfirmed"
    );
    let stripe = StripeFake::start().await;
    stripe.mirror(&pool, "succeeded").await;
    let s = job(&pool, ReadMode::Retrieve, 4).await;
    assert!(run(&pool, &stripe, &s).await.wrapped);
    assert_eq!(drifted.len(), 2);
    assert_eq!(
        open_findings(&pool).await,
        drifted
            .iter()
            .map(|id| (id.clone(), "missed_success".to_owned()))
            .collect::<BTreeSet<_>>()
    );

    // The application deletes one drifted payment: the next cycle's walk
    // passes its state row, forgets it and resolves its finding.
    sqlx::query("DELETE FROM payments WHERE id = $1::uuid")
        .bind(&drifted[0])
        .execute(&pool)
        .await
        .unwrap();
    assert!(run(&pool, &stripe, &s).await.wrapped, "the next cycle");
    assert_eq!(
        open_findings(&pool).await,
        BTreeSet::from([(drifted[1].clone(), "missed_success".to_owned())])
    );
    let resolution: Option<String> = sqlx::query_scalar(
        "SELECT resolution FROM reconciliation_findings WHERE payment_id = $1::uuid",
    )
    .bind(&drifted[0])
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(resolution.as_deref(), Some("payment_deleted"));
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_payment_state").await,
        11,
        "the deleted payment's state row is forgotten"
    );
}
