//! The variables whose effect was tested only in the library, through the
//! shipped binary and the command that reads them (docs/testing.md,
//! "Variables × commands"): each test runs `stripe-reconciler` with the
//! variable set and asserts what a user would check (findings, the fake
//! Stripe's counts, the summary, `status`, the log), and fails when the
//! command's wiring of the variable breaks (checked by breaking it).

use std::process::Output;

use serde_json::{json, Value};
use sqlx::PgPool;

use crate::support::arrange;
use crate::support::stripe_fake::StripeFake;
use crate::support::*;

const DAY: i64 = 24 * 3600;

/// The binary's environment against `stripe`, plus `extra`.
fn env(pool: &PgPool, stripe: &str, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.to_owned()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}

/// Runs the binary; asserts exit 0.
async fn ok_run(args: &[&str], env: &[(&'static str, String)]) -> Output {
    let out = reconciler_output(args, env).await;
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", all_output(&out));
    out
}

/// Open findings as `(PaymentIntent, kind)`, sorted by kind.
async fn open_kinds(pool: &PgPool) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT p.stripe_payment_intent_id, f.kind FROM reconciliation_findings f
           JOIN payments p ON p.id = f.payment_id
          WHERE f.resolved_at IS NULL ORDER BY f.kind",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The aging thresholds (`RECONCILER_AUTH_EXPIRY_WARN_SECONDS`,
/// `RECONCILER_PROCESSING_MAX_SECONDS`, `RECONCILER_ABANDONED_AFTER_SECONDS`)
/// and `RECONCILER_UNVERIFIABLE_CYCLES` through `run`: four PaymentIntents
/// created two days ago (a held authorisation, a SEPA debit processing, a
/// cart left waiting for a payment method, a succeeded one whose charge
/// Stripe never expands). At the defaults (5 days, 14 days, off, 3 cycles)
/// a first run finds nothing; a second run (the second cycle) with each
/// threshold at one day and 2 cycles finds exactly the four findings.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn aging_thresholds_and_the_unverifiable_streak_are_read_by_run(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let created = chrono::Utc::now().timestamp() - 2 * DAY;
    let rows = [
        ("pi_VarHeld", "pending", "requires_capture"),
        ("pi_VarSepa", "pending", "processing"),
        ("pi_VarLeft", "pending", "requires_payment_method"),
        ("pi_VarUnproven", "paid", "succeeded"),
    ];
    for (pi, local, status) in rows {
        insert_at(&pool, pi, local, created).await;
        let b = arrange::payment(pi).local(local).stripe(status);
        let b = match pi {
            "pi_VarHeld" => b
                .field("capture_method", json!("manual"))
                .field("amount_capturable", json!(1099)),
            "pi_VarSepa" => b
                .field("payment_method_types", json!(["sepa_debit"]))
                .field("processing", json!({"type": "sepa_debit"})),
            // The charge's id only, even when asked to expand it: the money
            // cannot be proven, the row is unverifiable.
            "pi_VarUnproven" => b.latest_charge(json!("ch_3VarUnproven")),
            _ => b,
        };
        let mut object = b.stripe_object();
        object["created"] = json!(created);
        stripe.add_object(None, object);
    }
    let base = stripe.uri();

    ok_run(&["run"], &env(&pool, &base, &[])).await;
    assert_eq!(open_kinds(&pool).await, [], "nothing at the defaults");

    let day = DAY.to_string();
    let vars = [
        ("RECONCILER_AUTH_EXPIRY_WARN_SECONDS", day.as_str()),
        ("RECONCILER_PROCESSING_MAX_SECONDS", day.as_str()),
        ("RECONCILER_ABANDONED_AFTER_SECONDS", day.as_str()),
        ("RECONCILER_UNVERIFIABLE_CYCLES", "2"),
    ];
    ok_run(&["run"], &env(&pool, &base, &vars)).await;
    let expected: Vec<(String, String)> = [
        ("pi_VarLeft", "abandoned"),
        ("pi_VarHeld", "authorization_expiring"),
        ("pi_VarUnproven", "persistently_unverifiable"),
        ("pi_VarSepa", "stuck_processing"),
    ]
    .iter()
    .map(|(p, k)| ((*p).to_owned(), (*k).to_owned()))
    .collect();
    assert_eq!(open_kinds(&pool).await, expected);
}

/// A subscriptions table whose columns are all named otherwise than the
/// defaults (`created_at`, `updated_at`), with a Connect account column.
const MEMBERSHIPS: &str = "CREATE TABLE memberships (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stripe_subscription_id text,
    status text NOT NULL,
    acct text,
    made_at timestamptz NOT NULL,
    touched_at timestamptz NOT NULL)";

const MEMBERSHIP_VARS: [(&str, &str); 5] = [
    ("RECONCILER_SUBSCRIPTIONS_TABLE", "memberships"),
    ("RECONCILER_LIST_WINDOW_SLACK_SECONDS", "1800"),
    ("RECONCILER_SUBSCRIPTION_CREATED_COLUMN", "made_at"),
    ("RECONCILER_SUBSCRIPTION_UPDATED_COLUMN", "touched_at"),
    ("RECONCILER_SUBSCRIPTION_ACCOUNT_COLUMN", "acct"),
];

const SUB_ACCT: &str = "acct_1VarsConnected";

