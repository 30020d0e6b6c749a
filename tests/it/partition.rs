//! One release per Stripe account (docs/connect.md): `RECONCILER_PARTITION_COLUMN`
//! and `RECONCILER_PARTITION_VALUE` keep each job to its rows, with its own
//! key, `RECONCILER_JOB` and cursor, on one `payments` table. Stripe is the
//! shared fake holding two accounts, each read only with its own key
//! (`Authorization: Bearer`, [`StripeFake::own_key`]); any other key reads
//! nothing (404).

use crate::support::stripe_fake::StripeFake;
use crate::support::*;
use serde_json::{json, Value};
use sqlx::PgPool;
use wiremock::MockServer;

const EU_KEY: &str = "sk_test_eu_entity_key";
pub(super) const US_KEY: &str = "sk_test_us_entity_key";

/// The EU entity's Stripe account (read with [`EU_KEY`]).
const EU: Option<&str> = Some("eu-entity");
/// The US entity's Stripe account (read with [`US_KEY`]).
const US: Option<&str> = Some("us-entity");

/// One fake, two accounts: each read only with its own key.
async fn two_accounts() -> StripeFake {
    let stripe = StripeFake::start().await;
    stripe
        .own_key(EU_KEY, "eu-entity")
        .own_key(US_KEY, "us-entity");
    stripe
}

/// The application's partition columns on the seed's `payments`.
pub(super) async fn partition_columns(pool: &PgPool) {
    sqlx::raw_sql(
        "ALTER TABLE payments ADD COLUMN legal_entity text, ADD COLUMN entity_no integer",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// A payment of `entity` (and `entity_no`), updated an hour ago.
pub(super) async fn payment(
    pool: &PgPool,
    pi: &str,
    status: &str,
    entity: Option<&str>,
    no: i32,
) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at,
                               legal_entity, entity_no)
         VALUES ('order-' || $1, $1, $2, now() - interval '30 days', now() - interval '1 hour',
                 $3, $4)
         RETURNING id",
    )
    .bind(pi)
    .bind(status)
    .bind(entity)
    .bind(no)
    .fetch_one(pool)
    .await
    .unwrap()
}

