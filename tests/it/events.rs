//! `stripe-reconciler events` end to end on a real PostgreSQL, with Stripe's
//! `/v1/events` and `/v1/payment_intents/{id}` faked by wiremock.

use crate::support::events_feed::*;
use crate::support::*;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::PgPool;
use stripe_reconciler::events::{run_events, EventsError, EventsSummary};
use stripe_reconciler::scan::{run_batch, Mode, RunError};
use stripe_reconciler::store::events_position;
use tokio_util::sync::CancellationToken;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const JOB: &str = "payments-vs-stripe-events";

/// Retrieves of `pi` the server received.
async fn retrieves(server: &MockServer, pi: &str) -> usize {
    let p = format!("/v1/payment_intents/{pi}");
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path() == p)
        .count()
}

async fn events_once(
    pool: &PgPool,
    stripe: &MockServer,
    s: &JobSettings,
) -> (EventsSummary, Result<(), EventsError>) {
    run_events(pool, &gateway(stripe), s, CancellationToken::new()).await
}

async fn covered_until(pool: &PgPool) -> Option<DateTime<Utc>> {
    let mut conn = pool.acquire().await.unwrap();
    events_position::read(&mut conn, JOB)
        .await
        .unwrap()
        .and_then(|p| p.covered_until)
}

#[derive(Debug, PartialEq, Eq, sqlx::FromRow)]
struct Finding {
    payment_id: Option<i64>,
    stripe_payment_intent_id: Option<String>,
    kind: String,
    open: bool,
}