/// `RECONCILER_SUBSCRIPTION_ACCOUNT_COLUMN`, `_CREATED_COLUMN` and
/// `_UPDATED_COLUMN` through `run --object subscriptions`, with a row whose
/// write the database refuses. Four rows the application still calls
/// `active` whose subscriptions Stripe has canceled: one of the platform,
/// one of a connected account (held only there: read with its
/// `Stripe-Account`, else it would be missing), one whose repair command
/// the application's outbox trigger refuses (`write_refused`, the rest of
/// the batch commits), one touched a minute ago (inside the grace window
/// the updated column gives: no finding). Every subscription is found by a
/// list page whose `created` window the created column and
/// `RECONCILER_LIST_WINDOW_SLACK_SECONDS` give (the oldest row's `created`
/// minus the slack to the newest row's plus a minute): none is retrieved
/// one by one.
#[sqlx::test(migrations = false)]
async fn subscription_columns_and_a_refused_write_through_run(pool: PgPool) {
    let stripe = StripeFake::start().await;
    sqlx::raw_sql(MEMBERSHIPS).execute(&pool).await.unwrap();
    let t = chrono::Utc::now().timestamp();
    let made = |n: i64| t - 3 * DAY + 600 * n;
    let rows = [
        ("sub_VarsPlatform", None, 3600),
        ("sub_VarsConnected", Some(SUB_ACCT), 3600),
        ("sub_VarsRefused", None, 3600),
        ("sub_VarsFresh", None, 60),
    ];
    for (n, (id, account, touched)) in rows.into_iter().enumerate() {
        let made = made(n as i64);
        sqlx::query(
            "INSERT INTO memberships (stripe_subscription_id, status, acct, made_at, touched_at)
             VALUES ($1, 'active', $2, to_timestamp($3), now() - make_interval(secs => $4))",
        )
        .bind(id)
        .bind(account)
        .bind(made as f64)
        .bind(touched as f64)
        .execute(&pool)
        .await
        .unwrap();
        let mut sub = crate::support::stripe_fake::subscription(id, "canceled", made);
        sub["ended_at"] = json!(t - DAY);
        stripe.add_subscription_object(account, sub);
    }
    let vars = env(&pool, &stripe.uri(), &MEMBERSHIP_VARS);
    create_demo_payments(&pool).await;
    ok_run(&["migrate"], &vars).await;
    // The application's outbox trigger refuses the third row's command.
    sqlx::raw_sql(
        "CREATE FUNCTION hold_membership() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'membership % is on hold', NEW.aggregate_id; END $$;
         CREATE TRIGGER hold_membership BEFORE INSERT ON outbox
            FOR EACH ROW WHEN (NEW.aggregate_id = '3') EXECUTE FUNCTION hold_membership();",
    )
    .execute(&pool)
    .await
    .unwrap();

    let out = ok_run(&["run", "--object", "subscriptions"], &vars).await;

    let summary: Value = object_summary(&stdout(&out), "subscriptions")
        .unwrap_or_else(|| panic!("no summary: {}", all_output(&out)));
    let open: Vec<(String, String)> = sqlx::query_as(
        "SELECT subscription_id, kind FROM reconciliation_findings
          WHERE resolved_at IS NULL ORDER BY subscription_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let want = |items: &[(&str, &str)]| -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    assert_eq!(
        open,
        want(&[
            ("1", "subscription_missed_cancel"),
            ("2", "subscription_missed_cancel"),
            ("3", "write_refused"),
        ]),
        "{summary}"
    );
    assert_eq!(summary["writes_refused"], 1, "{summary}");
    let commanded: Vec<String> = sqlx::query_scalar(
        "SELECT aggregate_id FROM outbox WHERE event_type = 'ApplySubscriptionState'
          ORDER BY aggregate_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(commanded, ["1", "2"], "the rest of the batch committed");
    use crate::support::stripe_fake::{SUBSCRIPTION_LIST, SUBSCRIPTION_RETRIEVE};
    assert_eq!(
        stripe.count(SUBSCRIPTION_RETRIEVE),
        0,
        "{:#?}",
        stripe.seen()
    );
    let windows: Vec<(Option<String>, Option<i64>, Option<i64>)> = stripe
        .seen()
        .into_iter()
        .filter(|x| x.endpoint == SUBSCRIPTION_LIST)
        .map(|x| (x.account, x.gte, x.lte))
        .collect();
    let slack = 1800;
    let mut want_windows = vec![
        // Rows 1 and 3 (20 minutes apart) share the platform's window.
        (None, Some(made(0) - slack), Some(made(2) + 60)),
        (
            Some(SUB_ACCT.to_owned()),
            Some(made(1) - slack),
            Some(made(1) + 60),
        ),
    ];
    let mut windows = windows;
    windows.sort();
    want_windows.sort();
    assert_eq!(windows, want_windows);
}

/// `RECONCILER_LIST_MAX_PAGES` through `run --object subscriptions`: one
/// row whose subscription Stripe lists after 250 others created within its
/// window (a page holds 100). With the cap at 2 its window takes exactly 2
/// list pages (the default allows 22), then the row is read on its own.
#[sqlx::test(migrations = false)]
async fn the_list_page_cap_bounds_a_subscriptions_window(pool: PgPool) {
    let stripe = StripeFake::start().await;
    sqlx::raw_sql(MEMBERSHIPS).execute(&pool).await.unwrap();
    let t = chrono::Utc::now().timestamp() - DAY;
    sqlx::query(
        "INSERT INTO memberships (stripe_subscription_id, status, made_at, touched_at)
         VALUES ('sub_VarsCrowded', 'active', to_timestamp($1), now() - interval '1 hour')",
    )
    .bind(t as f64)
    .execute(&pool)
    .await
    .unwrap();
    stripe.add_subscription(None, "sub_VarsCrowded", "active", t);
    for i in 0..250 {
        stripe.add_subscription(None, &format!("sub_VarsOther{i:03}"), "active", t + 30);
    }
    let mut vars = env(&pool, &stripe.uri(), &MEMBERSHIP_VARS);
    vars.push(("RECONCILER_LIST_MAX_PAGES", "2".to_owned()));
    create_demo_payments(&pool).await;
    ok_run(&["migrate"], &vars).await;

    ok_run(&["run", "--object", "subscriptions"], &vars).await;

    use crate::support::stripe_fake::{SUBSCRIPTION_LIST, SUBSCRIPTION_RETRIEVE};
    assert_eq!(stripe.count(SUBSCRIPTION_LIST), 2, "{:#?}", stripe.seen());
    assert_eq!(stripe.count(SUBSCRIPTION_RETRIEVE), 1);
    let findings: i64 = sqlx::query_scalar("SELECT count(*) FROM reconciliation_findings")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(findings, 0, "in sync, read on its own");
}

/// `RECONCILER_TARGET_CYCLE_SECONDS` and `RECONCILER_SCHEDULE_INTERVAL_SECONDS`
/// through `run --object subscriptions` with `RECONCILER_BATCHES_PER_RUN`
/// at its default (`auto`): 1,000 rows (analysed: the catalogue's estimate
/// is exact), batches of 10, no subscription id on any row (no Stripe
/// read). A cycle of 3,600 s at one run per 600 s is 6 runs a cycle:
/// 1,000 / 10 / 6 = 16.7, so 17 batches and one for growth, 18. The next
/// run with one run per 1,200 s (3 a cycle): 33.3, so 35. Neither reaches
/// the table's end (101 batches would: the plan with either variable
/// ignored differs, with both ignored it is 2).
#[sqlx::test(migrations = false)]
async fn the_cycle_and_the_interval_size_an_automatic_subscriptions_run(pool: PgPool) {
    let stripe = StripeFake::start().await;
    sqlx::raw_sql(MEMBERSHIPS).execute(&pool).await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO memberships (status, made_at, touched_at)
         SELECT 'active', now() - interval '2 days', now() - interval '1 hour'
           FROM generate_series(1, 1000);
         ANALYZE memberships;",
    )
    .execute(&pool)
    .await
    .unwrap();
    let vars = env(&pool, &stripe.uri(), &MEMBERSHIP_VARS);
    create_demo_payments(&pool).await;
    ok_run(&["migrate"], &vars).await;

    for (interval, batches) in [("600", 18), ("1200", 35)] {
        let mut vars = vars.clone();
        vars.extend([
            ("RECONCILER_BATCH_SIZE", "10".to_owned()),
            ("RECONCILER_TARGET_CYCLE_SECONDS", "3600".to_owned()),
            ("RECONCILER_SCHEDULE_INTERVAL_SECONDS", interval.to_owned()),
        ]);
        let out = ok_run(&["run", "--object", "subscriptions"], &vars).await;
        let summary: Value = object_summary(&stdout(&out), "subscriptions")
            .unwrap_or_else(|| panic!("no summary: {}", all_output(&out)));
        assert_eq!(
            summary["batches"], batches,
            "interval {interval}: {summary}"
        );
        assert_eq!(summary["rows_scanned"], batches * 10, "{summary}");
        assert_eq!(summary["wrapped"], false, "{summary}");
    }
    assert_eq!(stripe.seen().len(), 0, "no row names a subscription");
}

/// `RECONCILER_SUBSCRIPTION_UPDATED_COLUMN` through `events`: Stripe's
/// `customer.subscription.deleted` for two rows the application still
/// calls `active`; the row touched a minute ago (its `touched_at`) is left
/// to a later run (in grace), the one touched an hour ago is a missed cancel.
#[sqlx::test(migrations = false)]
async fn events_reads_the_subscriptions_updated_column(pool: PgPool) {
    let stripe = StripeFake::start().await;
    sqlx::raw_sql(MEMBERSHIPS).execute(&pool).await.unwrap();
    let t = chrono::Utc::now().timestamp();
    for (n, (id, touched)) in [("sub_VarsEvOld", 3600), ("sub_VarsEvFresh", 60)]
        .into_iter()
        .enumerate()
    {
        sqlx::query(
            "INSERT INTO memberships (stripe_subscription_id, status, made_at, touched_at)
             VALUES ($1, 'active', to_timestamp($2), now() - make_interval(secs => $3))",
        )
        .bind(id)
        .bind((t - DAY) as f64)
        .bind(touched as f64)
        .execute(&pool)
        .await
        .unwrap();
        let mut sub = crate::support::stripe_fake::subscription(id, "canceled", t - DAY);
        sub["ended_at"] = json!(t - 300);
        stripe.add_subscription_object(None, sub.clone());
        stripe.push_event(
            None,
            json!({"id": format!("evt_VarsEv{n}"), "object": "event",
                   "type": "customer.subscription.deleted", "created": t - 300 + n as i64,
                   "data": {"object": sub}}),
        );
    }
    let vars = env(&pool, &stripe.uri(), &MEMBERSHIP_VARS);
    create_demo_payments(&pool).await;
    ok_run(&["migrate"], &vars).await;

    let out = ok_run(&["events"], &vars).await;

    let summary: Value = object_summary(&stdout(&out), "subscriptions")
        .unwrap_or_else(|| panic!("no summary: {}", all_output(&out)));
    assert_eq!(summary["rows_in_grace"], 1, "{summary}");
    let open: Vec<(String, String)> = sqlx::query_as(
        "SELECT subscription_id, kind FROM reconciliation_findings WHERE resolved_at IS NULL",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        open,
        [("1".to_owned(), "subscription_missed_cancel".to_owned())]
    );
}

/// `RECONCILER_HTTP_TIMEOUT_SECONDS` through `run`: Stripe holds the answer
/// for one PaymentIntent 5 s, five times the 1 s timeout (a loaded machine
/// only makes the wait longer) and half the 10 s default. Each attempt is
/// abandoned as a timeout: the row is unverifiable (counted in the summary,
/// its streak's last error a timeout) while the other row is confirmed.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_http_timeout_abandons_a_slow_answer(pool: PgPool) {
    use wiremock::matchers::{method, path};
    let slow = insert_payment(&pool, "pi_VarsSlow", "paid", 3600).await;
    let quick = insert_payment(&pool, "pi_VarsQuick", "paid", 3600).await;
    let stripe = StripeFake::start().await;
    stripe.mirror(&pool, "succeeded").await;
    wiremock::Mock::given(method("GET"))
        .and(path("/v1/payment_intents/pi_VarsSlow"))
        .respond_with(ok("pi_VarsSlow", "succeeded").set_delay(std::time::Duration::from_secs(5)))
        .with_priority(1)
        .mount(&stripe)
        .await;
    let out = ok_run(
        &["run"],
        &env(
            &pool,
            &stripe.uri(),
            &[
                ("RECONCILER_READ_MODE", "retrieve"),
                ("RECONCILER_HTTP_TIMEOUT_SECONDS", "1"),
            ],
        ),
    )
    .await;
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["verdicts"]["unverifiable"], 1, "{summary}");
    assert_eq!(
        verified(&pool, quick).await,
        (Some("succeeded".into()), true)
    );
    assert!(!verified(&pool, slow).await.1, "not stamped");
    let last_error: String = sqlx::query_scalar(
        "SELECT last_error FROM reconciliation_unverifiable WHERE payment_id = $1",
    )
    .bind(slow)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(last_error.contains("timed out"), "{last_error}");
}

