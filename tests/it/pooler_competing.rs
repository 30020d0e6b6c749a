//! Every command starts behind a transaction-pooling PgBouncer whose small
//! pool (2 server connections) is shared with the application's own clients
//! hammering it: a statement sent outside a transaction travels as two
//! pooler transactions (Parse, then Bind) and meets another client's server
//! connection (`unnamed prepared statement does not exist`). docs/schema.md,
//! "Behind a connection pooler".

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::support::pgbouncer::{self, PgBouncer};
use crate::support::stripe_fake::StripeFake;
use crate::support::*;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

/// Rounds of the five commands (each round starts each command once).
const ROUNDS: usize = 4;
/// The application's clients on the same pooler.
const CLIENTS: usize = 6;

async fn binary(
    bouncer: &PgBouncer,
    pool: &PgPool,
    args: &[&str],
    stripe: &str,
) -> std::process::Output {
    let env = [
        ("DATABASE_URL", bouncer.url(&database_name(pool), "")),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
        ("RECONCILER_BATCH_SIZE", "5".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "2".to_owned()),
    ];
    reconciler_output(args, &env).await
}

/// The application: `CLIENTS` connections through the pooler, each running
/// short transactions (simple protocol, as a pooled client must) until
/// `stop`; counts the transactions and their failures.
fn hammer(
    url: String,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let app = match PgPoolOptions::new()
            .max_connections(CLIENTS as u32)
            .connect_with(
                url.parse::<PgConnectOptions>()
                    .unwrap()
                    .extra_float_digits(None),
            )
            .await
        {
            Ok(app) => app,
            Err(e) => {
                eprintln!("the application cannot connect: {e}");
                failed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let mut tasks = Vec::new();
        for _ in 0..CLIENTS {
            let (app, stop, done, failed) =
                (app.clone(), stop.clone(), done.clone(), failed.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let r = sqlx::raw_sql(
                        "BEGIN; UPDATE app_counter SET n = n + 1; SELECT pg_sleep(0.002); COMMIT",
                    )
                    .execute(&app)
                    .await;
                    match r {
                        Ok(_) => done.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            eprintln!("application transaction failed: {e}");
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        app.close().await;
    })
}

#[sqlx::test(migrations = false)]
async fn every_command_starts_on_a_pool_of_two_shared_with_competing_clients(pool: PgPool) {
    let bouncer = pgbouncer::start(2).await;
    bouncer.assert_no_prepared_statements().await;
    create_demo_payments(&pool).await;
    sqlx::raw_sql(
        "CREATE TABLE app_counter (n bigint NOT NULL); INSERT INTO app_counter VALUES (0)",
    )
    .execute(&pool)
    .await
    .unwrap();
    insert_paid(&pool, 12).await;
    sqlx::query("UPDATE payments SET status = 'pending' WHERE stripe_payment_intent_id = 'pi_3'")
        .execute(&pool)
        .await
        .unwrap();
    let stripe = StripeFake::start().await;
    stripe.mirror(&pool, "succeeded").await;

    let (stop, done, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let app = hammer(
        bouncer.url(&database_name(&pool), ""),
        stop.clone(),
        done.clone(),
        failed.clone(),
    );
    // The application is on the pool before the first command starts.
    while done.load(Ordering::Relaxed) < 20 {
        assert_eq!(
            failed.load(Ordering::Relaxed),
            0,
            "the application cannot use the pooler"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let mut starts = 0;
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        for args in [
            &["migrate"][..],
            &["run"],
            &["events"],
            &["repair"],
            &["status", "--json"],
        ] {
            let out = binary(&bouncer, &pool, args, &stripe.uri()).await;
            starts += 1;
            if out.status.code() != Some(0) {
                failures.push(format!(
                    "round {round} {args:?}: exit {:?}: {}",
                    out.status.code(),
                    stderr(&out)
                ));
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    app.await.unwrap();
    let (app_done, app_failed) = (done.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!(
        "pooler (default_pool_size = 2, {CLIENTS} application clients): {starts} starts, {} failed; application: {app_done} transactions, {app_failed} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{}\npgbouncer log: {}",
        failures.join("\n"),
        bouncer.log()
    );
    assert_eq!(app_failed, 0, "the application's own transactions failed");
    // The work was done: the pending row that succeeded at Stripe is paid.
    assert_eq!(
        count(&pool, "SELECT count(*) FROM payments WHERE stripe_payment_intent_id = 'pi_3' AND status = 'paid'").await,
        1
    );
}
