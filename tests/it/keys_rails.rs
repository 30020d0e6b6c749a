//! A Rails `payments` keyed by uuid (docs/keys.md, with the timestamps of
//! docs/operations.md, "Rails timestamps"):
//! `id uuid DEFAULT gen_random_uuid()`, `created_at`/`updated_at` as Rails
//! writes them (`timestamp(6) without time zone`, wall-clock times in
//! `RECONCILER_TIMESTAMP_ZONE`, here Asia/Tokyo, while the database's and
//! the connection's own TimeZone are other zones) and Rails' index on
//! `created_at`, so the cycle walks `(created_at, id)` (docs/keys.md).
//! Through the binary, as a user runs it: a full cycle verifies every row
//! exactly once in both read modes, rows sharing one `created_at` across a
//! batch boundary included; the injected drift is found exactly; a row
//! committed late with an old `created_at` is verified in the same cycle
//! inside the late-commit window, else by the next cycle.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use sqlx::PgPool;

use crate::support::keyed::open_findings;
use crate::support::stripe_fake::StripeFake;
use crate::support::*;

const ZONE: &str = "Asia/Tokyo";

/// The table as a Rails migration creates it (`create_table :payments,
/// id: :uuid` with `t.timestamps` and `add_index :payments, :created_at`),
/// in a database whose sessions start in another zone.
async fn rails_uuid_payments(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE payments (
             id uuid DEFAULT gen_random_uuid() PRIMARY KEY,
             order_id character varying NOT NULL,
             stripe_payment_intent_id character varying,
             status character varying NOT NULL,
             version bigint NOT NULL DEFAULT 0,
             created_at timestamp(6) without time zone NOT NULL,
             updated_at timestamp(6) without time zone NOT NULL);
         CREATE INDEX index_payments_on_created_at ON payments (created_at);",
    )
    .execute(pool)
    .await
    .unwrap();
    let db = database_name(pool);
    sqlx::raw_sql(&format!(
        "ALTER DATABASE \"{db}\" SET timezone = 'America/New_York'"
    ))
    .execute(pool)
    .await
    .unwrap();
}

/// The minute rows' ages count from: the Tokyo wall-clock minute of the
/// first row the test process inserts, read once, so that rows given the
/// same age share one `created_at` even when the inserts straddle a minute.
static ANCHOR: std::sync::OnceLock<chrono::NaiveDateTime> = std::sync::OnceLock::new();

async fn anchor(pool: &PgPool) -> chrono::NaiveDateTime {
    if let Some(a) = ANCHOR.get() {
        return *a;
    }
    let now: chrono::NaiveDateTime =
        sqlx::query_scalar("SELECT date_trunc('minute', now() AT TIME ZONE $1)")
            .bind(ZONE)
            .fetch_one(pool)
            .await
            .unwrap();
    *ANCHOR.get_or_init(|| now)
}

/// A row created `created_secs_ago` before [`anchor`]'s minute (a Tokyo
/// wall-clock time), updated two hours ago (out of the grace window);
/// returns its uuid.
async fn row(pool: &PgPool, pi: &str, status: &str, created_secs_ago: i64) -> String {
    let anchor = anchor(pool).await;
    sqlx::query_scalar(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         VALUES ('order-' || $1, $1, $2,
                 $5 - make_interval(secs => $4),
                 (now() AT TIME ZONE $3) - interval '2 hours')
         RETURNING id::text",
    )
    .bind(pi)
    .bind(status)
    .bind(ZONE)
    .bind(created_secs_ago as f64)
    .bind(anchor)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Stripe holds each row's PaymentIntent in `stripe_status[pi]` (default
/// `succeeded`), created at the instant the row's Tokyo wall-clock
/// `created_at` names: what list mode's windows look for.
async fn stripe_holds(pool: &PgPool, stripe: &StripeFake, stripe_status: &BTreeMap<&str, &str>) {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT stripe_payment_intent_id,
                floor(extract(epoch FROM created_at AT TIME ZONE $1))::bigint
           FROM payments",
    )
    .bind(ZONE)
    .fetch_all(pool)
    .await
    .unwrap();
    for (pi, created) in rows {
        let status = stripe_status
            .get(pi.as_str())
            .copied()
            .unwrap_or("succeeded");
        stripe.add(None, &pi, status, created);
    }
}

