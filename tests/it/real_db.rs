//! Databases as they are found in the field (docs/operations.md, "Databases
//! as they are found"): a Rails `payments`
//! (`timestamp(6) without time zone`, read in `RECONCILER_TIMESTAMP_ZONE`
//! whatever the session's TimeZone), a role whose `statement_timeout` is
//! shorter than `migrate`'s long steps, and two partitions' jobs running at
//! once on interleaved rows (no deadlock reaches the user).

use std::collections::HashMap;
use std::time::Duration;

use crate::support::stripe_fake::StripeFake;
use sqlx::PgPool;

use crate::support::*;

/// A Rails table: `bigserial` ids, `character varying` text, and the two
/// timestamps as Rails creates them (`timestamp(6) without time zone`).
async fn rails_payments(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE payments (
             id bigserial PRIMARY KEY,
             order_id character varying NOT NULL,
             stripe_payment_intent_id character varying,
             status character varying NOT NULL,
             version bigint NOT NULL DEFAULT 0,
             created_at timestamp(6) without time zone NOT NULL,
             updated_at timestamp(6) without time zone NOT NULL);
         CREATE INDEX index_payments_on_stripe_payment_intent_id
             ON payments (stripe_payment_intent_id);",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// A Rails row whose wall-clock times are written in `zone` (as Rails does
/// with `default_timezone` :utc, or :local in that zone): created a day ago,
/// updated `updated_secs_ago` seconds ago.
async fn rails_row(
    pool: &PgPool,
    zone: &str,
    pi: &str,
    status: &str,
    updated_secs_ago: i64,
) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         VALUES ('order-' || $1, $1, $2, (now() AT TIME ZONE $3) - interval '1 day',
                 (now() AT TIME ZONE $3) - make_interval(secs => $4))
         RETURNING id",
    )
    .bind(pi)
    .bind(status)
    .bind(zone)
    .bind(updated_secs_ago as f64)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Every session of this database starts in a TimeZone that is not UTC.
async fn database_time_zone(pool: &PgPool, zone: &str) {
    let db = database_name(pool);
    sqlx::raw_sql(&format!("ALTER DATABASE \"{db}\" SET timezone = '{zone}'"))
        .execute(pool)
        .await
        .unwrap();
}

fn rails_env(
    pool: &PgPool,
    stripe: &StripeFake,
    zone: Option<&str>,
) -> Vec<(&'static str, String)> {
    // The connection's own TimeZone is not UTC either (libpq's `options`).
    let url = format!(
        "{}?options=-c%20TimeZone%3DAmerica%2FLos_Angeles",
        database_url(pool)
    );
    let mut env = vec![
        ("DATABASE_URL", url),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_READ_MODE", "retrieve".to_owned()),
        ("RECONCILER_LOG_FORMAT", "pretty".to_owned()),
    ];
    if let Some(zone) = zone {
        env.push(("RECONCILER_TIMESTAMP_ZONE", zone.to_owned()));
    }
    env
}

