//! Subscription findings in the review loop, through the binary: `findings
//! list` (JSON and CSV) and `findings show` with the subscription's
//! Dashboard link, `findings resolve --file`, the `reconciliation_review`
//! view, `status` showing both objects, and a relayed (Debezium) outbox
//! getting one command per row, once.

use serde_json::Value;
use sqlx::PgPool;

use super::subscriptions_common::*;

#[sqlx::test(migrations = false)]
async fn subscription_findings_through_the_review_loop_and_status(pool: PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE plans (id integer PRIMARY KEY, stripe_subscription_id text, status text NOT NULL,
                             created_at timestamptz NOT NULL DEFAULT now() - interval '2 hours',
                             updated_at timestamptz NOT NULL DEFAULT now() - interval '1 hour');
         INSERT INTO plans VALUES (1, 'sub_Left', 'active'), (2, 'sub_Locked', 'canceled');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = SubsFake::start().await;
    let t = now();
    let mut left = sub("sub_Left", "canceled", t - 7200, "price_a", 1, t - 60);
    left["ended_at"] = (t - 60).into();
    stripe.add(left);
    stripe.add(sub(
        "sub_Locked",
        "active",
        t - 7200,
        "price_a",
        1,
        t + 86_400,
    ));
    let env = env(
        &pool,
        &stripe,
        "retrieve",
        &[("RECONCILER_SUBSCRIPTIONS_TABLE", "plans")],
    );
    migrate(&pool, &env).await;
    binary(&["run", "--object", "subscriptions"], &env, 0).await;

    let listed = binary(&["findings", "list", "--json"], &env, 0).await;
    let rows: Vec<Value> = listed
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let locked = rows
        .iter()
        .find(|r| r["kind"] == "subscription_paid_but_blocked")
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(
        locked["dashboard_url"], "https://dashboard.stripe.com/test/subscriptions/sub_Locked",
        "{locked}"
    );
    assert_eq!(locked["subscription_id"], "2");
    assert_eq!(locked["differs"]["stripe"], "active", "{locked}");
    let id = locked["id"].as_i64().unwrap().to_string();

    let csv = binary(&["findings", "list", "--csv"], &env, 0).await;
    assert!(
        csv.lines()
            .next()
            .unwrap_or_default()
            .contains("stripe_subscription_id"),
        "{csv}"
    );
    assert!(
        csv.contains("https://dashboard.stripe.com/test/subscriptions/sub_Left"),
        "{csv}"
    );
    let shown = binary(&["findings", "show", &id], &env, 0).await;
    assert!(shown.contains("subscription:   2 (sub_Locked)"), "{shown}");
    assert!(shown.contains("subscriptions/sub_Locked"), "{shown}");

    let (severity, url): (String, String) = sqlx::query_as(
        "SELECT severity, dashboard_url FROM reconciliation_review WHERE kind = 'subscription_paid_but_blocked'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (severity.as_str(), url.as_str()),
        (
            "customer_locked_out",
            "https://dashboard.stripe.com/subscriptions/sub_Locked"
        )
    );

    let status = binary(&["status", "--json"], &env, 0).await;
    let status: Value = serde_json::from_str(&status).unwrap_or_else(|e| panic!("{e}: {status}"));
    let subs = &status["subscriptions"];
    assert_eq!(subs["job"], "subscriptions-vs-stripe", "{status}");
    assert_eq!(subs["rows_confirmed"], 2, "{status}");
    assert_eq!(subs["outbox_pending"], 2, "{status}");
    assert!(
        status.get("lag_seconds").is_some(),
        "the payments job's state is still there"
    );

    let file = std::env::temp_dir().join(format!("subs-resolve-{}.csv", std::process::id()));
    std::fs::write(&file, format!("id,note\n{id},customer restored by hand\n")).unwrap();
    binary(
        &[
            "findings",
            "resolve",
            "--file",
            file.to_str().unwrap(),
            "--by",
            "ops",
        ],
        &env,
        0,
    )
    .await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(
        open(&pool).await,
        pairs(&[("1", "subscription_missed_cancel")])
    );
}

#[sqlx::test(migrations = false)]
async fn a_relayed_outbox_gets_one_command_per_row_once(pool: PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE plans (id integer PRIMARY KEY, stripe_subscription_id text, status text NOT NULL,
                             created_at timestamptz NOT NULL DEFAULT now() - interval '2 hours',
                             updated_at timestamptz NOT NULL DEFAULT now() - interval '1 hour');
         INSERT INTO plans VALUES (7, 'sub_Left', 'active');
         CREATE TABLE app_outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL,
                                  aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL,
                                  \"timestamp\" timestamptz);",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = SubsFake::start().await;
    let t = now();
    let mut left = sub("sub_Left", "canceled", t - 7200, "price_a", 1, t - 60);
    left["ended_at"] = (t - 60).into();
    stripe.add(left);
    let vars = [
        ("RECONCILER_SUBSCRIPTIONS_TABLE", "plans"),
        ("RECONCILER_OUTBOX_TABLE", "app_outbox"),
        ("RECONCILER_OUTBOX_SHAPE", "debezium"),
    ];
    let env = env(&pool, &stripe, "retrieve", &vars);
    migrate(&pool, &env).await;
    for _ in 0..2 {
        binary(&["run", "--object", "subscriptions"], &env, 0).await;
    }
    let rows: Vec<(String, String, String, Value)> =
        sqlx::query_as("SELECT aggregatetype, aggregateid, type, payload FROM app_outbox")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (aggregate, id, kind, payload) = &rows[0];
    assert_eq!(
        (aggregate.as_str(), id.as_str(), kind.as_str()),
        ("subscription", "7", "ApplySubscriptionState")
    );
    assert_eq!(payload["expected"]["status"], "active", "{payload}");
    assert_eq!(payload["apply"]["status"], "canceled", "{payload}");
}