/// `RECONCILER_HTTP_TIMEOUT_SECONDS` through `events`: of two succeeded
/// PaymentIntents no row names, the one whose answer Stripe holds 5 s (five
/// times the 1 s timeout) is unverifiable, read again by a later run; the
/// other is `missing_locally`.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_http_timeout_abandons_a_slow_answer_in_events(pool: PgPool) {
    use wiremock::matchers::{method, path};
    let stripe = StripeFake::start().await;
    let created = chrono::Utc::now().timestamp() - 900;
    for (n, pi) in ["pi_VarsEvSlow", "pi_VarsEvQuick"].into_iter().enumerate() {
        stripe.add(None, pi, "succeeded", created);
        let mut object = payment_intent(pi, "succeeded");
        object["created"] = json!(created);
        stripe.push_event(
            None,
            json!({"id": format!("evt_VarsTimeout{n}"), "object": "event",
                   "type": "payment_intent.succeeded", "created": created + n as i64,
                   "data": {"object": object}}),
        );
    }
    wiremock::Mock::given(method("GET"))
        .and(path("/v1/payment_intents/pi_VarsEvSlow"))
        .respond_with(ok("pi_VarsEvSlow", "succeeded").set_delay(std::time::Duration::from_secs(5)))
        .with_priority(1)
        .mount(&stripe)
        .await;
    let out = ok_run(
        &["events"],
        &env(
            &pool,
            &stripe.uri(),
            &[("RECONCILER_HTTP_TIMEOUT_SECONDS", "1")],
        ),
    )
    .await;
    let orphans: Vec<String> = sqlx::query_scalar(
        "SELECT stripe_payment_intent_id FROM reconciliation_findings WHERE kind = 'missing_locally'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(orphans, ["pi_VarsEvQuick"]);
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["payment_intents_held"], 1, "{summary}");
    let held: Vec<String> =
        sqlx::query_scalar("SELECT stripe_payment_intent_id FROM reconciliation_events_retry")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(held, ["pi_VarsEvSlow"], "held for a later run");
    let timed_out = log_lines(&out).into_iter().any(|l| {
        l["payment_intent"] == "pi_VarsEvSlow"
            && l["error"].as_str().is_some_and(|e| e.contains("timed out"))
    });
    assert!(timed_out, "{}", stderr(&out));
}

