//! The job behind a real PgBouncer in transaction pooling mode (Debian's
//! `pgbouncer`, one private instance per test, checked to keep no prepared
//! statement across transactions): `migrate`, `run` (default list mode),
//! `events`, `repair`, `findings list`/`resolve` and `status` through the
//! pooler with the README's connection string, and the per-transaction
//! timeouts really applying there.

use std::process::Output;

use crate::support::pgbouncer::{self, PgBouncer};
use crate::support::stripe_fake::event;
use crate::support::stripe_fake::{StripeFake, EVENTS, LIST};
use crate::support::*;
use secrecy::SecretString;
use serde_json::Value;
use sqlx::PgPool;
use stripe_reconciler::store::{self, Timeouts};

/// DATABASE_URL needs nothing special behind a pooler (README, "Behind a
/// connection pooler"): the job's statements are unnamed and transactional.
const PLAIN: &str = "";
/// sqlx's often-suggested setting, accepted too (not needed, not enough alone).
const NO_CACHE: &str = "statement-cache-capacity=0";

async fn binary(bouncer: &PgBouncer, pool: &PgPool, args: &[&str], stripe: &str) -> Output {
    let env = [
        ("DATABASE_URL", bouncer.url(&database_name(pool), PLAIN)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
        ("RECONCILER_BATCH_SIZE", "3".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "2".to_owned()),
    ];
    reconciler_output(args, &env).await
}

/// Stripe (the shared fake), holding the PaymentIntent of every row in
/// `pool`: `pi_2` requires a payment method (paid here: needs review), all
/// others succeeded; the platform's feed says `pi_7` succeeded two minutes ago.
async fn stripe_for(pool: &PgPool) -> StripeFake {
    let stripe = StripeFake::start().await;
    stripe.mirror(pool, "succeeded").await;
    stripe.set_status("pi_2", "requires_payment_method");
    stripe.push_event(None, event("evt_7", "pi_7", "succeeded", 120));
    stripe
}

#[sqlx::test(migrations = false)]
async fn migrate_run_repair_and_status_work_through_pgbouncer_in_transaction_mode(pool: PgPool) {
    let bouncer = pgbouncer::start(2).await;
    bouncer.assert_no_prepared_statements().await;
    let stripe = StripeFake::start().await;
    create_demo_payments(&pool).await;

    // migrate, twice: the second process meets the first one's server
    // connections (and whatever it left on them) and finds nothing to do.
    for round in ["first", "second"] {
        let out = binary(&bouncer, &pool, &["migrate"], &stripe.uri()).await;
        bouncer.assert_ok(&format!("{round} migrate"), &out);
    }
    assert_eq!(
        count(&pool, "SELECT count(*) FROM _sqlx_migrations WHERE success").await,
        stripe_reconciler::MIGRATOR.iter().count() as i64
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
              WHERE l.locktype = 'advisory' AND d.datname = current_database()"
        )
        .await,
        0,
        "migrate left an advisory lock on a pooled server connection"
    );

    // Six paid payments in sync except pi_2; pi_4 pending but succeeded at
    // Stripe; pi_7 (past the run's two batches) pending too, for `events`.
    insert_paid(&pool, 7).await;
    sqlx::query(
        "UPDATE payments SET status = 'pending' WHERE stripe_payment_intent_id IN ('pi_4', 'pi_7')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = stripe_for(&pool).await;
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM payments ORDER BY id")
        .fetch_all(&pool)
        .await
        .unwrap();

    // run: two batches of three rows, each batch three transactions, in the
    // default read mode: every row verified through list pages.
    let out = binary(&bouncer, &pool, &["run"], &stripe.uri()).await;
    bouncer.assert_ok("run", &out);
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    stripe.assert_read_by_list(0);
    assert_eq!(
        summary["stripe_requests"]["list"],
        stripe.count(LIST),
        "{summary}"
    );
    assert_eq!(summary["stripe_requests"]["retrieve"], 0, "{summary}");
    assert_eq!(
        cursor(&pool, "payments-vs-stripe").await,
        ids[5],
        "cursor moved by 6 rows"
    );
    let kinds: Vec<(String, bool)> = findings(&pool)
        .await
        .into_iter()
        .map(|f| (f.kind, f.open))
        .collect();
    assert_eq!(
        kinds,
        [
            ("paid_locally_not_externally".to_owned(), true),
            ("missed_success".to_owned(), true)
        ]
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        6
    );
    assert_eq!(outbox(&pool).await.len(), 1, "one repair command enqueued");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_cursor WHERE lease_owner IS NULL"
        )
        .await,
        1,
        "the lease was given back"
    );

    // events: the feed's pi_7 succeeded while the row is pending.
    let out = binary(&bouncer, &pool, &["events"], &stripe.uri()).await;
    bouncer.assert_ok("events", &out);
    assert!(stripe.count(EVENTS) >= 1, "{:#?}", stripe.seen());
    let missed: Vec<String> = sqlx::query_scalar(
        "SELECT p.stripe_payment_intent_id FROM reconciliation_findings f
           JOIN payments p ON p.id = f.payment_id
          WHERE f.kind = 'missed_success' AND f.resolved_at IS NULL ORDER BY p.id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(missed, ["pi_4", "pi_7"], "{}", stderr(&out));

    // repair: the missed successes are applied by the canonical writer.
    let out = binary(&bouncer, &pool, &["repair"], &stripe.uri()).await;
    bouncer.assert_ok("repair", &out);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["applied"], 2, "{report}");
    assert_eq!(
        count(&pool, "SELECT count(*) FROM payments WHERE stripe_payment_intent_id IN ('pi_4', 'pi_7') AND status = 'paid'").await,
        2
    );

    // findings list / resolve: the review queue through the pooler.
    let out = binary(
        &bouncer,
        &pool,
        &["findings", "list", "--json"],
        &stripe.uri(),
    )
    .await;
    bouncer.assert_ok("findings list", &out);
    let open: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let review: Vec<&Value> = open
        .iter()
        .filter(|f| f["kind"] == "paid_locally_not_externally")
        .collect();
    assert_eq!(review.len(), 1, "{open:?}");
    let id = review[0]["id"].to_string();
    let out = binary(
        &bouncer,
        &pool,
        &[
            "findings",
            "resolve",
            &id,
            "--note",
            "refunded by hand",
            "--by",
            "ops",
        ],
        &stripe.uri(),
    )
    .await;
    bouncer.assert_ok("findings resolve", &out);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings WHERE kind = 'paid_locally_not_externally' AND resolved_by = 'ops' AND resolved_at IS NOT NULL").await,
        1
    );

    // status: what the operator reads.
    let out = binary(&bouncer, &pool, &["status", "--json"], &stripe.uri()).await;
    bouncer.assert_ok("status", &out);
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["cursor_position"], ids[5], "{status}");
    assert_eq!(status["open_findings"], serde_json::json!({}), "{status}");
}

