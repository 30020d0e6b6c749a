//! The application's `payments` as real installs have it, through the
//! binary (docs/schema.md, "The columns `payments` must and may have"):
//! a table the reconciler cannot work with stops `migrate` (before anything
//! is created) and `run` with exit 78 and one sentence; an ENUM status is
//! repaired; a table partitioned by month gets its lookup index per
//! partition, and `run`'s advice when it is missing is a fix that works.

use crate::support::stripe_fake::StripeFake;
use crate::support::*;
use sqlx::PgPool;

fn env(pool: &PgPool, stripe: &str) -> Vec<(&'static str, String)> {
    vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "10".to_owned()),
    ]
}

async fn bin(pool: &PgPool, stripe: &str, args: &[&str]) -> std::process::Output {
    reconciler_output(args, &env(pool, stripe)).await
}

/// The reconciler's own tables in the database (none before `migrate`).
async fn our_tables(pool: &PgPool) -> i64 {
    count(
        pool,
        "SELECT count(*) FROM pg_class WHERE relname LIKE 'reconciliation\\_%' OR relname IN ('_sqlx_migrations', 'outbox')",
    )
    .await
}

/// Asserts exit 78 with one sentence containing every piece of `says`.
fn refused(what: &str, out: &std::process::Output, says: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(78), "{what}: {err}");
    for s in says {
        assert!(err.contains(s), "{what}: expected {s:?} in {err}");
    }
}