/// `RECONCILER_LIST_MAX_PAGES` through `run` (list mode, the default): 20
/// rows created within 20 seconds among another application's 3,000
/// PaymentIntents of the same seconds. With the cap at 4 the batch asks
/// for exactly 4 list pages (`auto` allows 10 for a batch of 100), then
/// reads the rows those pages did not hold one by one, each once.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_list_page_cap_is_the_number_of_pages_asked(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let t = chrono::Utc::now().timestamp() - 3600;
    for i in 0..20 {
        let pi = format!("pi_VarsOurs{i:03}");
        insert_at(&pool, &pi, "paid", t - 20 + i).await;
        stripe.add(None, &pi, "succeeded", t - 20 + i);
    }
    for i in 0..3000 {
        stripe.add(
            None,
            &format!("pi_VarsOther{i:05}"),
            "succeeded",
            t - 20 + i % 20,
        );
    }
    let out = ok_run(
        &["run"],
        &env(
            &pool,
            &stripe.uri(),
            &[
                ("RECONCILER_BATCH_SIZE", "100"),
                ("RECONCILER_LIST_MAX_PAGES", "4"),
            ],
        ),
    )
    .await;
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["verdicts"]["in_sync"], 20, "{summary}");
    use crate::support::stripe_fake::LIST;
    assert_eq!(stripe.count(LIST), 4, "the page cap: {:#?}", stripe.seen());
    let retrieved = stripe.retrieved();
    let mut unique = retrieved.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), retrieved.len(), "none read twice");
    // The fake lists newest first: the 4 pages of 100 hold our 3 newest
    // rows; the 17 oldest are read one by one.
    let expected: Vec<String> = (0..17).map(|i| format!("pi_VarsOurs{i:03}")).collect();
    assert_eq!(unique, expected, "{retrieved:?}");
}