async fn pooled(bouncer: &PgBouncer, pool: &PgPool) -> PgPool {
    let url = SecretString::from(bouncer.url(&database_name(pool), NO_CACHE));
    let database = stripe_reconciler::config::DatabaseSettings::from_url(url).unwrap();
    database.connect().await.unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_transaction_timeouts_apply_through_pgbouncer_and_end_with_the_transaction(
    pool: PgPool,
) {
    let bouncer = pgbouncer::start(1).await;
    bouncer.assert_no_prepared_statements().await;
    let through = pooled(&bouncer, &pool).await;

    // The job's bounds are in force inside `begin`...
    let mut tx = store::begin(&through).await.unwrap();
    let (statement, lock): (String, String) = sqlx::query_as(
        "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')",
    )
    .persistent(false)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!((statement.as_str(), lock.as_str()), ("1min", "10s"));
    tx.commit().await.unwrap();
    // ...and do not leak onto the pooled server connection (one, shared):
    // a plain transaction there sees the server's default.
    let mut plain = through.begin().await.unwrap();
    let after: String = sqlx::query_scalar("SELECT current_setting('statement_timeout')")
        .persistent(false)
        .fetch_one(&mut *plain)
        .await
        .unwrap();
    plain.commit().await.unwrap();
    assert_eq!(after, "0", "SET LOCAL must end with the transaction");

    // A statement longer than the bound is cancelled by the server.
    let short = Timeouts {
        statement: "200ms",
        lock: "100ms",
    };
    let mut tx = store::begin_with(&through, short).await.unwrap();
    // 57014 is the server cancelling the statement (a `pg_sleep` that ran
    // its 5 s would succeed), whatever the machine's speed.
    let err = sqlx::query("SELECT pg_sleep(5)")
        .persistent(false)
        .execute(&mut *tx)
        .await
        .expect_err("pg_sleep(5) must hit the 200ms statement_timeout");
    let code = err
        .as_database_error()
        .and_then(|e| e.code())
        .unwrap_or_default();
    assert_eq!(code, "57014", "query_canceled, got {err}");
    drop(tx);

    // A lock held by another session is waited for only `lock_timeout`.
    insert_paid(&pool, 1).await;
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM payments FOR UPDATE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let mut tx = store::begin_with(&through, short).await.unwrap();
    let err = sqlx::query("UPDATE payments SET version = version + 1")
        .persistent(false)
        .execute(&mut *tx)
        .await
        .expect_err("the row lock must not be waited for past lock_timeout");
    let code = err
        .as_database_error()
        .and_then(|e| e.code())
        .unwrap_or_default();
    assert_eq!(code, "55P03", "lock_not_available, got {err}");
    drop(tx);
    holder.rollback().await.unwrap();
}