async fn open_findings(pool: &PgPool) -> Vec<(i64, String)> {
    sqlx::query_as(
        "SELECT payment_id, kind FROM reconciliation_findings WHERE resolved_at IS NULL
          ORDER BY payment_id, kind",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// `migrate`, `run`, `status` and `repair` on a Rails table whose times are
/// written in `zone` (`None`: the default, UTC): a row updated a minute ago
/// is IN_FLIGHT, one updated two hours ago is checked (a missed success),
/// and the repair's `updated_at` is written in the same zone.
async fn rails_table_in(pool: PgPool, zone: Option<&str>) {
    let wall = zone.unwrap_or("UTC");
    rails_payments(&pool).await;
    database_time_zone(&pool, "America/New_York").await;
    let stripe = StripeFake::start().await;
    let fresh = rails_row(&pool, wall, "pi_Fresh", "pending", 60).await;
    let old = rails_row(&pool, wall, "pi_Old", "pending", 2 * 3600).await;
    let paid = rails_row(&pool, wall, "pi_Paid", "paid", 2 * 3600).await;
    for (pi, status) in [
        ("pi_Fresh", "succeeded"),
        ("pi_Old", "succeeded"),
        ("pi_Paid", "succeeded"),
    ] {
        stripe.set_status(pi, status);
    }
    let env = rails_env(&pool, &stripe, zone);

    let out = reconciler_output(&["migrate"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    // Nothing the reconciler made depends on the application's timestamps.
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE indexdef ~ '(created_at|updated_at)'
            AND tablename <> 'reconciliation_payment_state'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(indexes, Vec::<String>::new());

    let out = reconciler_output(&["run"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(
        open_findings(&pool).await,
        [(old, "missed_success".to_owned())],
        "the row updated a minute ago is in flight, the one updated two hours ago is checked: {}",
        all_output(&out)
    );
    assert!(!verified(&pool, fresh).await.1, "in flight: not confirmed");
    assert!(verified(&pool, paid).await.1);
    // The lag counts from the rows' times in the stated zone: the rows are
    // a day old, not hours in the future or past.
    let out = reconciler_output(&["status", "--json"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let lag = status["lag_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("{status:#}"));
    assert!((86_000.0..87_000.0).contains(&lag), "{status:#}");

    // The canonical writer stamps `updated_at` in the same zone.
    let out = reconciler_output(&["repair"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let (status, off_by): (String, f64) = sqlx::query_as(
        "SELECT status::text, abs(extract(epoch FROM (now() AT TIME ZONE $2) - updated_at))::float8
           FROM payments WHERE id = $1",
    )
    .bind(old)
    .bind(wall)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(status, "paid");
    assert!(
        off_by < 600.0,
        "updated_at written {off_by} s away from {wall}'s clock"
    );
}

#[sqlx::test(migrations = false)]
async fn a_rails_table_in_utc_installs_and_runs_whatever_the_session_time_zone(pool: PgPool) {
    rails_table_in(pool, None).await;
}

#[sqlx::test(migrations = false)]
async fn a_rails_table_in_a_stated_zone_is_read_in_that_zone(pool: PgPool) {
    rails_table_in(pool, Some("Asia/Tokyo")).await;
}

#[sqlx::test(migrations = false)]
async fn an_unknown_timestamp_zone_is_refused_naming_the_variable(pool: PgPool) {
    rails_payments(&pool).await;
    let stripe = StripeFake::start().await;
    let env = rails_env(&pool, &stripe, Some("Mars/Olympus_Mons"));
    let out = reconciler_output(&["migrate"], &env).await;
    assert_eq!(out.status.code(), Some(78), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("RECONCILER_TIMESTAMP_ZONE"),
        "{}",
        all_output(&out)
    );
}

/// A numeric offset is PostgreSQL's POSIX zone with the sign inverted
/// (`+05:30` means UTC-05:30): refused before anything runs, naming an IANA
/// zone to use; a POSIX string without a sign (`EST5`), which the database
/// would take, is refused at start for not being an IANA name.
#[sqlx::test(migrations = false)]
async fn numeric_offsets_and_posix_zones_are_refused_naming_an_iana_zone(pool: PgPool) {
    rails_payments(&pool).await;
    let stripe = StripeFake::start().await;
    for (zone, commands) in [
        (
            "+05:30",
            &[&["migrate"][..], &["run"][..], &["status"][..]][..],
        ),
        ("-03", &[&["migrate"][..]][..]),
        ("UTC+2", &[&["migrate"][..]][..]),
        ("GMT-5", &[&["run"][..]][..]),
        ("EST5", &[&["migrate"][..]][..]),
    ] {
        for command in commands {
            let env = rails_env(&pool, &stripe, Some(zone));
            let out = reconciler_output(command, &env).await;
            let text = all_output(&out);
            assert_eq!(out.status.code(), Some(78), "{zone} {command:?}: {text}");
            assert!(
                !text.contains("does not exist"),
                "{zone} {command:?}: {text}"
            );
            assert!(
                text.contains("RECONCILER_TIMESTAMP_ZONE") && text.contains("IANA"),
                "{zone}: {text}"
            );
        }
    }
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM pg_class WHERE relname = 'reconciliation_cursor'"
        )
        .await,
        0,
        "nothing was installed"
    );
}

/// A role of its own for this test's database, with `statement_timeout`
/// set as a role default; the returned guard drops it.
struct SlowRole {
    pool: PgPool,
    name: String,
}

impl SlowRole {
    async fn create(pool: &PgPool, timeout: &str) -> Self {
        let name = format!("slow_{}", database_name(pool));
        sqlx::raw_sql(&format!(
            "DROP ROLE IF EXISTS \"{name}\";
             CREATE ROLE \"{name}\" LOGIN SUPERUSER;
             ALTER ROLE \"{name}\" SET statement_timeout = '{timeout}';"
        ))
        .execute(pool)
        .await
        .unwrap();
        SlowRole {
            pool: pool.clone(),
            name,
        }
    }

    fn url(&self) -> String {
        let mut url = url::Url::parse(&database_url(&self.pool)).unwrap();
        url.set_username(&self.name).unwrap();
        url.to_string()
    }

    async fn drop_role(self) {
        sqlx::raw_sql(&format!(
            "REASSIGN OWNED BY \"{0}\" TO CURRENT_USER; DROP OWNED BY \"{0}\"; DROP ROLE \"{0}\";",
            self.name
        ))
        .execute(&self.pool)
        .await
        .unwrap();
    }
}

#[sqlx::test(migrations = false)]
async fn migrate_and_run_work_under_a_roles_statement_timeout(pool: PgPool) {
    // A table large enough that counting its PaymentIntent ids and building
    // their index each take longer than the role's timeout.
    sqlx::raw_sql(
        "CREATE TABLE payments (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text,
             status text NOT NULL,
             version bigint NOT NULL DEFAULT 0,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now());
         INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         SELECT 'order-' || i, 'pi_' || md5(i::text) || md5((i % 7)::text), 'paid',
                now() - interval '30 days', now() - interval '1 hour'
           FROM generate_series(1, 400000) AS i;
         INSERT INTO payments (order_id, stripe_payment_intent_id, status)
         VALUES ('dup-a', 'pi_Twice', 'paid'), ('dup-b', 'pi_Twice', 'paid');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let role = SlowRole::create(&pool, "200ms").await;
    // The timeout bites: as the role, with its default, a count of the
    // duplicate PaymentIntent ids in one scan (the statement
    // store::payment_index runs when no index orders the column) and the
    // index build are cancelled (57014, query_canceled). Each waits on
    // payments, which another session holds locked, so it runs past the
    // 200 ms on any machine, however fast; a lock timeout of the tests'
    // patience (30 s) turns a timeout that never bites into a 55P03 here
    // instead of a hang. Below, `migrate` builds the index with the
    // session's timeout lifted (store::legacy::concurrently), then counts
    // in bounded steps along it, and succeeds.
    let mut holder = pool.begin().await.unwrap();
    sqlx::raw_sql("LOCK payments IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let mut as_role = sqlx::PgConnection::connect(&role.url()).await.unwrap();
    sqlx::raw_sql("SET lock_timeout = '30s'")
        .execute(&mut as_role)
        .await
        .unwrap();
    for targeted in [
        "SELECT count(*), coalesce(sum(n), 0)::bigint FROM (
             SELECT count(*) AS n FROM payments
              WHERE stripe_payment_intent_id IS NOT NULL
              GROUP BY stripe_payment_intent_id HAVING count(*) > 1) d",
        "CREATE INDEX CONCURRENTLY probe_index ON payments (stripe_payment_intent_id)",
    ] {
        let error = sqlx::raw_sql(targeted)
            .execute(&mut as_role)
            .await
            .expect_err("the role's statement_timeout cancels it");
        let code = error
            .as_database_error()
            .and_then(|e| e.code().map(|c| c.into_owned()));
        assert_eq!(code.as_deref(), Some("57014"), "{targeted}: {error}");
    }
    holder.rollback().await.unwrap();
    // A concurrent build cancelled past its start leaves an invalid index
    // behind (this one was cancelled waiting for its first lock: none).
    sqlx::raw_sql("DROP INDEX IF EXISTS probe_index")
        .execute(&mut as_role)
        .await
        .unwrap();
    drop(as_role);
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;
    let env = vec![
        ("DATABASE_URL", role.url()),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_READ_MODE", "retrieve".to_owned()),
        ("RECONCILER_LOG_FORMAT", "pretty".to_owned()),
        ("RECONCILER_BATCH_SIZE", "50".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "2".to_owned()),
    ];

    let out = reconciler_output(&["migrate"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let printed = stdout(&out);
    assert!(
        printed.contains("1 PaymentIntent id(s) are held by 2 rows"),
        "{printed}"
    );
    assert!(
        printed.contains("added the plain index payments_stripe_payment_intent_id_lookup"),
        "{printed}"
    );
    // Progress: the long steps say what they are doing while they do it.
    assert!(
        printed.contains("counting duplicate PaymentIntent ids"),
        "{printed}"
    );
    assert!(printed.contains("building the index"), "{printed}");

    let out = reconciler_output(&["run"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));

    // Without the index, `run` names the exact statements that build it.
    sqlx::raw_sql("DROP INDEX payments_stripe_payment_intent_id_lookup")
        .execute(&pool)
        .await
        .unwrap();
    let out = reconciler_output(&["run"], &env).await;
    assert_eq!(out.status.code(), Some(78), "{}", all_output(&out));
    let said = all_output(&out);
    let statement = "CREATE INDEX CONCURRENTLY IF NOT EXISTS payments_stripe_payment_intent_id_lookup ON payments (stripe_payment_intent_id);";
    assert!(said.contains(statement), "{said}");
    assert!(said.contains("SET statement_timeout = 0;"), "{said}");
    // Done as said (as the role, in psql's way: one statement at a time).
    let mut conn = sqlx::PgConnection::connect(&role.url()).await.unwrap();
    for s in ["SET statement_timeout = 0", statement] {
        sqlx::raw_sql(s).execute(&mut conn).await.unwrap();
    }
    drop(conn);
    let out = reconciler_output(&["run"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    role.drop_role().await;
}

use sqlx::Connection;

/// Interleaved rows of two partitions (`eu` odd ids, `us` even ids), paid an
/// hour ago, `n` in all.
async fn interleaved(pool: &PgPool, n: i64) {
    sqlx::raw_sql("ALTER TABLE payments ADD COLUMN legal_entity text")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at,
                               legal_entity)
         SELECT 'order-' || i, 'pi_' || i, 'paid', now() - interval '30 days',
                now() - interval '1 hour', CASE WHEN i % 2 = 1 THEN 'eu' ELSE 'us' END
           FROM generate_series(1, $1) AS i",
    )
    .bind(n)
    .execute(pool)
    .await
    .unwrap();
}

fn partition_env(pool: &PgPool, stripe: &StripeFake, entity: &str) -> Vec<(&'static str, String)> {
    vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_READ_MODE", "retrieve".to_owned()),
        ("RECONCILER_LOG_FORMAT", "pretty".to_owned()),
        ("RECONCILER_JOB", format!("payments-{entity}")),
        ("RECONCILER_PARTITION_COLUMN", "legal_entity".to_owned()),
        ("RECONCILER_PARTITION_VALUE", entity.to_owned()),
        ("RECONCILER_BATCH_SIZE", "50".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "200".to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "2000".to_owned()),
        ("RECONCILER_MAX_IN_FLIGHT", "16".to_owned()),
    ]
}

/// Retrieves per PaymentIntent id so far.
async fn reads_per_intent(stripe: &StripeFake) -> HashMap<String, usize> {
    let mut reads = HashMap::new();
    for r in stripe.received_requests().await.unwrap_or_default() {
        if let Some(pi) = r.url.path().strip_prefix("/v1/payment_intents/") {
            *reads.entry(pi.to_owned()).or_insert(0) += 1;
        }
    }
    reads
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn two_partitions_running_at_once_never_fail_and_check_each_row_once_per_cycle(pool: PgPool) {
    const ROWS: i64 = 4_000;
    interleaved(&pool, ROWS).await;
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;
    let (eu, us) = (
        partition_env(&pool, &stripe, "eu"),
        partition_env(&pool, &stripe, "us"),
    );
    // Before `migrate`, `run` names the statements that build the
    // partition's index, should `migrate` be unable to.
    let out = reconciler_output(&["run"], &eu).await;
    assert_eq!(out.status.code(), Some(78), "{}", all_output(&out));
    assert!(
        all_output(&out).contains(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS payments_partition_legal_entity ON payments (\"legal_entity\", id);"
        ),
        "{}",
        all_output(&out)
    );
    let out = reconciler_output(&["migrate"], &eu).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));

    for round in 1..=4usize {
        let (a, b) = tokio::join!(
            reconciler_output(&["run"], &eu),
            reconciler_output(&["run"], &us)
        );
        for (who, out) in [("eu", &a), ("us", &b)] {
            assert_eq!(
                out.status.code(),
                Some(0),
                "round {round}, {who}: {}",
                all_output(out)
            );
        }
        // Each run completed its partition's cycle: every row was read
        // exactly once per round, by its own partition's job.
        let reads = reads_per_intent(&stripe).await;
        assert_eq!(reads.len(), ROWS as usize, "round {round}");
        let wrong: Vec<_> = reads.iter().filter(|(_, n)| **n != round).take(5).collect();
        assert!(wrong.is_empty(), "round {round}: {wrong:?}");
        assert_eq!(
            count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
            0
        );
    }
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state WHERE last_reconciled_at IS NOT NULL"
        )
        .await,
        ROWS
    );
}