#[sqlx::test(migrations = false)]
async fn migrate_creates_no_payments_and_nothing_else_when_the_table_is_named_otherwise(
    pool: PgPool,
) {
    // EF Core's table, and one in a schema off the search_path.
    sqlx::raw_sql(
        "CREATE TABLE \"Payments\" (\"Id\" bigint PRIMARY KEY, \"Status\" text);
         CREATE SCHEMA billing; CREATE TABLE billing.payments (id bigint PRIMARY KEY)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = StripeFake::start().await;
    let out = bin(&pool, &stripe.uri(), &["migrate"]).await;
    refused(
        "migrate",
        &out,
        &[
            "no table named payments on the search_path",
            "public.\"Payments\"",
            "billing.payments",
            "search_path",
        ],
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM pg_class WHERE relname = 'payments' AND relnamespace = 'public'::regnamespace").await, 0, "an empty payments was created");
    assert_eq!(
        our_tables(&pool).await,
        0,
        "migrate created tables before refusing"
    );
}

#[sqlx::test(migrations = false)]
async fn migrate_refuses_a_view_named_payments_before_creating_anything(pool: PgPool) {
    sqlx::raw_sql(&format!(
        "{}; ALTER TABLE payments RENAME TO payments_data; CREATE VIEW payments AS SELECT * FROM payments_data",
        DEMO_PAYMENTS
    ))
    .execute(&pool)
    .await
    .unwrap();
    let stripe = StripeFake::start().await;
    let out = bin(&pool, &stripe.uri(), &["migrate"]).await;
    refused("migrate", &out, &["payments is a view, not a table"]);
    assert_eq!(our_tables(&pool).await, 0);
}

#[sqlx::test(migrations = false)]
async fn a_table_without_version_stops_migrate_first_and_run_with_exit_78(pool: PgPool) {
    // Rails keeps lock_version.
    sqlx::raw_sql(&format!(
        "{}; ALTER TABLE payments RENAME COLUMN version TO lock_version",
        DEMO_PAYMENTS
    ))
    .execute(&pool)
    .await
    .unwrap();
    insert_paid(&pool, 3).await;
    let stripe = StripeFake::start().await;
    stripe.mirror(&pool, "succeeded").await;
    let out = bin(&pool, &stripe.uri(), &["migrate"]).await;
    refused(
        "migrate",
        &out,
        &["payments has no column version", "lock_version"],
    );
    assert_eq!(our_tables(&pool).await, 0, "half an install");
    let out = bin(&pool, &stripe.uri(), &["run"]).await;
    refused("run", &out, &["payments has no column version"]);
    // A status column of a type the writer cannot hold a word in.
    sqlx::raw_sql("ALTER TABLE payments RENAME COLUMN lock_version TO version; ALTER TABLE payments DROP CONSTRAINT payments_status_check; ALTER TABLE payments ALTER COLUMN status TYPE jsonb USING to_jsonb(status)")
        .execute(&pool)
        .await
        .unwrap();
    let out = bin(&pool, &stripe.uri(), &["migrate"]).await;
    refused("migrate", &out, &["payments.status is jsonb"]);
    assert_eq!(our_tables(&pool).await, 0);
}

#[sqlx::test(migrations = false)]
async fn without_order_id_run_status_and_findings_list_work(pool: PgPool) {
    sqlx::raw_sql(&format!(
        "{}; ALTER TABLE payments DROP COLUMN order_id",
        DEMO_PAYMENTS
    ))
    .execute(&pool)
    .await
    .unwrap();
    sqlx::raw_sql(
        "INSERT INTO payments (stripe_payment_intent_id, status, created_at, updated_at)
         SELECT 'pi_' || i, 'paid', now() - interval '30 days', now() - interval '1 hour'
           FROM generate_series(1, 4) AS i",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = StripeFake::start().await;
    stripe.mirror(&pool, "succeeded").await;
    stripe.set_status("pi_2", "requires_payment_method");
    for args in [
        &["migrate"][..],
        &["run"],
        &["status"],
        &["findings", "list"],
        &["findings", "list", "--json"],
    ] {
        let out = bin(&pool, &stripe.uri(), args).await;
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    let out = bin(&pool, &stripe.uri(), &["findings", "show", "1"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("paid_locally_not_externally"),
        "{}",
        stdout(&out)
    );
}

#[sqlx::test(migrations = false)]
async fn an_enum_status_is_repaired_by_the_canonical_writer(pool: PgPool) {
    sqlx::raw_sql(
        "CREATE TYPE \"Payment Status\" AS ENUM ('pending', 'paid', 'failed');
         CREATE DOMAIN pi_id AS varchar(64) CHECK (VALUE <> 'x');
         CREATE TABLE payments (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id pi_id NOT NULL,
             status \"Payment Status\" NOT NULL,
             version integer NOT NULL DEFAULT 0,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now())",
    )
    .execute(&pool)
    .await
    .unwrap();
    insert_paid(&pool, 6).await;
    sqlx::query(
        "UPDATE payments SET status = 'pending' WHERE stripe_payment_intent_id IN ('pi_2', 'pi_5')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = StripeFake::start().await;
    stripe.mirror(&pool, "succeeded").await;
    stripe.set_status("pi_5", "canceled");
    for args in [&["migrate"][..], &["run"], &["repair"]] {
        let out = bin(&pool, &stripe.uri(), args).await;
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    let statuses: Vec<(String, String)> = sqlx::query_as(
        "SELECT stripe_payment_intent_id::text, status::text FROM payments ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        statuses[1],
        ("pi_2".to_owned(), "paid".to_owned()),
        "{statuses:?}"
    );
    assert_eq!(
        statuses[4],
        ("pi_5".to_owned(), "failed".to_owned()),
        "{statuses:?}"
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE resolved_at IS NULL"
        )
        .await,
        0,
        "every repair applied"
    );
    // The writer's guard holds: a second repair of the same rows is a no-op.
    let out = bin(&pool, &stripe.uri(), &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

const MONTHLY: &str = "CREATE TABLE payments (
        id bigint GENERATED ALWAYS AS IDENTITY,
        order_id text NOT NULL,
        stripe_payment_intent_id text NOT NULL,
        status text NOT NULL,
        version bigint NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now() - interval '1 hour',
        PRIMARY KEY (id, created_at)
    ) PARTITION BY RANGE (created_at);
    CREATE TABLE payments_2026_10 PARTITION OF payments FOR VALUES FROM ('2026-10-01') TO ('2026-11-01');
    CREATE TABLE payments_2026_11 PARTITION OF payments FOR VALUES FROM ('2026-11-01') TO ('2026-12-01')";

#[sqlx::test(migrations = false)]
async fn a_payments_partitioned_by_month_gets_its_index_per_partition(pool: PgPool) {
    sqlx::raw_sql(MONTHLY).execute(&pool).await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at)
         SELECT 'o' || i, 'pi_' || i, CASE WHEN i IN (3, 8) THEN 'pending' ELSE 'paid' END,
                timestamptz '2026-10-20' + i * interval '3 days'
           FROM generate_series(1, 10) AS i",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = StripeFake::start().await;
    stripe.mirror(&pool, "succeeded").await;
    let out = bin(&pool, &stripe.uri(), &["migrate"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let valid = "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                  WHERE i.indrelid = 'payments'::regclass AND c.relname = 'payments_stripe_payment_intent_id_lookup' AND i.indisvalid";
    assert_eq!(count(&pool, valid).await, 1, "{}", stdout(&out));
    assert_eq!(
        count(&pool, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'payments_stripe_payment_intent_id_lookup'::regclass").await,
        2,
        "one attached index per partition"
    );

    // Without the index, run's advice is statements that work as they are.
    sqlx::raw_sql("DROP INDEX payments_stripe_payment_intent_id_lookup")
        .execute(&pool)
        .await
        .unwrap();
    let out = bin(&pool, &stripe.uri(), &["run"]).await;
    refused("run", &out, &["ON ONLY payments", "ATTACH PARTITION"]);
    let err = stderr(&out);
    let advice = &err[err
        .find("SET statement_timeout")
        .unwrap_or_else(|| panic!("{err}"))..];
    let statements: Vec<&str> = advice
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    assert!(statements.len() >= 5, "{err}");
    // Each as psql sends it: one statement at a time, outside a transaction.
    for s in statements {
        sqlx::raw_sql(s)
            .execute(&pool)
            .await
            .unwrap_or_else(|e| panic!("{s}: {e}"));
    }
    assert_eq!(count(&pool, valid).await, 1);

    let out = bin(&pool, &stripe.uri(), &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let kinds: Vec<(String, String)> = sqlx::query_as(
        "SELECT p.stripe_payment_intent_id, f.kind FROM reconciliation_findings f
           JOIN payments p ON p.id = f.payment_id ORDER BY p.id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        kinds,
        [
            ("pi_3".to_owned(), "missed_success".to_owned()),
            ("pi_8".to_owned(), "missed_success".to_owned())
        ]
    );
}

#[sqlx::test(migrations = false)]
async fn row_level_security_hiding_rows_from_the_role_that_runs_stops_run(pool: PgPool) {
    create_demo_payments(&pool).await;
    insert_paid(&pool, 6).await;
    let stripe = StripeFake::start().await;
    stripe.mirror(&pool, "succeeded").await;
    let out = bin(&pool, &stripe.uri(), &["migrate"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The role the CronJob runs as: not the owner, no BYPASSRLS; the
    // application's policy shows it half the rows.
    let role = format!("rls_{}", database_name(&pool));
    sqlx::raw_sql(&format!(
        "DROP ROLE IF EXISTS \"{role}\"; CREATE ROLE \"{role}\" LOGIN;
         GRANT ALL ON ALL TABLES IN SCHEMA public TO \"{role}\";
         GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO \"{role}\";
         ALTER TABLE payments ENABLE ROW LEVEL SECURITY;
         CREATE POLICY tenant ON payments USING (id % 2 = 0)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let mut url = url::Url::parse(&database_url(&pool)).unwrap();
    url.set_username(&role).unwrap();
    let mut env = env(&pool, &stripe.uri());
    env[0].1 = url.to_string();
    let out = reconciler_output(&["run"], &env).await;
    let outcome = out.status.code();
    let err = stderr(&out);
    // A policy that lets the role read every row: the run goes ahead.
    sqlx::raw_sql(&format!(
        "CREATE POLICY reconciler_all ON payments TO \"{role}\" USING (true)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let after = reconciler_output(&["run"], &env).await;
    let verified = count(
        &pool,
        "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL",
    )
    .await;
    sqlx::raw_sql(&format!("DROP OWNED BY \"{role}\"; DROP ROLE \"{role}\""))
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(outcome, Some(78), "{err}");
    assert!(
        err.contains("row-level security on payments may hide rows"),
        "{err}"
    );
    assert!(err.contains("BYPASSRLS"), "{err}");
    assert_eq!(after.status.code(), Some(0), "{}", stderr(&after));
    assert_eq!(verified, 6, "every row verified");
}

/// `char(26)` ULIDs, `citext` and a domain over text as `payments.id`:
/// walked in the column's own order on its own index (no exit 78), every
/// row verified once, exactly the drift found.
async fn a_text_like_key_is_walked(pool: PgPool, prelude: &str, id_type: &str) {
    let stripe = StripeFake::start().await;
    sqlx::raw_sql(&format!(
        "{prelude} {};
         INSERT INTO payments (id, order_id, stripe_payment_intent_id, status, created_at, updated_at)
         SELECT '01J' || lpad(i::text, 23, '0'), 'o' || i, 'pi_' || i,
                CASE WHEN i = 4 THEN 'pending' ELSE 'paid' END,
                now() - interval '30 days' + i * interval '1 minute', now() - interval '1 hour'
           FROM generate_series(1, 7) AS i",
        DEMO_PAYMENTS.replace(
            "id                       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
            &format!("id {id_type} PRIMARY KEY")
        )
    ))
    .execute(&pool)
    .await
    .unwrap();
    stripe.mirror(&pool, "succeeded").await;
    for args in [&["migrate"][..], &["run"], &["status"]] {
        let out = bin(&pool, &stripe.uri(), args).await;
        assert_eq!(
            out.status.code(),
            Some(0),
            "{id_type} {args:?}: {}",
            stderr(&out)
        );
    }
    let kinds: Vec<(String, String)> =
        sqlx::query_as("SELECT payment_id::text, kind FROM reconciliation_findings ORDER BY 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        kinds,
        [(format!("01J{:0>23}", 4), "missed_success".to_owned())],
        "{id_type}"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL").await,
        7,
        "{id_type}: every row verified"
    );
}

#[sqlx::test(migrations = false)]
async fn a_char_26_ulid_key_is_walked_like_a_text_key(pool: PgPool) {
    a_text_like_key_is_walked(pool, "", "char(26)").await;
}

#[sqlx::test(migrations = false)]
async fn a_citext_key_is_walked_like_a_text_key(pool: PgPool) {
    a_text_like_key_is_walked(pool, "CREATE EXTENSION IF NOT EXISTS citext;", "citext").await;
}

#[sqlx::test(migrations = false)]
async fn a_domain_over_text_key_is_walked_like_a_text_key(pool: PgPool) {
    a_text_like_key_is_walked(
        pool,
        "CREATE DOMAIN ulid AS text CHECK (length(VALUE) = 26);",
        "ulid",
    )
    .await;
}
