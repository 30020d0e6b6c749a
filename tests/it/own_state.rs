//! The reconciler's own state (`reconciliation_payment_state`): the scan
//! writes nothing into the application's rows (docs/design.md, "Invariants"),
//! the migration carries over what was stamped on `payments` before, and the
//! lag read from the new table equals the seed's per-row definition.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use stripe_reconciler::store::{payment_state, stats};

use crate::support::*;

/// An AFTER UPDATE row trigger on `payments` that counts into a side table,
/// as an application's audit or `updated_at` trigger would fire.
async fn count_updates_with_a_trigger(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE payment_updates_seen (payment_id bigint NOT NULL);
         CREATE FUNCTION count_payment_update() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO payment_updates_seen VALUES (NEW.id);
             RETURN NEW;
         END $$;
         CREATE TRIGGER payments_counted AFTER UPDATE ON payments
             FOR EACH ROW EXECUTE FUNCTION count_payment_update();",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// `n_tup_upd` of `payments` as this connection's backend sees it after
/// flushing its own pending statistics (PG15+: they are flushed lazily).
async fn updates_of_payments(one: &PgPool) -> i64 {
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(one)
        .await
        .unwrap();
    sqlx::query_scalar("SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'payments'")
        .fetch_one(one)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_full_cycle_over_an_in_sync_table_updates_no_payment_and_fires_no_trigger(pool: PgPool) {
    insert_paid(&pool, 45).await;
    count_updates_with_a_trigger(&pool).await;
    // One connection for everything after the setup, so that its own flushed
    // statistics are the only writer's and nothing is pending elsewhere.
    let one = PgPoolOptions::new()
        .max_connections(1)
        .connect_with((*pool.connect_options()).clone())
        .await
        .unwrap();
    let before = updates_of_payments(&one).await;
    let stripe = stripe_answering("succeeded", std::time::Duration::ZERO).await;
    let gw = gateway(&stripe);
    let s = settings(20);
    let mut batches = 0;
    while !scan_with(&one, &gw, &s).await.unwrap().wrapped {
        batches += 1;
        assert!(batches < 10, "the cursor did not wrap");
    }

    assert_eq!(
        count(&one, "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL AND observed_external_status = 'succeeded'").await,
        45,
        "every payment was confirmed, in the reconciler's own table"
    );
    assert_eq!(
        updates_of_payments(&one).await,
        before,
        "no UPDATE of payments"
    );
    assert_eq!(
        count(&one, "SELECT count(*) FROM payment_updates_seen").await,
        0,
        "no row trigger fired"
    );

    // The measurement sees an update when there is one (as the old stamp was).
    sqlx::query("UPDATE payments SET updated_at = updated_at WHERE id = 1")
        .execute(&one)
        .await
        .unwrap();
    assert_eq!(updates_of_payments(&one).await, before + 1);
    assert_eq!(
        count(&one, "SELECT count(*) FROM payment_updates_seen").await,
        1
    );
    // Give the connection back before the test database is dropped.
    one.close().await;
}

/// `(payment_id, created_at, observed_external_status, last_reconciled_at)`.
type StateRow = (i64, DateTime<Utc>, Option<String>, Option<DateTime<Utc>>);

#[sqlx::test(migrations = false)]
async fn the_migration_carries_over_what_was_stamped_on_payments(pool: PgPool) {
    // An install from before this migration: the scan stamped payments.
    sqlx::raw_sql(
        "CREATE TABLE payments (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text NOT NULL,
             status text NOT NULL,
             version bigint NOT NULL DEFAULT 0,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now(),
             observed_external_status text,
             last_reconciled_at timestamptz);
         INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at,
                               observed_external_status, last_reconciled_at) VALUES
             ('o1', 'pi_1', 'paid', '2026-01-01T00:00:00Z', 'succeeded', '2026-02-01T00:00:00Z'),
             ('o2', 'pi_2', 'pending', '2026-01-02T00:00:00Z', NULL, NULL);",
    )
    .execute(&pool)
    .await
    .unwrap();

    stripe_reconciler::MIGRATOR.run(&pool).await.unwrap();

    let state: Vec<StateRow> = sqlx::query_as(
        "SELECT payment_id, created_at, observed_external_status, last_reconciled_at
           FROM reconciliation_payment_state ORDER BY payment_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
    assert_eq!(
        state,
        vec![
            (
                1,
                at("2026-01-01T00:00:00Z"),
                Some("succeeded".into()),
                Some(at("2026-02-01T00:00:00Z"))
            ),
            (2, at("2026-01-02T00:00:00Z"), None, None),
        ]
    );
    // The seed's columns stay readable on payments.
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM payments WHERE observed_external_status = 'succeeded'"
        )
        .await,
        1
    );
}