async fn all_findings(pool: &PgPool) -> Vec<Finding> {
    sqlx::query_as(
        "SELECT payment_id, stripe_payment_intent_id, kind, resolved_at IS NULL AS open
           FROM reconciliation_findings ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn missed_success_missed_cancel_and_a_refund_are_found_through_events(pool: PgPool) {
    let feed = Feed::default();
    let stripe = stripe_with(&feed).await;
    let success = insert_payment(&pool, "pi_MissedSuccess", "pending", 3600).await;
    let cancel = insert_payment(&pool, "pi_MissedCancel", "pending", 3600).await;
    let refunded = insert_payment(&pool, "pi_Refunded", "paid", 3600).await;
    feed.push(event("evt_1", "pi_MissedSuccess", "succeeded", 120));
    feed.push(event("evt_2", "pi_MissedCancel", "canceled", 100));
    feed.push(event("evt_3", "pi_Refunded", "succeeded", 90));
    mount(
        &stripe,
        "pi_MissedSuccess",
        ok("pi_MissedSuccess", "succeeded"),
    )
    .await;
    mount(
        &stripe,
        "pi_MissedCancel",
        ok("pi_MissedCancel", "canceled"),
    )
    .await;
    let mut pi = payment_intent("pi_Refunded", "succeeded");
    pi["latest_charge"] = json!({"id": "ch_1", "object": "charge", "amount": 1099,
        "amount_refunded": 500, "refunded": false, "disputed": false, "currency": "usd"});
    mount(
        &stripe,
        "pi_Refunded",
        ResponseTemplate::new(200).set_body_json(pi),
    )
    .await;

    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();

    assert_eq!(
        (summary.events_read, summary.payment_intents_retrieved),
        (3, 3)
    );
    let kinds: Vec<(Option<i64>, String)> = all_findings(&pool)
        .await
        .into_iter()
        .map(|f| (f.payment_id, f.kind))
        .collect();
    assert!(
        kinds.contains(&(Some(success), "missed_success".into())),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(Some(cancel), "missed_cancel".into())),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(Some(refunded), "refunded".into())),
        "{kinds:?}"
    );
    assert_eq!(kinds.len(), 3);
    let commands: Vec<String> = outbox(&pool)
        .await
        .into_iter()
        .map(|o| o.event_type)
        .collect();
    assert_eq!(commands, ["ApplyPaymentSucceeded", "ApplyPaymentCanceled"]);
    assert_eq!(
        verified(&pool, success).await,
        (Some("succeeded".into()), true)
    );
    assert_eq!(
        verified(&pool, cancel).await,
        (Some("canceled".into()), true)
    );
    assert!(
        covered_until(&pool).await.is_some(),
        "the position moved after the commit"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_payment_intent_named_by_five_events_is_read_once(pool: PgPool) {
    let feed = Feed::default();
    let stripe = stripe_with(&feed).await;
    insert_payment(&pool, "pi_Busy", "pending", 3600).await;
    for (i, status) in [
        "requires_action",
        "processing",
        "requires_action",
        "processing",
        "succeeded",
    ]
    .iter()
    .enumerate()
    {
        feed.push(event(
            &format!("evt_{i}"),
            "pi_Busy",
            status,
            500 - i as i64 * 10,
        ));
    }
    mount(&stripe, "pi_Busy", ok("pi_Busy", "succeeded")).await;

    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();

    assert_eq!((summary.events_read, summary.payment_intents), (5, 1));
    assert_eq!(retrieves(&stripe, "pi_Busy").await, 1);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        1
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_event_about_a_row_updated_within_the_grace_window_is_skipped_and_read_again_later(
    pool: PgPool,
) {
    let feed = Feed::default();
    let stripe = stripe_with(&feed).await;
    let fresh = insert_payment(&pool, "pi_Fresh", "pending", 20).await;
    feed.push(event("evt_1", "pi_Fresh", "succeeded", 10));
    mount(&stripe, "pi_Fresh", ok("pi_Fresh", "succeeded")).await;

    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();

    assert_eq!(summary.rows_in_grace, 1);
    assert_eq!(
        retrieves(&stripe, "pi_Fresh").await,
        0,
        "no Stripe read for a row in grace"
    );
    assert!(all_findings(&pool).await.is_empty());
    assert_eq!(
        verified(&pool, fresh).await,
        (None, false),
        "no stamp either"
    );
    let event_created = DateTime::from_timestamp(Utc::now().timestamp() - 10, 0).unwrap();
    assert!(
        covered_until(&pool).await.unwrap() > event_created,
        "the position does not wait for one PaymentIntent"
    );
    assert_eq!(summary.payment_intents_held, 1);
    assert_eq!(
        held(&pool).await,
        [("pi_Fresh".to_owned(), "in_grace".to_owned(), 1)]
    );

    // Once out of the grace window, the next run reads it again, first.
    sqlx::query("UPDATE payments SET updated_at = now() - interval '1 hour'")
        .execute(&pool)
        .await
        .unwrap();
    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert_eq!(summary.retries_read, 1);
    assert_eq!(
        retrieves(&stripe, "pi_Fresh").await,
        1,
        "read once, though the window's overlap lists its event again"
    );
    assert_eq!(all_findings(&pool).await.len(), 1);
    assert!(held(&pool).await.is_empty(), "settled");
}

/// `(PaymentIntent, reason, attempts)` waiting for another events read.
async fn held(pool: &PgPool) -> Vec<(String, String, i32)> {
    sqlx::query_as(
        "SELECT stripe_payment_intent_id, reason, attempts
           FROM reconciliation_events_retry ORDER BY stripe_payment_intent_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_payment_intent_stripe_keeps_failing_for_waits_alone_while_the_position_moves_on(
    pool: PgPool,
) {
    let feed = Feed::default();
    let stripe = stripe_with(&feed).await;
    let mut payments = Vec::new();
    for i in 0..30 {
        let pi = format!("pi_Burst{i:02}");
        payments.push(insert_payment(&pool, &pi, "pending", 3600).await);
        feed.push(event(&format!("evt_{i}"), &pi, "succeeded", 300 - i));
        if i != 7 {
            mount(&stripe, &pi, ok(&pi, "succeeded")).await;
        }
    }
    // Stripe answers 500 for one of them, every time, for now.
    let failing = Mock::given(method("GET"))
        .and(wiremock::matchers::path("/v1/payment_intents/pi_Burst07"))
        .respond_with(ResponseTemplate::new(500))
        .mount_as_scoped(&stripe)
        .await;

    let (first, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert_eq!(first.findings_created, 29, "every answered PaymentIntent");
    assert_eq!(
        held(&pool).await,
        [("pi_Burst07".to_owned(), "stripe_unanswered".to_owned(), 1)]
    );
    let newest = DateTime::from_timestamp(Utc::now().timestamp() - 271, 0).unwrap();
    assert!(
        covered_until(&pool).await.unwrap() >= newest,
        "the position passed the whole burst, the failing one's event included"
    );
    // `status` says what waits, and the lag is the position's, not the held event's.
    let s = settings(200);
    let mut conn = pool.acquire().await.unwrap();
    let st = stripe_reconciler::status::read(&mut conn, &s.job, &s.outbox, None)
        .await
        .unwrap();
    drop(conn);
    let ev = st.events.expect("the events job ran");
    assert_eq!(ev.payment_intents_held, 1);
    assert!(ev.lag_seconds.unwrap() < 60.0, "{:?}", ev.lag_seconds);
    assert!(ev.oldest_held_event_unix.is_some());

    // The next run reads only the held one again (still failing), not the burst.
    let before = stripe.received_requests().await.unwrap().len();
    let (second, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    let retrieves_now: Vec<String> = stripe.received_requests().await.unwrap()[before..]
        .iter()
        .filter(|r| r.url.path().starts_with("/v1/payment_intents/"))
        .map(|r| r.url.path().to_owned())
        .collect();
    assert!(
        retrieves_now
            .iter()
            .all(|p| p == "/v1/payment_intents/pi_Burst07"),
        "{retrieves_now:?}"
    );
    assert_eq!((second.retries_read, second.findings_created), (1, 0));
    assert_eq!(held(&pool).await[0].2, 2, "a second attempt");

    // Stripe answers again: the missed success is recorded, once, and settled.
    drop(failing);
    mount(&stripe, "pi_Burst07", ok("pi_Burst07", "succeeded")).await;
    let (third, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert_eq!(third.findings_created, 1);
    assert!(held(&pool).await.is_empty());
    let kinds: Vec<(Option<i64>, String)> = all_findings(&pool)
        .await
        .into_iter()
        .map(|f| (f.payment_id, f.kind))
        .collect();
    assert_eq!(kinds.len(), 30, "one finding per payment, none twice");
    assert!(kinds.contains(&(Some(payments[7]), "missed_success".into())));
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_held_payment_intent_older_than_grace_plus_an_hour_is_left_to_the_scan(pool: PgPool) {
    let feed = Feed::default();
    let stripe = stripe_with(&feed).await;
    insert_payment(&pool, "pi_Fresh", "pending", 20).await;
    feed.push(event("evt_1", "pi_Fresh", "succeeded", 10));
    events_once(&pool, &stripe, &settings(200)).await.1.unwrap();
    assert_eq!(held(&pool).await.len(), 1);

    // Its event is now older than grace (600 s) + 1 h, and out of the window.
    feed.clear();
    sqlx::query(
        "UPDATE reconciliation_events_retry SET event_created = now() - interval '2 hours'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert_eq!((summary.retries_expired, summary.retries_read), (1, 0));
    assert!(held(&pool).await.is_empty());
    assert_eq!(retrieves(&stripe, "pi_Fresh").await, 0);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_succeeded_payment_intent_without_a_row_is_missing_locally_once(pool: PgPool) {
    let feed = Feed::default();
    let stripe = stripe_with(&feed).await;
    feed.push(event("evt_1", "pi_Orphan", "succeeded", 900));
    feed.push(event("evt_2", "pi_NotMoney", "payment_failed", 900));
    let mut orphan = payment_intent("pi_Orphan", "succeeded");
    orphan["metadata"] = json!({"shop_order": "order-9"});
    mount(
        &stripe,
        "pi_Orphan",
        ResponseTemplate::new(200).set_body_json(orphan),
    )
    .await;

    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert_eq!(summary.missing_locally_created, 1);
    let f = all_findings(&pool).await;
    assert_eq!(
        f,
        [Finding {
            payment_id: None,
            stripe_payment_intent_id: Some("pi_Orphan".into()),
            kind: "missing_locally".into(),
            open: true
        }]
    );
    assert_eq!(retrieves(&stripe, "pi_NotMoney").await, 0);
    assert!(outbox(&pool).await.is_empty(), "never repaired");

    // Read again (the window overlaps): still one finding, no new read.
    sqlx::query("UPDATE reconciliation_events_position SET covered_until = covered_until - interval '1 hour'").execute(&pool).await.unwrap();
    events_once(&pool, &stripe, &settings(200)).await.1.unwrap();
    assert_eq!(all_findings(&pool).await.len(), 1);
    assert_eq!(retrieves(&stripe, "pi_Orphan").await, 1);

    // The review queue and the status keep working with a finding without a payment.
    let mut conn = pool.acquire().await.unwrap();
    let listed = stripe_reconciler::store::findings::list(&mut conn, None, true, 10)
        .await
        .unwrap();
    assert_eq!(
        listed[0].stripe_payment_intent_id.as_deref(),
        Some("pi_Orphan")
    );
    let st = stripe_reconciler::status::read(
        &mut conn,
        "payments-vs-stripe",
        &stripe_reconciler::config::OutboxSettings::default(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(st.open_findings.get("missing_locally"), Some(&1));
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn with_a_metadata_key_only_this_applications_payment_intents_are_orphans(pool: PgPool) {
    let feed = Feed::default();
    let stripe = stripe_with(&feed).await;
    let mut ours = event("evt_1", "pi_Ours", "succeeded", 900);
    ours["data"]["object"]["metadata"] = json!({"shop_order": "order-1"});
    let mut theirs = event("evt_2", "pi_Theirs", "succeeded", 900);
    theirs["data"]["object"]["metadata"] = json!({"crm_invoice": "inv-7"});
    feed.push(ours);
    feed.push(theirs);
    let mut pi = payment_intent("pi_Ours", "succeeded");
    pi["metadata"] = json!({"shop_order": "order-1"});
    mount(
        &stripe,
        "pi_Ours",
        ResponseTemplate::new(200).set_body_json(pi),
    )
    .await;
    let mut s = settings(200);
    s.events.orphan_metadata_key = Some("shop_order".into());

    let (summary, result) = events_once(&pool, &stripe, &s).await;
    result.unwrap();

    assert_eq!(
        (summary.missing_locally_created, summary.orphans_foreign),
        (1, 1)
    );
    let intents: Vec<Option<String>> = all_findings(&pool)
        .await
        .into_iter()
        .map(|f| f.stripe_payment_intent_id)
        .collect();
    assert_eq!(intents, [Some("pi_Ours".to_owned())]);
    assert_eq!(
        retrieves(&stripe, "pi_Theirs").await,
        0,
        "another application's money costs no read"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_crash_before_the_commit_reprocesses_the_same_window_without_duplicates(pool: PgPool) {
    let feed = Feed::default();
    let stripe = stripe_with(&feed).await;
    insert_payment(&pool, "pi_MissedSuccess", "pending", 3600).await;
    feed.push(event("evt_1", "pi_MissedSuccess", "succeeded", 300));
    // Out of the grace window: a younger orphan might still get its row.
    feed.push(event("evt_2", "pi_Orphan", "succeeded", 900));
    mount(
        &stripe,
        "pi_MissedSuccess",
        ok("pi_MissedSuccess", "succeeded"),
    )
    .await;
    mount(&stripe, "pi_Orphan", ok("pi_Orphan", "succeeded")).await;
    // The first run dies at its commit: moving the position fails.
    sqlx::raw_sql(
        "CREATE FUNCTION crash() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.covered_until IS DISTINCT FROM OLD.covered_until THEN RAISE EXCEPTION 'crash'; END IF; RETURN NEW; END $$;
         CREATE TRIGGER crash BEFORE UPDATE ON reconciliation_events_position FOR EACH ROW EXECUTE FUNCTION crash();",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (_, result) = events_once(&pool, &stripe, &settings(200)).await;
    assert!(
        matches!(result, Err(EventsError::Scan(RunError::Store(_)))),
        "{result:?}"
    );
    assert!(
        all_findings(&pool).await.is_empty(),
        "nothing of the crashed run is committed"
    );
    assert_eq!(
        covered_until(&pool).await,
        None,
        "the position did not move"
    );

    sqlx::raw_sql("DROP TRIGGER crash ON reconciliation_events_position")
        .execute(&pool)
        .await
        .unwrap();
    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();
    assert_eq!(summary.events_read, 2, "the same window is read again");
    events_once(&pool, &stripe, &settings(200)).await.1.unwrap();
    let kinds: Vec<String> = all_findings(&pool)
        .await
        .into_iter()
        .map(|f| f.kind)
        .collect();
    assert_eq!(kinds, ["missed_success", "missing_locally"]);
    assert_eq!(outbox(&pool).await.len(), 1);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_position_resumes_where_the_last_run_ended(pool: PgPool) {
    let feed = Feed::default();
    let stripe = stripe_with(&feed).await;
    insert_payment(&pool, "pi_Old", "pending", 3600).await;
    insert_payment(&pool, "pi_New", "pending", 3600).await;
    feed.push(event("evt_1", "pi_Old", "succeeded", 600));
    mount(&stripe, "pi_Old", ok("pi_Old", "succeeded")).await;
    mount(&stripe, "pi_New", ok("pi_New", "canceled")).await;
    let first_day = Utc::now().timestamp() - 86_400;
    events_once(&pool, &stripe, &settings(200)).await.1.unwrap();
    let position = covered_until(&pool).await.unwrap();

    feed.push(event("evt_2", "pi_New", "canceled", 1));
    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();

    let asked = feed.created_gte();
    assert!(
        (asked[0] - first_day).abs() <= 2,
        "first run looks back a day"
    );
    assert_eq!(
        asked[1],
        position.timestamp() - 60,
        "then from the position, with a minute of overlap"
    );
    assert_eq!(
        summary.events_read, 1,
        "the old event is not in the window any more"
    );
    assert_eq!(retrieves(&stripe, "pi_Old").await, 1);
    assert_eq!(retrieves(&stripe, "pi_New").await, 1);
    assert!(covered_until(&pool).await.unwrap() > position);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_position_older_than_thirty_days_is_a_gap_restarting_at_the_oldest_event(pool: PgPool) {
    let feed = Feed::default();
    let stripe = stripe_with(&feed).await;
    sqlx::query("INSERT INTO reconciliation_events_position (job, covered_until) VALUES ($1, now() - interval '40 days')")
        .bind(JOB)
        .execute(&pool)
        .await
        .unwrap();

    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();

    let gap = summary.gap_seconds.expect("a gap is reported");
    assert!((gap - (10.0 * 86_400.0 + 360.0)).abs() < 5.0, "{gap}");
    let oldest = Utc::now().timestamp() - 30 * 86_400 + 300;
    assert!((feed.created_gte()[0] - oldest).abs() <= 2);
    assert!(covered_until(&pool).await.unwrap() > Utc::now() - chrono::Duration::minutes(1));
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_second_events_run_exits_75_without_asking_stripe(pool: PgPool) {
    let feed = Feed::default();
    let stripe = stripe_with(&feed).await;
    let mut conn = pool.acquire().await.unwrap();
    assert!(
        events_position::acquire_lease(&mut conn, JOB, "other-pod:1:abcd", 600.0)
            .await
            .unwrap()
    );

    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;

    let e = result.unwrap_err();
    assert_eq!(e.exit_code(), 75, "{e}");
    assert_eq!(summary.outcome, "concurrent_run");
    assert_eq!(requests(&stripe).await, 0);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn events_and_the_scan_at_the_same_time_never_duplicate_a_finding_or_a_command(pool: PgPool) {
    let feed = Feed::default();
    let stripe = stripe_with(&feed).await;
    Mock::given(method("GET"))
        .and(wiremock::matchers::path_regex(
            "^/v1/payment_intents/pi_[A-Za-z0-9]+$",
        ))
        .respond_with(|req: &Request| {
            let id = req.url.path().rsplit('/').next().unwrap();
            let status = if id.ends_with('0') {
                "canceled"
            } else {
                "succeeded"
            };
            ok(id, status).set_delay(std::time::Duration::from_millis(fastrand::u64(0..20)))
        })
        .mount(&stripe)
        .await;
    let mut first = 0;
    for i in 0..40 {
        let pi = format!("pi_Race{i}");
        let id = insert_payment(&pool, &pi, "pending", 3600).await;
        if i == 0 {
            first = id;
        }
        feed.push(event(&format!("evt_{i}"), &pi, "succeeded", 200));
    }
    let s = settings(40);
    let gw = gateway(&stripe);
    // Both jobs are let through only once both wait to write the first payment.
    let (scan, (_, events)) = wait::both_writing_at_once(
        &pool,
        first,
        run_batch(&pool, &gw, &s, Mode::Write, None),
        run_events(&pool, &gw, &s, CancellationToken::new()),
    )
    .await;
    scan.unwrap();
    events.unwrap();
    // And again, both seeing the open findings (neither has a row to write
    // now, so there is no write to meet at).
    let (scan, (_, events)) = tokio::join!(
        run_batch(&pool, &gw, &s, Mode::Write, None),
        events_once(&pool, &stripe, &s)
    );
    scan.unwrap();
    events.unwrap();

    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        40
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM (SELECT DISTINCT payment_id, kind FROM reconciliation_findings) d").await, 40);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM outbox").await,
        40,
        "one command per finding"
    );
}

/// A Stripe event, `secs_ago` old, whose object is a charge, refund or
/// dispute (Stripe API reference shapes, trimmed to what names the money).
fn money_event(id: &str, event_type: &str, object: Value, secs_ago: i64) -> Value {
    json!({"id": id, "object": "event", "api_version": "2024-06-20",
           "created": Utc::now().timestamp() - secs_ago,
           "type": event_type, "data": {"object": object},
           "livemode": false, "pending_webhooks": 1,
           "request": {"id": null, "idempotency_key": null}})
}

/// A Refund object of `amount` on charge `charge`, naming `pi` (or null).
fn refund_object(charge: &str, pi: Value, amount: i64) -> Value {
    json!({"id": format!("re_{charge}"), "object": "refund", "amount": amount,
           "balance_transaction": "txn_1", "charge": charge, "created": Utc::now().timestamp(),
           "currency": "usd", "metadata": {}, "payment_intent": pi, "reason": null,
           "receipt_number": null, "source_transfer_reversal": null, "status": "succeeded",
           "transfer_reversal": null})
}

/// A PaymentIntent whose latest charge shows `amount_refunded` and `disputed`.
fn charged_intent(pi: &str, amount_refunded: i64, disputed: bool) -> ResponseTemplate {
    let mut body = payment_intent(pi, "succeeded");
    body["latest_charge"]["amount_refunded"] = json!(amount_refunded);
    body["latest_charge"]["refunded"] = json!(amount_refunded >= 1099);
    body["latest_charge"]["disputed"] = json!(disputed);
    ResponseTemplate::new(200).set_body_json(body)
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_refund_and_a_dispute_on_paid_orders_are_found_by_one_events_run(pool: PgPool) {
    let feed = Feed::default();
    let stripe = stripe_with(&feed).await;
    let refunded = insert_payment(&pool, "pi_Refunded", "paid", 3600).await;
    let disputed = insert_payment(&pool, "pi_Disputed", "paid", 3600).await;
    let mut charge = clean_charge("pi_Refunded");
    charge["amount_refunded"] = json!(1099);
    charge["refunded"] = json!(true);
    feed.push(event("evt_paid", "pi_Refunded", "succeeded", 300));
    feed.push(money_event("evt_refund", "charge.refunded", charge, 60));
    feed.push(money_event(
        "evt_refund_object",
        "refund.created",
        refund_object("ch_Refunded", json!("pi_Refunded"), 1099),
        60,
    ));
    feed.push(money_event(
        "evt_dispute",
        "charge.dispute.created",
        json!({"id": "dp_1", "object": "dispute", "amount": 1099, "charge": "ch_Disputed",
               "created": Utc::now().timestamp(), "currency": "usd", "evidence_details": {},
               "is_charge_refundable": false, "livemode": false, "metadata": {},
               "payment_intent": {"id": "pi_Disputed", "object": "payment_intent"},
               "reason": "fraudulent", "status": "needs_response"}),
        30,
    ));
    mount(
        &stripe,
        "pi_Refunded",
        charged_intent("pi_Refunded", 1099, false),
    )
    .await;
    mount(
        &stripe,
        "pi_Disputed",
        charged_intent("pi_Disputed", 0, true),
    )
    .await;

    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;
    result.unwrap();

    assert_eq!((summary.events_read, summary.payment_intents), (4, 2));
    assert_eq!(
        (
            retrieves(&stripe, "pi_Refunded").await,
            retrieves(&stripe, "pi_Disputed").await
        ),
        (1, 1),
        "each PaymentIntent is read once, however many events name it"
    );
    let open: Vec<(Option<i64>, String)> = all_findings(&pool)
        .await
        .into_iter()
        .filter(|f| f.open)
        .map(|f| (f.payment_id, f.kind))
        .collect();
    assert_eq!(
        open,
        [
            (Some(refunded), "refunded".to_owned()),
            (Some(disputed), "disputed".to_owned())
        ]
    );
    assert_eq!(summary.commands_enqueued, 0);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_refund_of_a_charge_without_a_payment_intent_is_counted_not_an_error(pool: PgPool) {
    let feed = Feed::default();
    let stripe = stripe_with(&feed).await;
    feed.push(money_event(
        "evt_legacy_refund",
        "refund.created",
        refund_object("ch_Legacy", Value::Null, 500),
        60,
    ));

    let (summary, result) = events_once(&pool, &stripe, &settings(200)).await;

    result.unwrap();
    assert_eq!(
        (
            summary.events_without_payment_intent,
            summary.events_read,
            summary.payment_intents_retrieved
        ),
        (1, 0, 0)
    );
    assert_eq!(summary.events_skipped, 0, "counted, not called unreadable");
    let mut metrics = stripe_reconciler::metrics::EventsMetrics::new().unwrap();
    metrics.observe_events(&summary, &gateway(&stripe).request_counts(), None, 0.0);
    let text = metrics.figures().encode().unwrap();
    assert!(
        text.lines()
            .any(|l| l == "stripe_reconciler_events_without_payment_intent 1"),
        "pushed: {text}"
    );
    assert!(all_findings(&pool).await.is_empty());
    assert!(
        covered_until(&pool).await.is_some(),
        "the position moves past it"
    );
}