/// `RECONCILER_LIST_WINDOW_SLACK_SECONDS` through `run` (list mode): three
/// rows created 10 seconds apart, the third one's PaymentIntent created 100
/// seconds before the first row (outside the rows' window). The batch lists
/// the rows' window, then the two slack rings beside it, 300 seconds each
/// with the setting at 300, where the third PaymentIntent is found: no row
/// is retrieved one by one.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_list_window_slack_widens_the_listed_window(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let t = chrono::Utc::now().timestamp() - 3600;
    for (i, pi) in ["pi_VarsSlackA", "pi_VarsSlackB", "pi_VarsSlackC"]
        .into_iter()
        .enumerate()
    {
        let created = t + 10 * i as i64;
        insert_at(&pool, pi, "paid", created).await;
        let in_stripe = if i == 2 { t - 100 } else { created };
        stripe.add(None, pi, "succeeded", in_stripe);
    }
    let out = ok_run(
        &["run"],
        &env(
            &pool,
            &stripe.uri(),
            &[("RECONCILER_LIST_WINDOW_SLACK_SECONDS", "300")],
        ),
    )
    .await;
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["verdicts"]["in_sync"], 3, "{summary}");
    let mut windows: Vec<(Option<i64>, Option<i64>)> = stripe
        .seen()
        .into_iter()
        .filter(|x| x.endpoint == crate::support::stripe_fake::LIST && x.gte.is_some())
        .map(|x| (x.gte, x.lte))
        .collect();
    windows.sort();
    assert_eq!(
        windows,
        [
            (Some(t - 300), Some(t - 1)),
            (Some(t), Some(t + 20)),
            (Some(t + 21), Some(t + 20 + 300)),
        ],
        "{:#?}",
        stripe.seen()
    );
    assert_eq!(stripe.retrieved(), Vec::<String>::new());
}

/// `RECONCILER_EVENTS_ACCOUNT_ACTIVE_SECONDS` through `events`: with a day,
/// only the connected account whose row changed an hour ago has its feed
/// read; the account whose rows are three days old is not. At the default
/// (30 days) both are.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn events_reads_the_feeds_of_the_accounts_active_within_the_setting(pool: PgPool) {
    crate::support::connected::add_account_column(&pool).await;
    for (pi, account, updated) in [
        ("pi_VarsRecent", "acct_1VarsRecent", 3600),
        ("pi_VarsDormant", "acct_1VarsDormant", 3 * DAY),
    ] {
        let id = insert_payment(&pool, pi, "paid", updated).await;
        sqlx::query("UPDATE payments SET stripe_account = $2 WHERE id = $1")
            .bind(id)
            .bind(account)
            .execute(&pool)
            .await
            .unwrap();
    }
    let stripe = StripeFake::start().await;
    let feeds = |stripe: &StripeFake| -> Vec<Option<String>> {
        let mut accounts: Vec<Option<String>> = stripe
            .seen()
            .into_iter()
            .filter(|x| x.endpoint == crate::support::stripe_fake::EVENTS)
            .map(|x| x.account)
            .collect();
        accounts.sort();
        accounts.dedup();
        accounts
    };
    let vars = [("RECONCILER_ACCOUNT_COLUMN", "stripe_account")];
    let mut with_day = vars.to_vec();
    with_day.push(("RECONCILER_EVENTS_ACCOUNT_ACTIVE_SECONDS", "86400"));
    ok_run(&["events"], &env(&pool, &stripe.uri(), &with_day)).await;
    assert_eq!(feeds(&stripe), [None, Some("acct_1VarsRecent".to_owned())]);

    let stripe = StripeFake::start().await;
    ok_run(&["events"], &env(&pool, &stripe.uri(), &vars)).await;
    assert_eq!(
        feeds(&stripe),
        [
            None,
            Some("acct_1VarsDormant".to_owned()),
            Some("acct_1VarsRecent".to_owned())
        ]
    );
}

