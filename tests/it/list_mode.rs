//! RECONCILER_READ_MODE=list on real PostgreSQL against a wiremock Stripe
//! account that serves both the list and the retrieve endpoint: the same
//! rows, findings and outbox as retrieve mode, fewer requests, and every
//! row a page did not contain read on its own.

use crate::support::stripe_fake::{StripeFake, EVENTS, LIST, RETRIEVE};
use crate::support::*;
use serde_json::{json, Value};
use sqlx::PgPool;
use stripe_reconciler::config::{ReadMode, Settings, Sizing};
use stripe_reconciler::reconcile::Verdict;
use stripe_reconciler::scan::ScanJob;

/// An hour ago, as Stripe's `created` (Unix seconds).
pub(super) fn an_hour_ago() -> i64 {
    chrono::Utc::now().timestamp() - 3600
}

pub(super) fn list_settings(batch_size: u32) -> Settings {
    Settings {
        scan: ScanSettings {
            read_mode: ReadMode::List,
            ..settings(batch_size).scan
        },
        ..settings(batch_size)
    }
}

type Snapshot = (
    Vec<(i64, Option<String>, Option<String>, bool)>,
    Vec<FindingRow>,
    Vec<OutboxRow>,
    Vec<(i64, String, Option<Value>)>,
);

