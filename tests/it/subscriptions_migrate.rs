//! `migrate` with a subscriptions table, through the binary: exit 78 naming
//! what does not fit (no table, no column, a column of the wrong type, an
//! enum without the map's words, no way to tell access), and the lookup
//! index on the subscription id column built `CONCURRENTLY` — per partition
//! on a partitioned table — and kept when one exists.

use sqlx::PgPool;

use crate::support::*;

fn env(pool: &PgPool, vars: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
    ];
    env.extend(vars.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}

/// `migrate` with `vars`: its exit code and output.
async fn migrate(pool: &PgPool, vars: &[(&'static str, &str)]) -> (Option<i32>, String) {
    let out = reconciler_output(&["migrate"], &env(pool, vars)).await;
    (out.status.code(), all_output(&out))
}

#[sqlx::test(migrations = false)]
async fn what_does_not_fit_is_exit_78_naming_it(pool: PgPool) {
    create_demo_payments(&pool).await;
    sqlx::raw_sql(
        "CREATE TYPE sub_status AS ENUM ('incomplete', 'incomplete_expired', 'trialing', 'active',
                                         'past_due', 'canceled', 'unpaid', 'paused');
         CREATE TABLE subs (id bigint PRIMARY KEY, stripe_subscription_id text, status sub_status,
                            period_end text, created_at timestamptz, updated_at timestamptz);
         CREATE VIEW subs_view AS SELECT * FROM subs;",
    )
    .execute(&pool)
    .await
    .unwrap();
    let table = ("RECONCILER_SUBSCRIPTIONS_TABLE", "subs");
    let cases: [(&[(&'static str, &str)], &str); 5] = [
        (
            &[("RECONCILER_SUBSCRIPTIONS_TABLE", "nope")],
            "RECONCILER_SUBSCRIPTIONS_TABLE: no table \"nope\"",
        ),
        (
            &[("RECONCILER_SUBSCRIPTIONS_TABLE", "subs_view")],
            "is not a table",
        ),
        (
            &[table, ("RECONCILER_SUBSCRIPTION_ID_COLUMN", "stripe_id")],
            "RECONCILER_SUBSCRIPTION_ID_COLUMN: subs has no column \"stripe_id\"",
        ),
        (
            &[
                table,
                ("RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN", "period_end"),
            ],
            "RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN: subs.period_end is text",
        ),
        (
            &[
                table,
                (
                    "RECONCILER_SUBSCRIPTION_STATUSES",
                    "active=active;trialing=trial",
                ),
            ],
            "RECONCILER_SUBSCRIPTION_STATUSES: names [\"trial\"]",
        ),
    ];
    for (vars, says) in cases {
        let (code, out) = migrate(&pool, vars).await;
        assert_eq!(code, Some(78), "{vars:?}: {out}");
        assert!(out.contains(says), "{vars:?} should say {says:?}: {out}");
    }
    // Nothing was created for a schema that does not fit.
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM pg_class WHERE relname = 'reconciliation_cursor'"
        )
        .await,
        0
    );
    // The enum of Stripe's eight words fits the default map.
    let (code, out) = migrate(&pool, &[table]).await;
    assert_eq!(code, Some(0), "{out}");
    // `run --object subscriptions` without a table is a configuration error.
    let out = reconciler_output(&["run", "--object", "subscriptions"], &env(&pool, &[])).await;
    assert_eq!(out.status.code(), Some(78), "{}", all_output(&out));
    assert!(all_output(&out).contains("RECONCILER_SUBSCRIPTIONS_TABLE"));
}

/// The names of the valid indexes whose first column is
/// `stripe_subscription_id`, on `subs` and its partitions.
async fn lookup_indexes(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT x.relname::text FROM pg_index i
           JOIN pg_class x ON x.oid = i.indexrelid
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
          WHERE a.attname = 'stripe_subscription_id' AND i.indisvalid
            AND i.indrelid::regclass::text LIKE 'subs%' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = false)]
async fn the_lookup_index_is_built_concurrently_per_partition_and_kept(pool: PgPool) {
    create_demo_payments(&pool).await;
    sqlx::raw_sql(
        "CREATE TABLE subs (id bigint NOT NULL, region text NOT NULL, stripe_subscription_id text,
                            status text, created_at timestamptz, updated_at timestamptz,
                            PRIMARY KEY (id, region)) PARTITION BY LIST (region);
         CREATE TABLE subs_eu PARTITION OF subs FOR VALUES IN ('eu');
         CREATE TABLE subs_us PARTITION OF subs FOR VALUES IN ('us');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let vars = [("RECONCILER_SUBSCRIPTIONS_TABLE", "subs")];
    let (code, out) = migrate(&pool, &vars).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("CONCURRENTLY"), "{out}");
    assert_eq!(
        lookup_indexes(&pool).await,
        [
            "subs_eu_subs_stripe_subscription_id_lookup",
            "subs_stripe_subscription_id_lookup",
            "subs_us_subs_stripe_subscription_id_lookup"
        ]
    );
    let (code, out) = migrate(&pool, &vars).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("has the index subs_stripe_subscription_id_lookup: kept"),
        "{out}"
    );
    // Nothing but the index was added to the application's table.
    let columns = count(
        &pool,
        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'subs'",
    )
    .await;
    assert_eq!(columns, 6);
}