/// `RECONCILER_SCHEDULE_INTERVAL_SECONDS` through `status --json`: 10,000
/// rows to check within the hour's target cycle, a run every 20 minutes
/// (three runs a cycle, not six at the default 10 minutes): each run needs
/// 3,334 rows, +20% = 4,000, 40 batches of 100 (20 at the default,
/// `plan::status_json_shows_the_next_runs_plan`).
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn status_plans_the_runs_the_schedule_interval_gives(pool: PgPool) {
    insert_paid(&pool, 10_000).await;
    sqlx::raw_sql(
        "INSERT INTO reconciliation_cursor (job, last_id, cycle_started_at) VALUES ('payments-vs-stripe', 0, now());
         INSERT INTO reconciliation_runs (job, started_at, finished_at, batch_size, batches, rows_scanned, outcome, max_payment_id) VALUES
             ('payments-vs-stripe', now() - interval '40 minutes', now() - interval '40 minutes' + interval '100 seconds', 1900, 1, 1000, 'completed', 10000),
             ('payments-vs-stripe', now() - interval '20 minutes', now() - interval '20 minutes' + interval '100 seconds', 1900, 1, 1000, 'completed', 10000);
         ANALYZE payments;",
    )
    .execute(&pool)
    .await
    .unwrap();
    let out = ok_run(
        &["status", "--json"],
        &[
            ("DATABASE_URL", database_url(&pool)),
            ("RECONCILER_TARGET_CYCLE_SECONDS", "3600".into()),
            ("RECONCILER_BATCH_SIZE", "100".into()),
            ("RECONCILER_SCHEDULE_INTERVAL_SECONDS", "1200".into()),
        ],
    )
    .await;
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let plan = &s["plan"];
    assert_eq!(plan["batches"], 40, "{plan}");
    assert_eq!(
        plan["rows_per_run_needed"].as_f64().map(f64::round),
        Some(4_000.0),
        "{plan}"
    );
}

/// `RECONCILER_MAX_IN_FLIGHT` through `run`: a proxy in front of the fake
/// that holds every read until as many reads as the setting have been open
/// at once (and at least 300 ms) saw exactly 3 open at once with the
/// setting at 3, over 9 rows read one by one (the default, 8, would open
/// more).
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn max_in_flight_bounds_the_requests_open_at_once(pool: PgPool) {
    insert_paid(&pool, 9).await;
    let stripe = StripeFake::start().await;
    stripe.mirror(&pool, "succeeded").await;
    let proxy = holding::HoldingProxy::start(3, stripe.uri()).await;
    let out = ok_run(
        &["run"],
        &env(
            &pool,
            &proxy.uri(),
            &[
                ("RECONCILER_READ_MODE", "retrieve"),
                ("RECONCILER_MAX_IN_FLIGHT", "3"),
            ],
        ),
    )
    .await;
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["verdicts"]["in_sync"], 9, "{summary}");
    assert_eq!(proxy.retrieves(), 9);
    assert_eq!(proxy.most_open(), 3, "the most reads open at once");
}

/// `RECONCILER_MAX_IN_FLIGHT` through `events`: six succeeded
/// PaymentIntents no row names, each read again before it is a
/// `missing_locally` finding; behind the holding proxy the most reads open
/// at once is exactly 2 with the setting at 2.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn max_in_flight_bounds_the_events_jobs_reads(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let created = chrono::Utc::now().timestamp() - 900;
    for n in 0..6 {
        let pi = format!("pi_VarsOrphan{n}");
        stripe.add(None, &pi, "succeeded", created);
        let mut object = payment_intent(&pi, "succeeded");
        object["created"] = json!(created);
        stripe.push_event(
            None,
            json!({"id": format!("evt_VarsOrphan{n}"), "object": "event",
                   "type": "payment_intent.succeeded", "created": created + n,
                   "data": {"object": object}}),
        );
    }
    let proxy = holding::HoldingProxy::start(2, stripe.uri()).await;
    ok_run(
        &["events"],
        &env(&pool, &proxy.uri(), &[("RECONCILER_MAX_IN_FLIGHT", "2")]),
    )
    .await;
    let orphans: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM reconciliation_findings WHERE kind = 'missing_locally'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(orphans, 6);
    assert_eq!(proxy.retrieves(), 6);
    assert_eq!(proxy.most_open(), 2, "the most reads open at once");
}

/// `RECONCILER_RATE_LIMIT_RPS` through `run`: at 2 reads a second (each
/// read at least 1.03 / 2 s after the one before: src/stripe/transport.rs)
/// 7 reads leave at least 6 × 0.515 s = 3.09 s apart, first to last; the
/// test allows 1 s for the first read's way to the fake being slower than
/// the last's, and asserts a span of at least 2.09 s between their
/// arrivals. At the default (10 a second) they would span about 0.62 s, so
/// the test shows the variable is read; with its 1 s allowance it does not
/// show the burst of one (the unit test in src/stripe/transport.rs does).
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_rate_limit_spaces_the_reads(pool: PgPool) {
    insert_paid(&pool, 7).await;
    let stripe = StripeFake::start().await;
    stripe.mirror(&pool, "succeeded").await;
    ok_run(
        &["run"],
        &env(
            &pool,
            &stripe.uri(),
            &[
                ("RECONCILER_READ_MODE", "retrieve"),
                ("RECONCILER_RATE_LIMIT_RPS", "2"),
            ],
        ),
    )
    .await;
    let arrivals: Vec<std::time::Instant> = stripe.seen().iter().map(|x| x.at).collect();
    assert_eq!(arrivals.len(), 7, "{:#?}", stripe.seen());
    let span = *arrivals.iter().max().unwrap() - *arrivals.iter().min().unwrap();
    assert!(
        span >= std::time::Duration::from_millis(3090 - 1000),
        "7 reads at 2/s spanned only {span:?}"
    );
}