pub(super) fn env(
    pool: &PgPool,
    stripe: &MockServer,
    extra: &[(&'static str, &str)],
) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_READ_MODE", "retrieve".to_owned()),
        ("RECONCILER_LOG_FORMAT", "pretty".to_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}

fn eu() -> [(&'static str, &'static str); 4] {
    [
        ("STRIPE_API_KEY", EU_KEY),
        ("RECONCILER_JOB", "payments-eu"),
        ("RECONCILER_PARTITION_COLUMN", "legal_entity"),
        ("RECONCILER_PARTITION_VALUE", "eu"),
    ]
}

fn us() -> [(&'static str, &'static str); 4] {
    [
        ("STRIPE_API_KEY", US_KEY),
        ("RECONCILER_JOB", "payments-us"),
        ("RECONCILER_PARTITION_COLUMN", "legal_entity"),
        ("RECONCILER_PARTITION_VALUE", "us"),
    ]
}

pub(super) async fn open_kinds(pool: &PgPool) -> Vec<(i64, String)> {
    sqlx::query_as(
        "SELECT payment_id, kind FROM reconciliation_findings WHERE resolved_at IS NULL
          ORDER BY payment_id, kind",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn confirmed(pool: &PgPool, payment: i64) -> bool {
    verified(pool, payment).await.1
}

async fn status_json(pool: &PgPool, stripe: &MockServer, who: &[(&'static str, &str)]) -> Value {
    let out = reconciler_output(&["status", "--json"], &env(pool, stripe, who)).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn two_partitions_with_two_keys_each_read_only_their_rows(pool: PgPool) {
    partition_columns(&pool).await;
    let stripe = two_accounts().await;
    stripe
        .add(EU, "pi_EuPaid", "succeeded", 1)
        .add(EU, "pi_EuMissed", "succeeded", 2)
        .add(US, "pi_UsPaid", "succeeded", 1)
        .add(US, "pi_UsMissed", "succeeded", 2);
    let eu_paid = payment(&pool, "pi_EuPaid", "paid", Some("eu"), 1).await;
    let us_paid = payment(&pool, "pi_UsPaid", "paid", Some("us"), 2).await;
    let eu_missed = payment(&pool, "pi_EuMissed", "pending", Some("eu"), 1).await;
    let us_missed = payment(&pool, "pi_UsMissed", "pending", Some("us"), 2).await;
    let nobody = payment(&pool, "pi_Nobody", "pending", None, 0).await;

    let out = reconciler_output(&["migrate"], &env(&pool, &stripe, &eu())).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert!(
        stdout(&out).contains("added the plain index payments_partition_legal_entity"),
        "{}",
        all_output(&out)
    );
    let indexdef: String = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE indexname = 'payments_partition_legal_entity'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(indexdef.contains("(legal_entity, id)"), "{indexdef}");
    assert!(!indexdef.contains("UNIQUE"), "{indexdef}");
    let again = reconciler_output(&["migrate"], &env(&pool, &stripe, &us())).await;
    assert!(stdout(&again).contains("has the index payments_partition_legal_entity: kept"));

    // The EU release: only EU rows, only with the EU key.
    let out = reconciler_output(&["run"], &env(&pool, &stripe, &eu())).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let mut asked = stripe.retrieved_on(EU);
    asked.sort();
    assert_eq!(asked, ["pi_EuMissed", "pi_EuPaid"]);
    assert!(stripe.retrieved_on(US).is_empty(), "no US row was read");
    assert_eq!(
        open_kinds(&pool).await,
        [(eu_missed, "missed_success".into())]
    );
    assert!(confirmed(&pool, eu_paid).await);
    assert!(!confirmed(&pool, us_paid).await, "another partition's row");
    let us_before = status_json(&pool, &stripe, &us()).await;
    let eu_status = status_json(&pool, &stripe, &eu()).await;
    let eu_cursor = cursor(&pool, "payments-eu").await;
    assert_eq!(cursor(&pool, "payments-us").await, -1, "no US cursor yet");

    // The US release beside it: its own rows, key and cursor.
    let out = reconciler_output(&["run"], &env(&pool, &stripe, &us())).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let mut asked = stripe.retrieved_on(US);
    asked.sort();
    assert_eq!(asked, ["pi_UsMissed", "pi_UsPaid"]);
    assert_eq!(stripe.retrieved_on(EU).len(), 2, "EU rows not read again");
    assert_eq!(
        open_kinds(&pool).await,
        [
            (eu_missed, "missed_success".into()),
            (us_missed, "missed_success".into())
        ]
    );
    assert!(
        !confirmed(&pool, nobody).await,
        "a NULL partition is nobody's"
    );
    assert_eq!(
        cursor(&pool, "payments-eu").await,
        eu_cursor,
        "the US run moved only its own cursor"
    );
    assert!(cursor(&pool, "payments-us").await >= 0);
    assert_eq!(cursor(&pool, "payments-vs-stripe").await, -1);

    // Again: every finding recorded once.
    for who in [eu(), us()] {
        let out = reconciler_output(&["run"], &env(&pool, &stripe, &who)).await;
        assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    }
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        2
    );

    // Status and lag per partition.
    assert_eq!(
        eu_status["partition"],
        json!({"column": "legal_entity", "value": "eu"})
    );
    assert_eq!(eu_status["rows"], 2);
    assert_eq!(eu_status["open_findings"], json!({"missed_success": 1}));
    assert!(
        eu_status["lag_seconds"].as_f64().unwrap() < 600.0,
        "{eu_status}"
    );
    assert!(
        us_before["lag_seconds"].as_f64().unwrap() > 29.0 * 86_400.0,
        "US rows never confirmed yet: {us_before}"
    );
    assert_eq!(us_before["open_findings"], json!({}));
    assert_eq!(
        us_before["lag_held_by"]["stripe_payment_intent_id"],
        "pi_UsPaid"
    );
    let pretty = reconciler_output(&["status"], &env(&pool, &stripe, &us())).await;
    assert!(
        stdout(&pretty).contains("legal_entity = \"us\""),
        "{}",
        all_output(&pretty)
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_partition_setting_that_cannot_work_exits_78_naming_the_variable(pool: PgPool) {
    partition_columns(&pool).await;
    let stripe = two_accounts().await;
    let key = ("STRIPE_API_KEY", EU_KEY);
    let job = ("RECONCILER_JOB", "payments-eu");
    for (extra, var) in [
        (
            vec![key, job, ("RECONCILER_PARTITION_COLUMN", "legal_entity")],
            "RECONCILER_PARTITION_VALUE",
        ),
        (
            vec![key, job, ("RECONCILER_PARTITION_VALUE", "eu")],
            "RECONCILER_PARTITION_COLUMN",
        ),
        (
            vec![
                key,
                ("RECONCILER_PARTITION_COLUMN", "legal_entity"),
                ("RECONCILER_PARTITION_VALUE", "eu"),
            ],
            "RECONCILER_JOB",
        ),
        (
            vec![
                key,
                job,
                ("RECONCILER_PARTITION_COLUMN", "entity"),
                ("RECONCILER_PARTITION_VALUE", "eu"),
            ],
            "RECONCILER_PARTITION_COLUMN",
        ),
        (
            vec![
                key,
                job,
                ("RECONCILER_PARTITION_COLUMN", "created_at"),
                ("RECONCILER_PARTITION_VALUE", "eu"),
            ],
            "RECONCILER_PARTITION_COLUMN",
        ),
        (
            vec![
                key,
                job,
                ("RECONCILER_PARTITION_COLUMN", "entity_no"),
                ("RECONCILER_PARTITION_VALUE", "two"),
            ],
            "RECONCILER_PARTITION_VALUE",
        ),
    ] {
        for command in [&["run"][..], &["status"][..], &["migrate"][..]] {
            let out = reconciler_output(command, &env(&pool, &stripe, &extra)).await;
            assert_eq!(
                out.status.code(),
                Some(78),
                "{command:?} {extra:?}: {}",
                all_output(&out)
            );
            assert!(
                stderr(&out).contains(var),
                "{command:?} {extra:?} names {var}: {}",
                all_output(&out)
            );
            assert!(
                !stdout(&out).contains("outbox"),
                "{command:?} {extra:?}: refused before anything was done: {}",
                all_output(&out)
            );
        }
    }
    // Before `migrate` added the partition's index, `run` refuses to scan.
    let out = reconciler_output(&["run"], &env(&pool, &stripe, &eu())).await;
    assert_eq!(out.status.code(), Some(78), "{}", all_output(&out));
    assert!(stderr(&out).contains("RECONCILER_PARTITION_COLUMN"));
    assert!(stderr(&out).contains("migrate"), "{}", all_output(&out));
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_integer_partition_column_compares_the_value_as_a_number(pool: PgPool) {
    partition_columns(&pool).await;
    let stripe = two_accounts().await;
    stripe
        .add(EU, "pi_One", "succeeded", 1)
        .add(US, "pi_Two", "succeeded", 1);
    payment(&pool, "pi_One", "paid", Some("eu"), 1).await;
    let row_two = payment(&pool, "pi_Two", "pending", Some("us"), 2).await;
    let who = [
        ("STRIPE_API_KEY", US_KEY),
        ("RECONCILER_JOB", "entity-2"),
        ("RECONCILER_PARTITION_COLUMN", "entity_no"),
        ("RECONCILER_PARTITION_VALUE", "2"),
    ];
    let out = reconciler_output(&["migrate"], &env(&pool, &stripe, &who)).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert!(stdout(&out).contains("payments_partition_entity_no"));

    let out = reconciler_output(&["run"], &env(&pool, &stripe, &who)).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(stripe.retrieved_on(US), ["pi_Two"]);
    assert!(stripe.retrieved_on(EU).is_empty());
    assert_eq!(
        open_kinds(&pool).await,
        [(row_two, "missed_success".into())]
    );
    let st = status_json(&pool, &stripe, &who).await;
    assert_eq!(st["rows"], 1);
    assert_eq!(st["partition"]["value"], "2");

    // The batch read is a range scan of the (entity_no, id) index, not the
    // primary key filtered, on a table where the partition is a small share.
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, entity_no)
         SELECT 'bulk-' || i, 'pi_bulk' || i, 'paid', 1 FROM generate_series(1, 5000) AS i",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE payments")
        .execute(&pool)
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET LOCAL enable_seqscan = off")
        .execute(&mut *tx)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT p.id FROM payments p WHERE p.id > $1 AND p.\"entity_no\" = $2::text::bigint ORDER BY p.id LIMIT 10",
    )
    .bind(0_i64)
    .bind("2")
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    assert!(
        plan.join("\n").contains("payments_partition_entity_no"),
        "{plan:?}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_value_with_quotes_is_bound_and_matches_exactly(pool: PgPool) {
    partition_columns(&pool).await;
    let stripe = two_accounts().await;
    stripe
        .add(EU, "pi_Quoted", "succeeded", 1)
        .add(EU, "pi_Other", "succeeded", 2);
    let quoted = payment(&pool, "pi_Quoted", "pending", Some("o'brien ltd"), 1).await;
    payment(&pool, "pi_Other", "pending", Some("eu"), 1).await;
    let with = |value: &'static str| {
        [
            ("STRIPE_API_KEY", EU_KEY),
            ("RECONCILER_JOB", "payments-quoted"),
            ("RECONCILER_PARTITION_COLUMN", "legal_entity"),
            ("RECONCILER_PARTITION_VALUE", value),
        ]
    };
    let out = reconciler_output(&["migrate"], &env(&pool, &stripe, &with("eu"))).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));

    for attack in ["eu' OR '1'='1", "x'; DELETE FROM payments; --"] {
        let out = reconciler_output(&["run"], &env(&pool, &stripe, &with(attack))).await;
        assert_eq!(out.status.code(), Some(0), "{attack}: {}", all_output(&out));
        assert!(
            stripe.retrieved_on(EU).is_empty(),
            "{attack} matches no row"
        );
        let st = status_json(&pool, &stripe, &with(attack)).await;
        assert_eq!(st["rows"], 0, "{attack}");
    }
    assert_eq!(count(&pool, "SELECT count(*) FROM payments").await, 2);

    let out = reconciler_output(&["run"], &env(&pool, &stripe, &with("o'brien ltd"))).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(stripe.retrieved_on(EU), ["pi_Quoted"]);
    assert_eq!(open_kinds(&pool).await, [(quoted, "missed_success".into())]);
}