fn env(
    pool: &PgPool,
    stripe: &StripeFake,
    mode: &str,
    batches_per_run: u32,
) -> Vec<(&'static str, String)> {
    // The connection's own TimeZone is neither Tokyo nor the database's.
    let url = format!(
        "{}?options=-c%20TimeZone%3DAmerica%2FLos_Angeles",
        database_url(pool)
    );
    vec![
        ("DATABASE_URL", url),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_TIMESTAMP_ZONE", ZONE.to_owned()),
        ("RECONCILER_READ_MODE", mode.to_owned()),
        ("RECONCILER_BATCH_SIZE", "4".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", batches_per_run.to_string()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
    ]
}

async fn migrate(env: &[(&str, String)]) {
    let out = reconciler_output(&["migrate"], env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("(created_at, id) order"),
        "the uuid table is walked by Rails' created_at index: {}",
        all_output(&out)
    );
}

/// One `run`; its summary.
async fn run(env: &[(&str, String)]) -> Value {
    let out = reconciler_output(&["run"], env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    serde_json::from_str(stdout(&out).trim())
        .unwrap_or_else(|e| panic!("{e}: {}", all_output(&out)))
}

/// The uuids of the rows never confirmed with Stripe.
async fn unconfirmed(pool: &PgPool) -> BTreeSet<String> {
    sqlx::query_scalar(
        "SELECT p.id::text FROM payments p
          WHERE NOT EXISTS (SELECT 1 FROM reconciliation_payment_state s
                             WHERE s.payment_id = p.id AND s.last_reconciled_at IS NOT NULL)",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

/// The PaymentIntents retrieved more than once among `retrieved`.
fn read_twice(retrieved: &[String]) -> Vec<&String> {
    let mut seen = BTreeSet::new();
    retrieved.iter().filter(|id| !seen.insert(*id)).collect()
}

/// 30 rows, ten minutes apart over the last five hours, except eight that
/// share one `created_at` (an import: ties that straddle batches of four),
/// with three rows drifted: two `pending` that Stripe says succeeded, one
/// `pending` that Stripe says canceled. Returns the drift the cycle must
/// find, exactly.
async fn arrange_with_drift(pool: &PgPool, stripe: &StripeFake) -> BTreeSet<(String, String)> {
    let mut drift = BTreeSet::new();
    let mut stripe_status = BTreeMap::new();
    for i in 0..30i64 {
        let pi = format!("pi_R{i:02}");
        let age = if (10..18).contains(&i) {
            3 * 3600
        } else {
            18_000 - 600 * i
        };
        let (status, kind) = match i {
            4 | 13 => ("pending", Some("missed_success")),
            21 => ("pending", Some("missed_cancel")),
            _ => ("paid", None),
        };
        let id = row(pool, &pi, status, age).await;
        if let Some(kind) = kind {
            drift.insert((id, kind.to_owned()));
        }
        if i == 21 {
            stripe_status.insert(pi, "canceled");
        }
    }
    let stripe_status: BTreeMap<&str, &str> = stripe_status
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    stripe_holds(pool, stripe, &stripe_status).await;
    assert_eq!(
        count(
            pool,
            "SELECT max(n) FROM (SELECT count(*) AS n FROM payments GROUP BY created_at) t"
        )
        .await,
        8,
        "eight rows share one created_at"
    );
    drift
}

/// One full cycle in `mode` through the binary: every row read once, the
/// drift found exactly, each PaymentIntent read once.
async fn a_full_cycle_in(pool: PgPool, mode: &str) {
    rails_uuid_payments(&pool).await;
    let stripe = StripeFake::start().await;
    let env = env(&pool, &stripe, mode, 100);
    migrate(&env).await;
    let drift = arrange_with_drift(&pool, &stripe).await;

    let summary = run(&env).await;

    assert_eq!(summary["wrapped"], true, "{summary}");
    assert_eq!(summary["rows_scanned"], 30, "each row once: {summary}");
    let verdicts: i64 = summary["verdicts"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_i64)
        .sum();
    assert_eq!(verdicts, 30, "one verdict per row: {summary}");
    assert_eq!(unconfirmed(&pool).await, BTreeSet::new());
    assert_eq!(open_findings(&pool).await, drift);
    let retrieved = stripe.retrieved();
    assert_eq!(read_twice(&retrieved), Vec::<&String>::new());
    if mode == "list" {
        stripe.assert_read_by_list(0);
    } else {
        assert_eq!(retrieved.len(), 30);
    }
    // The next cycle starts before every row, and finds nothing new.
    let summary = run(&env).await;
    assert_eq!(summary["rows_scanned"], 30, "{summary}");
    assert_eq!(open_findings(&pool).await, drift);
}

#[sqlx::test(migrations = false)]
async fn a_rails_uuid_table_in_tokyo_time_is_read_once_per_cycle_by_retrieve(pool: PgPool) {
    a_full_cycle_in(pool, "retrieve").await;
}

#[sqlx::test(migrations = false)]
async fn a_rails_uuid_table_in_tokyo_time_is_read_once_per_cycle_by_list(pool: PgPool) {
    a_full_cycle_in(pool, "list").await;
}

/// Runs of one batch each until the cycle wraps; the PaymentIntents
/// retrieved in that cycle.
async fn one_cycle(env: &[(&str, String)], stripe: &StripeFake) -> Vec<String> {
    let before = stripe.retrieved().len();
    for _ in 0..20 {
        if run(env).await["wrapped"] == true {
            return stripe.retrieved().split_off(before);
        }
    }
    panic!("the cycle did not end in 20 runs");
}

#[sqlx::test(migrations = false)]
async fn a_late_committed_rails_row_with_an_old_created_at_is_verified(pool: PgPool) {
    rails_uuid_payments(&pool).await;
    let stripe = StripeFake::start().await;
    let env = env(&pool, &stripe, "retrieve", 1);
    migrate(&env).await;
    for i in 0..12i64 {
        row(&pool, &format!("pi_L{i:02}"), "paid", 3600 - 240 * i).await;
    }
    stripe_holds(&pool, &stripe, &BTreeMap::new()).await;
    let first = run(&env).await;
    assert_eq!(first["rows_scanned"], 4, "{first}");

    // Committed now, both behind the cursor: one created ten minutes before
    // the first batch's rows (inside the late-commit window, an hour below
    // the highest row seen), one created two days ago (outside it).
    let near = row(&pool, "pi_LateNear", "pending", 3600 + 600).await;
    let old = row(&pool, "pi_LateOld", "pending", 2 * 86400).await;
    stripe_holds(&pool, &stripe, &BTreeMap::new()).await;

    let mut cycle = stripe.retrieved();
    cycle.extend(one_cycle(&env, &stripe).await);
    assert_eq!(read_twice(&cycle), Vec::<&String>::new(), "once per cycle");
    assert!(
        cycle.contains(&"pi_LateNear".to_owned()),
        "the late row inside the window is verified in the same cycle: {cycle:?}"
    );
    let waiting = unconfirmed(&pool).await;
    assert!(
        waiting.is_empty() || waiting == BTreeSet::from([old.clone()]),
        "only the late row outside the window may wait for the next cycle: {waiting:?}"
    );

    let next = one_cycle(&env, &stripe).await;
    assert_eq!(read_twice(&next), Vec::<&String>::new(), "once per cycle");
    assert_eq!(
        next.len(),
        14,
        "every row, the late ones included: {next:?}"
    );
    assert_eq!(unconfirmed(&pool).await, BTreeSet::new());
    assert_eq!(
        open_findings(&pool).await,
        BTreeSet::from([
            (near, "missed_success".to_owned()),
            (old, "missed_success".to_owned())
        ])
    );
}
