//! `events` through the binary with a subscriptions table: a missed
//! `customer.subscription.deleted` found within one run (the subscription
//! read again, never the payload trusted), and a paying subscription no
//! row names (`invoice.paid`) caught as `subscription_missing_locally`;
//! a second run records nothing twice.

use serde_json::{json, Value};
use sqlx::PgPool;

use super::subscriptions_common::*;
use crate::support::object_summary;

/// The subscriptions feed's summary line of an `events` run.
fn feed_summary(out: &str) -> Value {
    object_summary(out, "subscriptions")
        .unwrap_or_else(|| panic!("no subscriptions summary: {out}"))
}

#[sqlx::test(migrations = false)]
async fn a_missed_cancel_and_a_subscription_no_row_names(pool: PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE plans (id integer PRIMARY KEY, stripe_subscription_id text, status text NOT NULL,
                             created_at timestamptz NOT NULL DEFAULT now() - interval '2 hours',
                             updated_at timestamptz NOT NULL DEFAULT now() - interval '1 hour');
         INSERT INTO plans (id, stripe_subscription_id, status)
         VALUES (1, 'sub_Missed', 'active'), (2, 'sub_Fine', 'active');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = SubsFake::start().await;
    let t = now();
    let mut missed = sub("sub_Missed", "canceled", t - 7200, "price_a", 1, t - 60);
    missed["ended_at"] = (t - 60).into();
    stripe.add(missed.clone());
    stripe.add(sub(
        "sub_Fine",
        "active",
        t - 7200,
        "price_a",
        1,
        t + 86_400,
    ));
    stripe.add(sub(
        "sub_Orphan",
        "active",
        t - 7200,
        "price_a",
        1,
        t + 86_400,
    ));
    // The payload says active: an older copy; the feed must read Stripe again.
    let mut stale = missed.clone();
    stale["status"] = "active".into();
    stripe.event("evt_1", "customer.subscription.deleted", t - 60, stale);
    let invoice = json!({"id": "in_1", "object": "invoice", "status": "paid",
                         "parent": {"subscription_details": {"subscription": "sub_Orphan"}}});
    stripe.event("evt_2", "invoice.paid", t - 50, invoice);
    let env = env(
        &pool,
        &stripe,
        "list",
        &[("RECONCILER_SUBSCRIPTIONS_TABLE", "plans")],
    );
    migrate(&pool, &env).await;

    let out = binary(&["events"], &env, 0).await;
    let summary = object_summary(&out, "subscriptions")
        .unwrap_or_else(|| panic!("no subscriptions summary: {out}"));
    assert_eq!(
        summary["job"], "subscriptions-vs-stripe-events",
        "{summary}"
    );
    assert_eq!(summary["events_read"], 2, "{summary}");
    let want = pairs(&[
        ("1", "subscription_missed_cancel"),
        ("sub_Orphan", "subscription_missing_locally"),
    ]);
    assert_eq!(open(&pool).await, want);
    assert_eq!(
        commanded(&pool).await,
        ["1"],
        "the missed cancel is repaired through the outbox"
    );
    assert_eq!(
        stripe.retrieves(),
        2,
        "each subscription named is read again"
    );

    let again = feed_summary(&binary(&["events"], &env, 0).await);
    assert_eq!(again["findings_created"], 0, "{again}");
    assert_eq!(again["commands_enqueued"], 0, "{again}");
    assert_eq!(open(&pool).await, want);
    assert_eq!(commanded(&pool).await, ["1"]);
}

/// A cancel whose row changed within the grace window (the application's
/// own half-done handling touched it) is judged by a later run once the
/// grace is over: the position does not move past its event meanwhile.
#[sqlx::test(migrations = false)]
async fn a_cancel_on_a_row_in_grace_is_judged_by_a_later_run(pool: PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE plans (id integer PRIMARY KEY, stripe_subscription_id text, status text NOT NULL,
                             created_at timestamptz NOT NULL DEFAULT now() - interval '2 hours',
                             updated_at timestamptz NOT NULL DEFAULT now());
         INSERT INTO plans (id, stripe_subscription_id, status) VALUES (1, 'sub_Touched', 'active');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = SubsFake::start().await;
    let t = now();
    let mut gone = sub("sub_Touched", "canceled", t - 7200, "price_a", 1, t - 900);
    gone["ended_at"] = (t - 900).into();
    stripe.add(gone.clone());
    stripe.event("evt_1", "customer.subscription.deleted", t - 900, gone);
    let env = env(
        &pool,
        &stripe,
        "retrieve",
        &[("RECONCILER_SUBSCRIPTIONS_TABLE", "plans")],
    );
    migrate(&pool, &env).await;
    let first = feed_summary(&binary(&["events"], &env, 0).await);
    assert_eq!(first["rows_in_grace"], 1, "{first}");
    sqlx::query("UPDATE plans SET updated_at = now() - interval '1 hour'")
        .execute(&pool)
        .await
        .unwrap();
    binary(&["events"], &env, 0).await;
    assert_eq!(
        open(&pool).await,
        pairs(&[("1", "subscription_missed_cancel")])
    );
}
