//! Text that is not valid UTF-8 and values too long to print (docs/operations.md,
//! "A stray byte in the application's text" and "Very long values in the tables"):
//! a `SQL_ASCII` database (old installs) stores any byte, and one `0xff` in
//! `status`, in the PaymentIntent column or in `order_id` used to fail every
//! batch (`invalid byte sequence for encoding "UTF8"`, the cursor stuck at
//! 0) and `findings list` for the whole queue. `#[sqlx::test]` databases
//! take the server's encoding, so this test creates its own `SQL_ASCII`
//! database (a unique name, dropped at the end) and drives the real binary:
//! `migrate`, `run`, `findings list`, `findings show`, `status`. The second
//! test: a NULL amount on a paid row, and a 1 MB `order_id` in the tables.

use std::time::Duration;

use serde_json::Value;
use sqlx::{Connection, PgConnection, PgPool};

use crate::support::*;

/// Runs `body` against a fresh `SQL_ASCII` database (its URL), dropped
/// afterwards whether `body` passed or not.
async fn with_sql_ascii_database<F, Fut>(body: F)
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let admin_url = std::env::var("DATABASE_URL").expect("DATABASE_URL must be set for the tests");
    let name = format!(
        "i30_sql_ascii_{}_{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    );
    let mut admin = PgConnection::connect(&admin_url).await.unwrap();
    sqlx::raw_sql(&format!(
        "CREATE DATABASE {name} TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'"
    ))
    .execute(&mut admin)
    .await
    .unwrap();
    let mut url = url::Url::parse(&admin_url).unwrap();
    url.set_path(&name);
    let outcome = tokio::spawn(body(url.to_string())).await;
    sqlx::raw_sql(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await
        .unwrap();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// The environment of the binary for `url`, reading from `stripe`.
fn env(url: &str, stripe: &str, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DATABASE_URL", url.to_owned()),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "10".to_owned()),
        ("RECONCILER_READ_MODE", "retrieve".to_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}

/// The application's own table, as an old install has it: no CHECK on the
/// status, nothing UNIQUE, text everywhere.
const APP_TABLE: &str = "CREATE TABLE payments (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        order_id text NOT NULL,
        stripe_payment_intent_id text,
        status text,
        version bigint NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL DEFAULT now() - interval '30 days',
        updated_at timestamptz NOT NULL DEFAULT now() - interval '1 hour')";

#[tokio::test]
async fn a_stray_byte_fails_no_batch_and_no_listing() {
    with_sql_ascii_database(|url| async move {
        let pool = PgPool::connect(&url).await.unwrap();
        sqlx::raw_sql(APP_TABLE).execute(&pool).await.unwrap();
        // 0xff where the application's text should be: in the PaymentIntent
        // column, in the status, in the order id.
        sqlx::raw_sql(
            r"INSERT INTO payments (order_id, stripe_payment_intent_id, status) VALUES
                ('o-1', 'pi_Good1', 'paid'),
                ('o-2', E'pi_Bad\xff', 'paid'),
                ('o-3', 'pi_Good3', E'paid\xff'),
                (E'o-\xff4', 'pi_Good4', 'pending'),
                ('o-5', 'pi_Good5', 'paid')",
        )
        .execute(&pool)
        .await
        .unwrap();
        // What failed before: the byte cannot reach a UTF-8 client as text.
        let as_text = sqlx::query_scalar::<_, String>("SELECT status FROM payments WHERE id = 3")
            .fetch_one(&pool)
            .await;
        assert!(as_text.is_err(), "the database is not SQL_ASCII: {as_text:?}");

        let migrate = reconciler_output(&["migrate"], &[("DATABASE_URL", url.clone())]).await;
        assert_eq!(migrate.status.code(), Some(0), "{}", all_output(&migrate));
        let stripe = stripe_answering("succeeded", Duration::ZERO).await;
        let env = env(&url, &stripe.uri(), &[]);

        let run = reconciler_output(&["run"], &env).await;

        assert_eq!(run.status.code(), Some(0), "{}", all_output(&run));
        let summary: Value = serde_json::from_str(stdout(&run).trim()).unwrap();
        assert_eq!(summary["rows_scanned"], 5, "{summary}");
        assert_eq!(summary["wrapped"], true, "the cycle ended: {summary}");
        assert_eq!(summary["stripe_requests"]["retrieve"], 4, "{summary}");
        let kinds: Vec<(i64, String, String)> = sqlx::query_as(
            "SELECT payment_id, kind, local_status FROM reconciliation_findings ORDER BY payment_id",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(
            kinds,
            [
                (2, "invalid_payment_intent_id".into(), "paid".into()),
                (3, r"unexpected:paid\xff->succeeded".into(), r"paid\xff".into()),
                (4, "missed_success".into(), "pending".into()),
            ],
            "a malformed id is invalid, an unknown status word is unexpected"
        );
        let stripe_asked: Vec<String> = stripe
            .received_requests()
            .await
            .unwrap()
            .iter()
            .map(|r| r.url.path().to_owned())
            .collect();
        assert!(
            !stripe_asked.iter().any(|p| p.contains("Bad")),
            "the malformed id went to Stripe: {stripe_asked:?}"
        );

        let table = reconciler_output(&["findings", "list"], &env).await;
        assert_eq!(table.status.code(), Some(0), "{}", all_output(&table));
        let text = stdout(&table);
        for shown in [r"pi_Bad\xff", r"o-\xff4", r"paid\xff"] {
            assert!(text.contains(shown), "{shown} not in:\n{text}");
        }
        let json = reconciler_output(&["findings", "list", "--json"], &env).await;
        assert_eq!(json.status.code(), Some(0), "{}", all_output(&json));
        let listed = json_lines(&json);
        let ids: Vec<&str> = listed
            .iter()
            .filter_map(|f| f["stripe_payment_intent_id"].as_str())
            .collect();
        assert!(ids.contains(&r"pi_Bad\xff"), "{ids:?}");
        let orders: Vec<&str> = listed.iter().filter_map(|f| f["order_id"].as_str()).collect();
        assert!(orders.contains(&r"o-\xff4"), "{orders:?}");

        let invalid: i64 = sqlx::query_scalar(
            "SELECT id FROM reconciliation_findings WHERE kind = 'invalid_payment_intent_id'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        let show = reconciler_output(&["findings", "show", &invalid.to_string()], &env).await;
        assert_eq!(show.status.code(), Some(0), "{}", all_output(&show));
        assert!(stdout(&show).contains(r"pi_Bad\xff"), "{}", stdout(&show));
        let status = reconciler_output(&["status"], &env).await;
        assert_eq!(status.status.code(), Some(0), "{}", all_output(&status));
        pool.close().await;
    })
    .await;
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_null_amount_is_a_finding_and_a_huge_order_id_is_shortened(pool: PgPool) {
    sqlx::raw_sql("ALTER TABLE payments ADD COLUMN amount_cents bigint")
        .execute(&pool)
        .await
        .unwrap();
    let in_sync = insert_payment(&pool, "pi_Counted", "paid", 3600).await;
    let no_amount = insert_payment(&pool, "pi_Uncounted", "paid", 3600).await;
    let huge = insert_payment(&pool, "pi_HugeOrder", "pending", 3600).await;
    sqlx::query("UPDATE payments SET amount_cents = 1099 WHERE id <> $1")
        .bind(no_amount)
        .execute(&pool)
        .await
        .unwrap();
    let order = "x".repeat(1_048_576);
    sqlx::query("UPDATE payments SET order_id = $2 WHERE id = $1")
        .bind(huge)
        .bind(&order)
        .execute(&pool)
        .await
        .unwrap();
    let stripe = stripe_answering("succeeded", Duration::ZERO).await;
    let env = env(
        &database_url(&pool),
        &stripe.uri(),
        &[("RECONCILER_AMOUNT_COLUMN", "amount_cents")],
    );

    let run = reconciler_output(&["run"], &env).await;

    assert_eq!(run.status.code(), Some(0), "{}", all_output(&run));
    assert!(findings_of(&pool, in_sync).await.is_empty());
    let f = findings_of(&pool, no_amount).await;
    assert_eq!(
        f.len(),
        1,
        "a paid row with a NULL amount is not in sync: {f:?}"
    );
    assert_eq!(f[0].kind, "amount_mismatch");
    assert_eq!(f[0].details.as_ref().unwrap()["local_amount"], Value::Null);
    assert_eq!(f[0].details.as_ref().unwrap()["stripe_amount"], 1099);

    let json = reconciler_output(&["findings", "list", "--json"], &env).await;
    assert_eq!(json.status.code(), Some(0), "{}", all_output(&json));
    let listed = json_lines(&json);
    let amount = listed
        .iter()
        .find(|f| f["kind"] == "amount_mismatch")
        .unwrap();
    assert_eq!(amount["differs"]["field"], "amount", "{amount}");
    assert_eq!(amount["differs"]["local"], Value::Null, "{amount}");
    assert_eq!(amount["differs"]["stripe"], "10.99 USD", "{amount}");
    let exact = listed.iter().find(|f| f["payment_id"] == huge).unwrap();
    assert_eq!(
        exact["order_id"].as_str(),
        Some(order.as_str()),
        "JSON stays exact"
    );

    let table = reconciler_output(&["findings", "list"], &env).await;
    assert_eq!(table.status.code(), Some(0), "{}", all_output(&table));
    let text = stdout(&table);
    assert!(
        text.contains("…(1048576 chars)"),
        "{}",
        &text[..text.len().min(2000)]
    );
    let longest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(longest < 2_000, "a line of {longest} characters");
    let show = reconciler_output(&["findings", "show", &finding_of(&pool, huge).await], &env).await;
    assert_eq!(show.status.code(), Some(0), "{}", all_output(&show));
    assert!(stdout(&show).contains("…(1048576 chars)"));
    assert!(
        stdout(&show).len() < 10_000,
        "{} bytes",
        stdout(&show).len()
    );
}

async fn finding_of(pool: &PgPool, payment: i64) -> String {
    findings_of(pool, payment).await[0].id.to_string()
}

/// `findings list --json`: one JSON object a line, each valid JSON.
fn json_lines(o: &std::process::Output) -> Vec<Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:.200}")))
        .collect()
}

/// A text key with one `0xff` (a `SQL_ASCII` database): the key is read as
/// bytes like every other value, so `run` and `status` work; the row is
/// UNVERIFIABLE with the reason, never sent to Stripe, and every other row
/// is verified in the same cycle.
#[tokio::test]
async fn a_stray_byte_in_a_text_key_is_unverifiable_and_fails_no_run() {
    with_sql_ascii_database(|url| async move {
        let pool = PgPool::connect(&url).await.unwrap();
        sqlx::raw_sql(&APP_TABLE.replace(
            "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
            "id text PRIMARY KEY",
        ))
        .execute(&pool)
        .await
        .unwrap();
        sqlx::raw_sql(
            r"INSERT INTO payments (id, order_id, stripe_payment_intent_id, status) VALUES
                ('pay_a', 'o-1', 'pi_Good1', 'paid'),
                (E'pay_b\xff', 'o-2', 'pi_Good2', 'pending'),
                ('pay_c', 'o-3', 'pi_Good3', 'paid'),
                ('pay_d', 'o-4', 'pi_Good4', 'pending')",
        )
        .execute(&pool)
        .await
        .unwrap();
        let migrate = reconciler_output(&["migrate"], &[("DATABASE_URL", url.clone())]).await;
        assert_eq!(migrate.status.code(), Some(0), "{}", all_output(&migrate));
        let stripe = stripe_answering("succeeded", Duration::ZERO).await;
        let env = env(&url, &stripe.uri(), &[("RECONCILER_BATCH_SIZE", "2")]);

        let run = reconciler_output(&["run"], &env).await;

        assert_eq!(run.status.code(), Some(0), "{}", all_output(&run));
        let summary: Value = serde_json::from_str(stdout(&run).trim()).unwrap();
        // The cursor cannot hold the bad key exactly (its text shows the
        // byte as \xff), so the row is read again by the next batch: every
        // time UNVERIFIABLE, and the cycle still ends.
        assert!(summary["rows_scanned"].as_u64().unwrap() >= 4, "{summary}");
        assert_eq!(summary["wrapped"], true, "the cycle ended: {summary}");
        assert!(
            summary["verdicts"]["unverifiable"].as_u64().unwrap() >= 1,
            "{summary}"
        );
        assert_eq!(summary["verdicts"]["in_sync"], 2, "{summary}");
        assert_eq!(summary["stripe_requests"]["retrieve"], 3, "{summary}");
        assert!(
            stderr(&run).contains(r"payments.id holds bytes that are not UTF-8"),
            "{}",
            stderr(&run)
        );
        let kinds: Vec<(String, String)> = sqlx::query_as(
            "SELECT payment_id, kind FROM reconciliation_findings ORDER BY payment_id",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(kinds, [("pay_d".to_owned(), "missed_success".to_owned())]);
        let status = reconciler_output(&["status", "--json"], &env).await;
        assert_eq!(status.status.code(), Some(0), "{}", all_output(&status));
        pool.close().await;
    })
    .await;
}
