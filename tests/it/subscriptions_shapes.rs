//! The subscriptions scan on the shapes in the wild, through the binary:
//! Laravel Cashier (`stripe_status`, a NULL price for a multi-item
//! subscription, application words mapped to Stripe's and a word the map
//! does not name), a status-less `users` table keyed by uuid with an
//! epoch-integer period column, and `past_due` under both policies.

use serde_json::Value;
use sqlx::PgPool;

use super::subscriptions_common::*;
use crate::support::object_summary;

const DAY: i64 = 86_400;

/// Runs `run --object subscriptions` then `repair`; returns the run's summary.
async fn scan_and_repair(env: &[(&'static str, String)]) -> Value {
    let out = binary(&["run", "--object", "subscriptions"], env, 0).await;
    let summary =
        object_summary(&out, "subscriptions").unwrap_or_else(|| panic!("no summary: {out}"));
    binary(&["repair"], env, 0).await;
    summary
}

#[sqlx::test(migrations = false)]
async fn cashier_with_a_word_map_and_a_multi_item_subscription(pool: PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE subscriptions (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             user_id bigint NOT NULL DEFAULT 1,
             type varchar(255) NOT NULL DEFAULT 'default',
             stripe_id varchar(255) NOT NULL UNIQUE,
             stripe_status varchar(255) NOT NULL,
             stripe_price varchar(255),
             quantity integer,
             trial_ends_at timestamp(0) without time zone,
             ends_at timestamp(0) without time zone,
             created_at timestamp(0) without time zone,
             updated_at timestamp(0) without time zone);
         INSERT INTO subscriptions (stripe_id, stripe_status, stripe_price, quantity, created_at, updated_at)
         VALUES ('sub_Multi', 'active', NULL, NULL, now() - interval '4 hours', now() - interval '1 hour'),
                ('sub_Expired', 'expired', 'price_a', 1, now() - interval '3 hours', now() - interval '1 hour'),
                ('sub_Frozen', 'frozen', 'price_a', 1, now() - interval '2 hours', now() - interval '1 hour'),
                ('sub_TrialGone', 'trial', 'price_a', 1, now() - interval '1 hours', now() - interval '1 hour');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = SubsFake::start().await;
    let (t, ahead) = (now(), now() + 20 * DAY);
    let created = |h: i64| t - h * 3600;
    let mut multi = sub("sub_Multi", "active", created(4), "price_a", 1, ahead);
    let mut second = multi["items"]["data"][0].clone();
    second["price"]["id"] = "price_b".into();
    second["quantity"] = 3.into();
    multi["items"]["data"].as_array_mut().unwrap().push(second);
    stripe.add(multi);
    for (id, h) in [("sub_Expired", 3), ("sub_TrialGone", 1)] {
        let mut s = sub(id, "canceled", created(h), "price_a", 1, t - 2 * DAY);
        s["ended_at"] = (t - 2 * DAY).into();
        stripe.add(s);
    }
    stripe.add(sub("sub_Frozen", "active", created(2), "price_a", 1, ahead));
    let vars = [
        ("RECONCILER_SUBSCRIPTIONS_TABLE", "subscriptions"),
        ("RECONCILER_SUBSCRIPTION_ID_COLUMN", "stripe_id"),
        ("RECONCILER_SUBSCRIPTION_STATUS_COLUMN", "stripe_status"),
        ("RECONCILER_SUBSCRIPTION_ENDS_AT_COLUMN", "ends_at"),
        ("RECONCILER_SUBSCRIPTION_PRICE_COLUMN", "stripe_price"),
        ("RECONCILER_SUBSCRIPTION_QUANTITY_COLUMN", "quantity"),
        (
            "RECONCILER_SUBSCRIPTION_STATUSES",
            "active=active;trialing=trial;canceled=cancelled,expired;past_due=past_due",
        ),
    ];
    let env = env(&pool, &stripe, "list", &vars);
    migrate(&pool, &env).await;
    let summary = scan_and_repair(&env).await;
    // The multi-item row (NULL price and seats) and the mapped word agree;
    // `frozen` is no word of the map: unverifiable, never a finding.
    assert_eq!(open(&pool).await, pairs(&[]), "{summary}");
    assert_eq!(summary["verdicts"]["unverifiable"], 1, "{summary}");
    assert_eq!(summary["verdicts"]["in_sync"], 2, "{summary}");
    assert_eq!(summary["findings_created"], 1, "{summary}");
    let (status, ends): (String, Option<i64>) = sqlx::query_as(
        "SELECT stripe_status, extract(epoch FROM ends_at AT TIME ZONE 'UTC')::bigint FROM subscriptions WHERE stripe_id = 'sub_TrialGone'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(status, "cancelled", "the first word of canceled is written");
    assert_eq!(ends, Some(t - 2 * DAY), "ends_at is Stripe's ended_at");
}

#[sqlx::test(migrations = false)]
async fn a_status_less_users_table_keyed_by_uuid(pool: PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE users (
             id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
             email text NOT NULL,
             stripe_subscription_id text,
             subscription_period_end bigint,
             subscription_ends_at timestamptz,
             created_at timestamptz NOT NULL DEFAULT now() - interval '2 hours',
             updated_at timestamptz NOT NULL DEFAULT now() - interval '1 hour');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (t, ahead) = (now(), now() + 20 * DAY);
    for (email, sub_id, period) in [
        ("paying@example.com", Some("sub_Paying"), ahead),
        ("locked@example.com", Some("sub_Locked"), t - 5 * DAY),
        ("left@example.com", Some("sub_Left"), ahead),
        ("free@example.com", None, ahead),
    ] {
        sqlx::query("INSERT INTO users (email, stripe_subscription_id, subscription_period_end) VALUES ($1, $2, $3)")
            .bind(email)
            .bind(sub_id)
            .bind(period)
            .execute(&pool)
            .await
            .unwrap();
    }
    let stripe = SubsFake::start().await;
    let created = t - 7200;
    stripe.add(sub("sub_Paying", "active", created, "price_a", 1, ahead));
    stripe.add(sub("sub_Locked", "active", created, "price_a", 1, ahead));
    let mut left = sub("sub_Left", "canceled", created, "price_a", 1, t - 2 * DAY);
    left["ended_at"] = (t - 2 * DAY).into();
    stripe.add(left);
    let vars = [
        ("RECONCILER_SUBSCRIPTIONS_TABLE", "users"),
        ("RECONCILER_SUBSCRIPTION_STATUS_COLUMN", "none"),
        (
            "RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN",
            "subscription_period_end",
        ),
        (
            "RECONCILER_SUBSCRIPTION_ENDS_AT_COLUMN",
            "subscription_ends_at",
        ),
    ];
    let env = env(&pool, &stripe, "retrieve", &vars);
    migrate(&pool, &env).await;
    let before: Vec<(String, Value)> =
        sqlx::query_as("SELECT email, to_jsonb(u) - 'subscription_period_end' - 'subscription_ends_at' - 'updated_at' FROM users u ORDER BY email")
            .fetch_all(&pool)
            .await
            .unwrap();
    let summary = scan_and_repair(&env).await;
    assert_eq!(summary["rows_without_subscription"], 1, "{summary}");
    let kinds: Vec<(String, String)> = sqlx::query_as(
        "SELECT u.email, f.kind FROM reconciliation_findings f JOIN users u ON u.id::text = f.subscription_id ORDER BY u.email",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let want = [
        ("left@example.com", "subscription_missed_cancel"),
        ("locked@example.com", "subscription_paid_but_blocked"),
    ];
    assert_eq!(kinds, want.map(|(a, b)| (a.to_owned(), b.to_owned())));
    let rows: Vec<(String, Option<i64>, Option<i64>)> = sqlx::query_as(
        "SELECT email, subscription_period_end, extract(epoch FROM subscription_ends_at)::bigint FROM users ORDER BY email",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let want = [
        ("free@example.com", Some(ahead), None),
        ("left@example.com", Some(t - 2 * DAY), Some(t - 2 * DAY)),
        ("locked@example.com", Some(ahead), None),
        ("paying@example.com", Some(ahead), None),
    ];
    assert_eq!(
        rows,
        want.map(|(e, p, x)| (e.to_owned(), p, x)),
        "epoch period and ends-at written"
    );
    let after: Vec<(String, Value)> =
        sqlx::query_as("SELECT email, to_jsonb(u) - 'subscription_period_end' - 'subscription_ends_at' - 'updated_at' FROM users u ORDER BY email")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(before, after, "nothing else touched");
}

/// One row `active` locally, `past_due` at Stripe, under `policy`.
async fn past_due(pool: &PgPool, policy: &str) -> std::collections::BTreeSet<(String, String)> {
    sqlx::raw_sql(
        "CREATE TABLE plans (id integer PRIMARY KEY, stripe_subscription_id text, status text NOT NULL,
                             created_at timestamptz NOT NULL DEFAULT now() - interval '2 hours',
                             updated_at timestamptz NOT NULL DEFAULT now() - interval '1 hour');
         INSERT INTO plans (id, stripe_subscription_id, status) VALUES (1, 'sub_Dunning', 'active');",
    )
    .execute(pool)
    .await
    .unwrap();
    let stripe = SubsFake::start().await;
    stripe.add(sub(
        "sub_Dunning",
        "past_due",
        now() - 7200,
        "price_a",
        1,
        now() + DAY,
    ));
    let vars = [
        ("RECONCILER_SUBSCRIPTIONS_TABLE", "plans"),
        ("RECONCILER_PAST_DUE_ACCESS", policy),
    ];
    let env = env(pool, &stripe, "retrieve", &vars);
    migrate(pool, &env).await;
    binary(&["run", "--object", "subscriptions"], &env, 0).await;
    open(pool).await
}

#[sqlx::test(migrations = false)]
async fn past_due_keeps_access_under_grant(pool: PgPool) {
    assert_eq!(
        past_due(&pool, "grant").await,
        pairs(&[("1", "subscription_status_mismatch")])
    );
}

#[sqlx::test(migrations = false)]
async fn past_due_is_access_without_payment_under_revoke(pool: PgPool) {
    assert_eq!(
        past_due(&pool, "revoke").await,
        pairs(&[("1", "subscription_access_without_payment")])
    );
    assert!(
        commanded(&pool).await.is_empty(),
        "a non-terminal status waits for a person"
    );
}

/// A status-less row whose period lapsed, `unpaid` at Stripe with a
/// cancellation scheduled: both deny access, and the repair of the
/// schedule must not write Stripe's later period end (that would restore
/// access to a subscription Stripe does not collect on).
#[sqlx::test(migrations = false)]
async fn a_schedule_repair_never_restores_access_stripe_denies(pool: PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE users (id integer PRIMARY KEY, stripe_subscription_id text,
                             period_end bigint, ends_at timestamptz,
                             created_at timestamptz NOT NULL DEFAULT now() - interval '2 hours',
                             updated_at timestamptz NOT NULL DEFAULT now() - interval '1 hour');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (t, ahead) = (now(), now() + 20 * DAY);
    sqlx::query(
        "INSERT INTO users (id, stripe_subscription_id, period_end) VALUES (1, 'sub_Unpaid', $1)",
    )
    .bind(t - 5 * DAY)
    .execute(&pool)
    .await
    .unwrap();
    let stripe = SubsFake::start().await;
    let mut unpaid = sub("sub_Unpaid", "unpaid", t - 7200, "price_a", 1, ahead);
    unpaid["cancel_at"] = ahead.into();
    stripe.add(unpaid);
    let vars = [
        ("RECONCILER_SUBSCRIPTIONS_TABLE", "users"),
        ("RECONCILER_SUBSCRIPTION_STATUS_COLUMN", "none"),
        ("RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN", "period_end"),
        ("RECONCILER_SUBSCRIPTION_ENDS_AT_COLUMN", "ends_at"),
    ];
    let env = env(&pool, &stripe, "retrieve", &vars);
    migrate(&pool, &env).await;
    scan_and_repair(&env).await;
    let row: (Option<i64>, Option<i64>) =
        sqlx::query_as("SELECT period_end, extract(epoch FROM ends_at)::bigint FROM users")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(row, (Some(t - 5 * DAY), None), "access stays ended");
    assert!(commanded(&pool).await.is_empty(), "waits for a person");
}

/// A restore enqueued while Stripe was `active` is withdrawn when a later
/// scan sees the subscription `past_due` before `repair` ran: restoring
/// access while Stripe is `past_due` waits for a person.
#[sqlx::test(migrations = false)]
async fn a_pending_restore_is_withdrawn_when_stripe_turns_past_due(pool: PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE plans (id integer PRIMARY KEY, stripe_subscription_id text, status text NOT NULL,
                             created_at timestamptz NOT NULL DEFAULT now() - interval '2 hours',
                             updated_at timestamptz NOT NULL DEFAULT now() - interval '1 hour');
         INSERT INTO plans (id, stripe_subscription_id, status) VALUES (1, 'sub_Blocked', 'canceled');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = SubsFake::start().await;
    let t = now();
    stripe.add(sub(
        "sub_Blocked",
        "active",
        t - 7200,
        "price_a",
        1,
        t + DAY,
    ));
    let env = env(
        &pool,
        &stripe,
        "retrieve",
        &[("RECONCILER_SUBSCRIPTIONS_TABLE", "plans")],
    );
    migrate(&pool, &env).await;
    binary(&["run", "--object", "subscriptions"], &env, 0).await;
    assert_eq!(commanded(&pool).await, ["1"], "the restore is enqueued");
    stripe.add(sub(
        "sub_Blocked",
        "past_due",
        t - 7200,
        "price_a",
        1,
        t + DAY,
    ));
    binary(&["run", "--object", "subscriptions"], &env, 0).await;
    binary(&["repair"], &env, 0).await;
    let status: String = sqlx::query_scalar("SELECT status FROM plans")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status, "canceled", "no restore while Stripe is past_due");
    assert_eq!(
        open(&pool).await,
        pairs(&[("1", "subscription_paid_but_blocked")])
    );
}