/// `RECONCILER_RATE_LIMIT_RPS` through `events`: every request the job
/// makes (its events pages, then six PaymentIntents no row names read
/// again) at 2 a second: n requests leave at least (n − 1) × 0.515 s apart;
/// their arrivals span that less 1 s (as in the `run` test above).
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_rate_limit_spaces_the_events_jobs_reads(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let created = chrono::Utc::now().timestamp() - 900;
    for n in 0..6 {
        let pi = format!("pi_VarsPaced{n}");
        stripe.add(None, &pi, "succeeded", created);
        let mut object = payment_intent(&pi, "succeeded");
        object["created"] = json!(created);
        stripe.push_event(
            None,
            json!({"id": format!("evt_VarsPaced{n}"), "object": "event",
                   "type": "payment_intent.succeeded", "created": created + n,
                   "data": {"object": object}}),
        );
    }
    ok_run(
        &["events"],
        &env(&pool, &stripe.uri(), &[("RECONCILER_RATE_LIMIT_RPS", "2")]),
    )
    .await;
    let seen = stripe.seen();
    let retrieves = seen
        .iter()
        .filter(|x| x.endpoint == crate::support::stripe_fake::RETRIEVE)
        .count();
    assert_eq!(retrieves, 6, "{seen:#?}");
    let arrivals: Vec<std::time::Instant> = seen.iter().map(|x| x.at).collect();
    let span = *arrivals.iter().max().unwrap() - *arrivals.iter().min().unwrap();
    let spacing = std::time::Duration::from_millis(515);
    let least = spacing * (arrivals.len() as u32 - 1) - std::time::Duration::from_secs(1);
    assert!(
        span >= least,
        "{} requests at 2/s spanned only {span:?} (at least {least:?})",
        arrivals.len()
    );
}

/// The JSON log lines of stderr.
fn log_lines(out: &Output) -> Vec<Value> {
    stderr(out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `HOSTNAME` through `run`, where a user sees the lease owner
/// (`host:pid:random`): a second run, started while the first holds the
/// lease (its phase 3 waiting on a lock the test holds), is refused (exit
/// 75) naming the first run's owner, which starts with the first run's
/// `HOSTNAME`; the first run's log line "payments lease taken" shows the
/// same owner.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn hostname_names_the_lease_owner_a_refused_run_shows(pool: PgPool) {
    use sqlx::Connection;
    insert_payment(&pool, "pi_VarsLeased", "paid", 3600).await;
    let stripe = StripeFake::start().await;
    stripe.mirror(&pool, "succeeded").await;
    let as_host = |host: &str| env(&pool, &stripe.uri(), &[("HOSTNAME", host)]);
    let mut holder = sqlx::PgConnection::connect(&database_url(&pool))
        .await
        .unwrap();
    let mut tx = holder.begin().await.unwrap();
    sqlx::query("LOCK TABLE reconciliation_payment_state IN SHARE MODE")
        .execute(&mut *tx)
        .await
        .unwrap();
    let first = reconciler(&["run"], &as_host("reconciler-pod-first"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    crate::support::wait::until_true(
        "the first run's phase 3 waiting on the test's lock",
        || async {
            !crate::support::wait::reconciler_backends_waiting_on_a_lock(&pool)
                .await
                .is_empty()
        },
    )
    .await;

    let second = reconciler_output(&["run"], &as_host("reconciler-pod-second")).await;
    tx.rollback().await.unwrap();
    let first = tokio::task::spawn_blocking(move || first.wait_with_output().unwrap())
        .await
        .unwrap();

    assert_eq!(first.status.code(), Some(0), "{}", all_output(&first));
    let owners: Vec<String> = log_lines(&first)
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.ends_with("lease taken"))
        })
        .filter_map(|l| l["owner"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(owners.len(), 1, "{}", stderr(&first));
    let parts: Vec<&str> = owners[0].split(':').collect();
    assert_eq!(parts.len(), 3, "{owners:?}");
    assert_eq!(parts[0], "reconciler-pod-first", "{owners:?}");
    assert!(parts[1].parse::<u32>().is_ok(), "the pid: {owners:?}");
    assert_eq!(second.status.code(), Some(75), "{}", all_output(&second));
    let refusal = stderr(&second);
    assert!(refusal.contains("another run holds the lease"), "{refusal}");
    assert!(refusal.contains(&owners[0]), "{refusal}");
}

/// `HOSTNAME` through `events`: the events job's own lease (its position
/// row) is taken by an owner named after it, as its log line shows.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn hostname_names_the_events_jobs_lease_owner(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let out = ok_run(
        &["events"],
        &env(
            &pool,
            &stripe.uri(),
            &[("HOSTNAME", "reconciler-pod-events")],
        ),
    )
    .await;
    let owners: Vec<String> = log_lines(&out)
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.ends_with("lease taken"))
        })
        .filter_map(|l| l["owner"].as_str().map(str::to_owned))
        .collect();
    assert!(!owners.is_empty(), "{}", stderr(&out));
    for owner in &owners {
        assert!(owner.starts_with("reconciler-pod-events:"), "{owners:?}");
    }
}