/// The seed's lag, per row: the oldest of `coalesce(last confirmed,
/// created_at)` over every payment.
async fn reference_lag_since(pool: &PgPool) -> Option<DateTime<Utc>> {
    sqlx::query_scalar(
        "SELECT min(coalesce(s.last_reconciled_at, p.created_at))
           FROM payments p LEFT JOIN reconciliation_payment_state s ON s.payment_id = p.id",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn lag_since(pool: &PgPool) -> Option<DateTime<Utc>> {
    let mut conn = pool.acquire().await.unwrap();
    let key = stripe_reconciler::key::KeyType::default();
    let head = payment_state::highest_seen(&mut conn, &key).await.unwrap();
    sqlx::query_scalar(&format!(
        "SELECT {}",
        stats::lag_since(&key, (1, 2), head.is_some(), &Default::default())
    ))
    .bind(head.as_ref().map(|h| h.key.clone()))
    .bind(head.as_ref().and_then(|h| h.created_at))
    .fetch_one(&mut *conn)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_lag_is_exact_for_a_fresh_a_partly_and_a_fully_scanned_table(pool: PgPool) {
    // created_at not in id order (the oldest rows are scattered), as when
    // an application backfills or sets created_at itself.
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         SELECT 'o' || i, 'pi_' || i, 'paid', now() - ((i * 7) % 60 + 1) * interval '1 hour',
                now() - interval '1 hour'
           FROM generate_series(1, 60) AS i",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = stripe_answering("succeeded", std::time::Duration::ZERO).await;
    let gw = gateway(&stripe);
    let s = settings(10);

    let fresh = lag_since(&pool).await;
    assert!(fresh.is_some());
    assert_eq!(fresh, reference_lag_since(&pool).await, "fresh install");

    // Rows 1..=10 confirmed, 11..=20 registered, 21..=60 never seen.
    scan_with(&pool, &gw, &s).await.unwrap();
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_payment_state").await,
        20
    );
    let partly = lag_since(&pool).await;
    assert_eq!(partly, reference_lag_since(&pool).await, "partly scanned");
    assert_eq!(partly, fresh, "the oldest unseen row still holds the lag");

    wait::scan_until_wrapped(&pool, &gw, &s).await;
    let full = lag_since(&pool).await;
    assert_eq!(full, reference_lag_since(&pool).await, "fully scanned");
    let first_confirmed: Option<DateTime<Utc>> =
        sqlx::query_scalar("SELECT min(last_reconciled_at) FROM reconciliation_payment_state")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(full, first_confirmed, "held by the first row confirmed");
    assert!(full > fresh);

    // status reports the same lag (to the second: it reads now() once more).
    let mut conn = pool.acquire().await.unwrap();
    let figures = stats::table_figures(
        &mut conn,
        SCAN_JOB,
        None,
        &Default::default(),
        &Default::default(),
    )
    .await
    .unwrap();
    let expected = (figures.database_now - full.unwrap()).num_milliseconds() as f64 / 1000.0;
    assert!((figures.lag_seconds - expected).abs() < 0.01, "{figures:?}");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_scan_forgets_the_state_of_deleted_payments(pool: PgPool) {
    insert_paid(&pool, 20).await;
    let stripe = stripe_answering("succeeded", std::time::Duration::ZERO).await;
    let gw = gateway(&stripe);
    let s = settings(10);
    wait::scan_until_wrapped(&pool, &gw, &s).await;
    sqlx::query("DELETE FROM payments WHERE id IN (3, 15)")
        .execute(&pool)
        .await
        .unwrap();
    wait::scan_until_wrapped(&pool, &gw, &s).await;
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE payment_id IN (3, 15)"
        )
        .await,
        0
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_payment_state").await,
        18
    );
}