/// What a user compares: payments, findings (with their details, minus the
/// clock-dependent age) and the outbox.
async fn snapshot(pool: &PgPool) -> Snapshot {
    let payments = sqlx::query_as(
        "SELECT p.id, p.status, s.observed_external_status,
                coalesce(s.last_reconciled_at IS NOT NULL, false)
           FROM payments p LEFT JOIN reconciliation_payment_state s ON s.payment_id = p.id ORDER BY p.id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let details = sqlx::query_as(
        "SELECT payment_id, kind, details - 'age_seconds' FROM reconciliation_findings
          ORDER BY payment_id, id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    (payments, findings(pool).await, outbox(pool).await, details)
}

/// Runs the job to the end of the table in `mode`; returns the snapshot and
/// the requests per endpoint.
async fn run_in(
    pool: &PgPool,
    account: &StripeFake,
    server: &wiremock::MockServer,
    mode: ReadMode,
    batch_size: u32,
) -> (Snapshot, usize, usize) {
    forget_scan_state(pool).await;
    let (lists, retrieves) = (account.count(LIST), account.count(RETRIEVE));
    let s = Settings {
        scan: ScanSettings {
            read_mode: mode,
            batches_per_run: Sizing::Fixed(100),
            ..settings(batch_size).scan
        },
        ..settings(batch_size)
    };
    let (summary, result) = run_job(pool, &gateway(server), &s, ScanJob::default()).await;
    result.unwrap();
    assert!(summary.wrapped, "{summary:?}");
    assert_eq!(
        summary.stripe_requests.list as usize,
        account.count(LIST) - lists
    );
    (
        snapshot(pool).await,
        account.count(LIST) - lists,
        account.count(RETRIEVE) - retrieves,
    )
}

async fn assert_modes_agree(pool: &PgPool, account: &StripeFake, batch_size: u32) {
    let (by_retrieve, lists, _) =
        run_in(pool, account, account, ReadMode::Retrieve, batch_size).await;
    assert_eq!(lists, 0);
    let (by_list, lists, retrieves) =
        run_in(pool, account, account, ReadMode::List, batch_size).await;
    assert!(lists > 0);
    assert!(!by_retrieve.1.is_empty(), "the data set has findings");
    assert_eq!(by_list.0, by_retrieve.0, "payments differ");
    assert_eq!(by_list.1, by_retrieve.1, "findings differ");
    assert_eq!(by_list.2, by_retrieve.2, "outbox differs");
    assert_eq!(by_list.3, by_retrieve.3, "finding details differ");
    let rows = by_list.0.len();
    assert!(
        lists + retrieves < rows,
        "list mode spent {lists} pages and {retrieves} retrieves on {rows} rows"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn list_and_retrieve_modes_write_the_same_rows_on_the_verdict_paths(pool: PgPool) {
    let account = StripeFake::start().await;
    let t0 = an_hour_ago() - 86_400;
    let cases: &[(&str, &str)] = &[
        ("paid", "succeeded"),
        ("failed", "canceled"),
        ("failed", "requires_payment_method"),
        ("pending", "requires_payment_method"),
        ("pending", "processing"),
        ("pending", "requires_action"),
        ("pending", "succeeded"),
        ("pending", "canceled"),
        ("paid", "requires_payment_method"),
        ("failed", "succeeded"),
        ("paid", "processing"),
    ];
    let mut n = 0;
    for round in 0..12 {
        for (local, remote) in cases {
            n += 1;
            let pi = format!("pi_Path{n:04}");
            let created = t0 + n * 30;
            insert_at(&pool, &pi, local, created).await;
            // PaymentIntents created a few seconds before or after the row.
            account.add(None, &pi, remote, created + (n % 5) - 2);
        }
        let _ = round;
    }
    // Missing at Stripe, a hostile id, and one in the grace window.
    insert_at(&pool, "pi_Deleted1", "paid", t0 + 45).await;
    account.add(None, "pi_Deleted1", "succeeded", t0 + 45);
    account.delete("pi_Deleted1");
    insert_at(&pool, "pi_1/../../v1/customers", "pending", t0 + 50).await;
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at)
         VALUES ('fresh', 'pi_Fresh', 'pending', to_timestamp($1))",
    )
    .bind((t0 + 60) as f64)
    .execute(&pool)
    .await
    .unwrap();
    account.add(None, "pi_Fresh", "succeeded", t0 + 60);

    assert_modes_agree(&pool, &account, 50).await;
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn list_and_retrieve_modes_write_the_same_rows_for_every_drift_kind(pool: PgPool) {
    let account = StripeFake::start().await;
    let t0 = an_hour_ago() - 3 * 86_400;
    let charge = |refunded: i64, disputed: bool| {
        json!({"id": "ch_1", "object": "charge", "amount": 2000, "amount_refunded": refunded,
               "disputed": disputed, "refunded": refunded >= 2000, "currency": "usd"})
    };
    for i in 0..200i64 {
        let pi = format!("pi_Drift{i:04}");
        let created = t0 + i * 60;
        let mut object = payment_intent(&pi, "succeeded");
        object["created"] = json!(created + 1);
        object["amount"] = json!(2000);
        object["latest_charge"] = charge(0, false);
        let local = match i % 10 {
            0 => {
                object["latest_charge"] = charge(2000, false);
                "pending"
            }
            1 => {
                object["latest_charge"] = charge(500, false);
                "paid"
            }
            2 => {
                object["latest_charge"] = charge(0, true);
                "paid"
            }
            3 => {
                // Stuck in processing for 20 days (created long before the row).
                object["status"] = json!("processing");
                object["created"] = json!(created - 20 * 86_400);
                "pending"
            }
            4 => {
                // An authorisation six days old.
                object["status"] = json!("requires_capture");
                object["created"] = json!(created - 6 * 86_400);
                "pending"
            }
            5 => "pending",
            _ => "paid",
        };
        insert_at(&pool, &pi, local, created).await;
        account.add_object(None, object);
    }
    // Two rows holding one PaymentIntent (a table without the UNIQUE constraint).
    sqlx::query("ALTER TABLE payments DROP CONSTRAINT payments_stripe_payment_intent_id_key")
        .execute(&pool)
        .await
        .unwrap();
    insert_at(&pool, "pi_Drift0007", "pending", t0 + 7 * 60 + 5).await;
    // A row whose PaymentIntent is gone.
    insert_at(&pool, "pi_DriftGone", "paid", t0 + 30).await;

    assert_modes_agree(&pool, &account, 100).await;
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn pages_follow_has_more_with_starting_after(pool: PgPool) {
    let account = StripeFake::start().await;
    let t = an_hour_ago();
    // 250 PaymentIntents created in the same second: one window, three pages.
    for i in 0..250 {
        let pi = format!("pi_Same{i:04}");
        insert_at(&pool, &pi, "paid", t).await;
        account.add(None, &pi, "succeeded", t);
    }

    let report = scan(&pool, &account, &list_settings(300)).await;

    assert_eq!(report.verdicts.get(Verdict::InSync), 250);
    let lists: Vec<_> = account
        .seen()
        .into_iter()
        .filter(|s| s.endpoint == LIST)
        .collect();
    assert_eq!(lists.len(), 3, "{lists:?}");
    assert_eq!(account.count(RETRIEVE), 0);
    assert_eq!(lists[0].id, None);
    // Newest first, ties by id descending: page 1 ends at pi_Same0150.
    assert_eq!(lists[1].id.as_deref(), Some("pi_Same0150"));
    assert_eq!(lists[2].id.as_deref(), Some("pi_Same0050"));
    assert!(lists
        .iter()
        .all(|l| l.expand == ["data.latest_charge"] && l.gte <= Some(t) && l.lte >= Some(t)));
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_row_whose_payment_intent_was_created_outside_the_window_is_retrieved(pool: PgPool) {
    let account = StripeFake::start().await;
    let t = an_hour_ago() - 86_400;
    for i in 0..30 {
        let pi = format!("pi_Near{i:03}");
        insert_at(&pool, &pi, "paid", t + i * 10).await;
        account.add(None, &pi, "succeeded", t + i * 10);
    }
    // Created ten days before its row (a PaymentIntent reused for a new order).
    let far = insert_at(&pool, "pi_FarAway", "pending", t + 100).await;
    account.add(None, "pi_FarAway", "succeeded", t - 10 * 86_400);

    let report = scan(&pool, &account, &list_settings(100)).await;

    assert_eq!(report.verdicts.get(Verdict::InSync), 30);
    assert_eq!(report.verdicts.get(Verdict::Repairable), 1);
    assert_eq!(account.retrieved(), ["pi_FarAway"]);
    assert_eq!(verified(&pool, far).await, (Some("succeeded".into()), true));
    assert_eq!(outbox(&pool).await.len(), 1);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_window_crowded_with_foreign_payment_intents_stops_at_the_page_cap(pool: PgPool) {
    let account = StripeFake::start().await;
    let t = an_hour_ago();
    for i in 0..20 {
        let pi = format!("pi_Ours{i:03}");
        insert_at(&pool, &pi, "paid", t - 20 + i).await;
        account.add(None, &pi, "succeeded", t - 20 + i);
    }
    // Another application's 3,000 PaymentIntents in the same 20 seconds.
    for i in 0..3000 {
        account.add(
            None,
            &format!("pi_Other{i:05}"),
            "succeeded",
            t - 20 + i % 20,
        );
    }
    let s = Settings {
        scan: ScanSettings {
            list_max_pages: Sizing::Fixed(4),
            ..list_settings(100).scan
        },
        ..list_settings(100)
    };

    let report = scan(&pool, &account, &s).await;

    assert_eq!(report.verdicts.get(Verdict::InSync), 20);
    assert_eq!(account.count(LIST), 4, "the page cap");
    // Every row not on those pages had its own read; none read twice.
    let retrieved = account.retrieved();
    assert!(retrieved.len() <= 20);
    let mut unique = retrieved.clone();
    unique.dedup();
    assert_eq!(unique.len(), retrieved.len());
    assert!(account.count(LIST) + retrieved.len() <= 20 + 4);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_500_and_a_429_in_the_middle_of_paging(pool: PgPool) {
    let account = StripeFake::start().await;
    let t = an_hour_ago();
    for i in 0..250 {
        let pi = format!("pi_Busy{i:04}");
        insert_at(&pool, &pi, "pending", t).await;
        account.add(None, &pi, "succeeded", t);
    }
    // Page 2 answers 500 once (retried), page 3 a 429 rate limit on every
    // attempt (the retry budget is 3): the rows of page 3 are read one by one.
    account.fail_list(1, err(500, "api_error", ""));
    for skip in [1, 0, 0] {
        account.fail_list(skip, err(429, "invalid_request_error", "rate_limit"));
    }

    let report = scan(&pool, &account, &list_settings(300)).await;

    assert_eq!(report.verdicts.get(Verdict::Repairable), 250);
    assert_eq!(report.verdicts.get(Verdict::Unverifiable), 0);
    assert_eq!(account.count(LIST), 6);
    assert_eq!(account.count(RETRIEVE), 50, "the rows of the failed page");
    assert_eq!(outbox(&pool).await.len(), 250);
    assert_eq!(
        cursor(&pool, "payments-vs-stripe").await,
        0,
        "the table's last rows were read: the cycle ended and the cursor is back at 0"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_empty_window_reads_every_row_on_its_own(pool: PgPool) {
    let account = StripeFake::start().await;
    let t = an_hour_ago() - 7 * 86_400;
    for i in 0..10 {
        let pi = format!("pi_Moved{i:03}");
        insert_at(&pool, &pi, "paid", t + i).await;
        // Every PaymentIntent was created a month before its row.
        account.add(None, &pi, "succeeded", t - 30 * 86_400);
    }

    let report = scan(&pool, &account, &list_settings(100)).await;

    assert_eq!(report.verdicts.get(Verdict::InSync), 10);
    // The window and its two slack rings, each one empty page.
    assert_eq!(account.count(LIST), 3);
    assert_eq!(account.count(RETRIEVE), 10);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_deleted_payment_intent_is_missing_only_through_its_own_404(pool: PgPool) {
    let account = StripeFake::start().await;
    let t = an_hour_ago();
    for i in 0..40 {
        let pi = format!("pi_Here{i:03}");
        insert_at(&pool, &pi, "paid", t - 100 + i).await;
        account.add(None, &pi, "succeeded", t - 100 + i);
    }
    let gone = insert_at(&pool, "pi_Gone", "paid", t - 80).await;
    account.add(None, "pi_Gone", "succeeded", t - 80);
    account.delete("pi_Gone");

    let report = scan(&pool, &account, &list_settings(100)).await;

    assert_eq!(report.verdicts.get(Verdict::InSync), 40);
    assert_eq!(report.verdicts.get(Verdict::NeedsReview), 1);
    assert_eq!(
        account.retrieved(),
        ["pi_Gone"],
        "only the absent row is read alone"
    );
    let f = findings(&pool).await;
    assert_eq!(f.len(), 1);
    assert_eq!(
        (f[0].payment_id, f[0].kind.as_str()),
        (gone, "missing_externally")
    );
}

/// The fallback through the real binary in its default read mode: Stripe's
/// list endpoint fails (a 500 on every attempt) while retrieves answer; the
/// run still verifies every row, one retrieve each, says so in its log, and
/// counts the failed pages' requests and the retrieves in its summary.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_failing_list_endpoint_falls_back_to_one_retrieve_per_row_in_the_binary(pool: PgPool) {
    insert_paid(&pool, 6).await;
    sqlx::query("UPDATE payments SET status = 'pending' WHERE id = 2")
        .execute(&pool)
        .await
        .unwrap();
    let stripe = stripe_mirroring(&pool, "succeeded", std::time::Duration::ZERO).await;
    stripe.answer_on(None, LIST, err(500, "api_error", ""));
    let env = [
        ("DATABASE_URL", database_url(&pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "1".to_owned()),
    ];

    let out = reconciler_output(&["run"], &env).await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let summary: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(summary["rows_scanned"], 6, "{summary}");
    assert_eq!(summary["verdicts"]["in_sync"], 5, "{summary}");
    assert_eq!(summary["verdicts"]["repairable"], 1, "{summary}");
    assert_eq!(summary["verdicts"]["unverifiable"], 0, "{summary}");
    assert_eq!(summary["stripe_requests"]["retrieve"], 6, "{summary}");
    assert!(
        all_output(&out).contains("list page failed"),
        "{}",
        all_output(&out)
    );
    // The fake saw the same: failed list pages, then each row retrieved.
    assert!(stripe.failed_list_pages() >= 1, "{:#?}", stripe.seen());
    assert_eq!(
        summary["stripe_requests"]["list"],
        stripe.count(LIST),
        "{summary}"
    );
    let mut retrieved = stripe.retrieved();
    retrieved.sort();
    assert_eq!(retrieved, ["pi_1", "pi_2", "pi_3", "pi_4", "pi_5", "pi_6"]);
    assert_eq!(findings(&pool).await.len(), 1);
}

/// The shared fake fails a test whose list page failed unasked (here: a
/// `starting_after` Stripe does not know, a 400), so no test passes by
/// quietly falling back to retrieves.
#[tokio::test]
#[should_panic(expected = "list page(s) failed that the test did not make fail")]
async fn the_shared_fake_fails_a_test_whose_list_page_failed_unasked() {
    let stripe = StripeFake::start().await;
    let answer = reqwest::Client::new()
        .get(format!(
            "{}/v1/payment_intents?limit=100&starting_after=pi_Unknown",
            stripe.uri()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 400);
    assert_eq!(stripe.failed_list_pages(), 1);
    drop(stripe);
}

/// `GET` `path` on the fake, as `account` (`Stripe-Account`); the status.
async fn get_status(stripe: &StripeFake, path: &str, account: Option<&str>) -> u16 {
    let mut req = reqwest::Client::new().get(format!("{}{path}", stripe.uri()));
    if let Some(a) = account {
        req = req.header("Stripe-Account", a);
    }
    req.send().await.unwrap().status().as_u16()
}

/// The guard covers the Checkout Session list too: a `limit` Stripe refuses
/// (0, outside 1..=100) is a failed page nobody asked for.
#[tokio::test]
#[should_panic(expected = "list page(s) failed that the test did not make fail")]
async fn the_guard_fails_a_test_whose_session_list_page_failed_unasked() {
    let stripe = StripeFake::start().await;
    assert_eq!(
        get_status(&stripe, "/v1/checkout/sessions?limit=0", None).await,
        400
    );
    drop(stripe);
}

/// The guard covers the subscriptions list too (`limit=0` is a 400 at
/// Stripe): a subscriptions run whose window page failed unasked would
/// otherwise pass by reading each row on its own.
#[tokio::test]
#[should_panic(expected = "list page(s) failed that the test did not make fail")]
async fn the_guard_fails_a_test_whose_subscription_list_page_failed_unasked() {
    let stripe = StripeFake::start().await;
    assert_eq!(
        get_status(&stripe, "/v1/subscriptions?limit=0", None).await,
        400
    );
    drop(stripe);
}

/// The guard covers the events feed too (`limit=101` is a 400 at Stripe).
#[tokio::test]
#[should_panic(expected = "list page(s) failed that the test did not make fail")]
async fn the_guard_fails_a_test_whose_events_page_failed_unasked() {
    let stripe = StripeFake::start().await;
    assert_eq!(get_status(&stripe, "/v1/events?limit=101", None).await, 400);
    drop(stripe);
}

/// `refuse` excuses the refused account's pages only: another account's
/// failed page still fails the test.
#[tokio::test]
#[should_panic(expected = "list page(s) failed that the test did not make fail")]
async fn refusing_one_account_does_not_excuse_another_accounts_failed_page() {
    let stripe = StripeFake::start().await;
    stripe.refuse("acct_Revoked");
    let page = "/v1/payment_intents?limit=100";
    assert_eq!(get_status(&stripe, page, Some("acct_Revoked")).await, 403);
    let unknown = "/v1/payment_intents?limit=100&starting_after=pi_Unknown";
    assert_eq!(get_status(&stripe, unknown, Some("acct_Other")).await, 400);
    drop(stripe);
}

/// The pages a test made fail itself pass the guard, on every list
/// endpoint; the fake answers Stripe's limit bounds (1 to 100) and pages
/// with `has_more` and `starting_after`.
#[tokio::test]
async fn faults_the_test_arranged_pass_the_guard_and_limits_are_stripes() {
    let stripe = StripeFake::start().await;
    stripe.refuse("acct_Revoked");
    for p in ["/v1/payment_intents", "/v1/checkout/sessions", "/v1/events"] {
        assert_eq!(
            get_status(&stripe, p, Some("acct_Revoked")).await,
            403,
            "{p}"
        );
    }
    stripe.fail_list(0, err(500, "api_error", ""));
    stripe.answer_on(None, EVENTS, err(500, "api_error", ""));
    assert_eq!(get_status(&stripe, "/v1/payment_intents", None).await, 500);
    assert_eq!(get_status(&stripe, "/v1/events", None).await, 500);
    let t = an_hour_ago();
    for i in 0..3 {
        stripe.add(None, &format!("pi_Page{i}"), "succeeded", t + i);
    }
    let first: Value = reqwest::get(format!("{}/v1/payment_intents?limit=2", stripe.uri()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(first["has_more"], true, "{first}");
    assert_eq!(first["data"][1]["id"], "pi_Page1", "newest first");
    let url = |q: &str| format!("/v1/payment_intents?{q}");
    assert_eq!(get_status(&stripe, &url("limit=100"), None).await, 200);
    assert_eq!(
        get_status(&stripe, &url("limit=1&starting_after=pi_Page1"), None).await,
        200
    );
    // Stripe's bounds: these fail, and this test did not ask for them.
    stripe.allow_failed_list_pages();
    for q in ["limit=0", "limit=101", "limit=-1"] {
        assert_eq!(get_status(&stripe, &url(q), None).await, 400, "{q}");
    }
    assert_eq!(stripe.failed_list_pages(), 5);
}