/// `NO_COLOR` through `run` on a terminal (`script` from util-linux gives
/// the binary a pseudo-terminal): pretty logs carry colour codes there, and
/// none with `NO_COLOR` set (`ops::pretty_logs_carry_no_colour_codes_when_stderr_is_not_a_terminal`
/// covers a pipe).
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn no_color_turns_the_colour_off_on_a_terminal(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let on_a_terminal = |extra: &[(&'static str, &str)]| {
        let mut vars = env(&pool, &stripe.uri(), &[("RECONCILER_LOG_FORMAT", "pretty")]);
        vars.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let mut cmd = std::process::Command::new("script");
        cmd.args([
            "-qec",
            &format!("exec {} run", env!("CARGO_BIN_EXE_stripe-reconciler")),
            "/dev/null",
        ])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())));
        cmd
    };
    let output = |mut cmd: std::process::Command| async move {
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let coloured = output(on_a_terminal(&[])).await;
    assert!(coloured.contains("lease taken"), "{coloured}");
    assert!(
        coloured.contains("\u{1b}["),
        "colour on a terminal: {coloured:?}"
    );
    let plain = output(on_a_terminal(&[("NO_COLOR", "1")])).await;
    assert!(plain.contains("lease taken"), "{plain}");
    assert!(
        !plain.contains('\u{1b}'),
        "no colour with NO_COLOR: {plain:?}"
    );
}

/// A proxy in front of the shared fake Stripe that holds each retrieve
/// (`GET /v1/payment_intents/{id}`) until `hold_until` retrieves have been
/// open at once and 300 ms have passed (3 s at most), then passes it on,
/// and counts the most retrieves open at once; every other request is
/// passed on at once. Plain HTTP/1.1 with keep-alive over tokio, as
/// reqwest speaks it; the fake's answer (status, body) is relayed as is.
mod holding {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    #[derive(Default)]
    struct Counts {
        open: AtomicUsize,
        most: AtomicUsize,
        retrieves: AtomicUsize,
    }

    /// The proxy; [`HoldingProxy::uri`] is the `STRIPE_API_BASE` to give.
    pub struct HoldingProxy {
        addr: std::net::SocketAddr,
        counts: Arc<Counts>,
    }

    impl HoldingProxy {
        pub async fn start(hold_until: usize, upstream: String) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let counts = Arc::new(Counts::default());
            let c = counts.clone();
            let client = reqwest::Client::new();
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let hop = (client.clone(), upstream.clone());
                    tokio::spawn(serve(stream, c.clone(), hold_until, hop));
                }
            });
            HoldingProxy { addr, counts }
        }

        pub fn uri(&self) -> String {
            format!("http://{}", self.addr)
        }

        /// The most retrieves open at once.
        pub fn most_open(&self) -> usize {
            self.counts.most.load(Ordering::SeqCst)
        }

        /// Retrieves received.
        pub fn retrieves(&self) -> usize {
            self.counts.retrieves.load(Ordering::SeqCst)
        }
    }

    /// One connection: request after request (no request body: GETs).
    async fn serve(
        mut stream: TcpStream,
        counts: Arc<Counts>,
        hold_until: usize,
        (client, upstream): (reqwest::Client, String),
    ) {
        let mut buf = Vec::new();
        loop {
            let head_end = loop {
                if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break p + 4;
                }
                let mut chunk = [0u8; 4096];
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
            buf.drain(..head_end);
            let mut lines = head.lines();
            let target = lines
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .unwrap_or_default()
                .to_owned();
            let path = target.split('?').next().unwrap_or_default();
            let retrieve = path.starts_with("/v1/payment_intents/pi_");
            if retrieve {
                counts.retrieves.fetch_add(1, Ordering::SeqCst);
                let open = counts.open.fetch_add(1, Ordering::SeqCst) + 1;
                counts.most.fetch_max(open, Ordering::SeqCst);
                let arrived = Instant::now();
                while arrived.elapsed() < Duration::from_secs(3)
                    && (arrived.elapsed() < Duration::from_millis(300)
                        || counts.most.load(Ordering::SeqCst) < hold_until)
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            let mut request = client.get(format!("{upstream}{target}"));
            for line in lines {
                if let Some((name, value)) = line.split_once(':') {
                    let name = name.trim().to_ascii_lowercase();
                    if name == "authorization" || name == "stripe-account" {
                        request = request.header(name, value.trim());
                    }
                }
            }
            let (status, body) = match request.send().await {
                Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
                Err(_) => (502, String::new()),
            };
            // Closed before the answer is written: the client may send the
            // next request as soon as it has this one's answer.
            if retrieve {
                counts.open.fetch_sub(1, Ordering::SeqCst);
            }
            let answer = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nRequest-Id: req_holding\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            if stream.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}
