//! `stripe-reconciler events` end to end on a real PostgreSQL, with Stripe's
//! `/v1/events` and `/v1/payment_intents/{id}` faked by wiremock.

use super::events_held::held;
use crate::support::arrange;
use crate::support::stripe_fake::{event, StripeFake};
use crate::support::*;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use stripe_reconciler::events::{EventsError, EventsJob, EventsSummary};
use stripe_reconciler::scan::RunError;
use stripe_reconciler::store::events_position;
use wiremock::MockServer;

const JOB: &str = "payments-vs-stripe-events";

/// Retrieves of `pi` the server received.
pub(super) async fn retrieves(server: &MockServer, pi: &str) -> usize {
    let p = format!("/v1/payment_intents/{pi}");
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path() == p)
        .count()
}

pub(super) async fn events_once(
    pool: &PgPool,
    stripe: &MockServer,
    s: &Settings,
) -> (EventsSummary, Result<(), EventsError>) {
    run_job(pool, &gateway(stripe), s, EventsJob).await
}

pub(super) async fn covered_until(pool: &PgPool) -> Option<DateTime<Utc>> {
    let mut conn = pool.acquire().await.unwrap();
    events_position::read(&mut conn, JOB)
        .await
        .unwrap()
        .and_then(|p| p.covered_until)
}

#[derive(Debug, PartialEq, Eq, sqlx::FromRow)]
pub(super) struct Finding {
    pub(super) payment_id: Option<i64>,
    pub(super) stripe_payment_intent_id: Option<String>,
    pub(super) kind: String,
    pub(super) open: bool,
}

pub(super) async fn all_findings(pool: &PgPool) -> Vec<Finding> {
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
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    let success = arrange::payment("pi_MissedSuccess")
        .local("pending")
        .insert(&pool, &stripe)
        .await
        .id;
    let cancel = arrange::payment("pi_MissedCancel")
        .local("pending")
        .stripe("canceled")
        .insert(&pool, &stripe)
        .await
        .id;
    let refunded = arrange::payment("pi_Refunded")
        .refunded(500)
        .insert(&pool, &stripe)
        .await
        .id;
    feed.push(event("evt_1", "pi_MissedSuccess", "succeeded", 120));
    feed.push(event("evt_2", "pi_MissedCancel", "canceled", 100));
    feed.push(event("evt_3", "pi_Refunded", "succeeded", 90));

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
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    arrange::payment("pi_Busy")
        .local("pending")
        .insert(&pool, &stripe)
        .await;
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
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    let fresh = arrange::payment("pi_Fresh")
        .local("pending")
        .updated_secs_ago(20)
        .insert(&pool, &stripe)
        .await
        .id;
    feed.push(event("evt_1", "pi_Fresh", "succeeded", 10));

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

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_crash_before_the_commit_reprocesses_the_same_window_without_duplicates(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    arrange::payment("pi_MissedSuccess")
        .local("pending")
        .insert(&pool, &stripe)
        .await;
    feed.push(event("evt_1", "pi_MissedSuccess", "succeeded", 300));
    // Out of the grace window: a younger orphan might still get its row.
    feed.push(event("evt_2", "pi_Orphan", "succeeded", 900));
    stripe.add_object(None, payment_intent("pi_Orphan", "succeeded"));
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
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    for (pi, status) in [("pi_Old", "succeeded"), ("pi_New", "canceled")] {
        arrange::payment(pi)
            .local("pending")
            .stripe(status)
            .insert(&pool, &stripe)
            .await;
    }
    feed.push(event("evt_1", "pi_Old", "succeeded", 600));
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
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
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
    let stripe = StripeFake::start().await;
    let _feed = stripe.feed();
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
    let stripe = StripeFake::start().await;
    let feed = stripe.feed();
    let mut first = 0;
    for i in 0..40 {
        let pi = format!("pi_Race{i}");
        let id = insert_payment(&pool, &pi, "pending", 3600).await;
        let status = if i % 10 == 0 { "canceled" } else { "succeeded" };
        stripe.add_object(None, payment_intent(&pi, status));
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
        scan_with(&pool, &gw, &s),
        run_job(&pool, &gw, &s, EventsJob),
    )
    .await;
    scan.unwrap();
    events.unwrap();
    // And again, both seeing the open findings (neither has a row to write
    // now, so there is no write to meet at).
    let (scan, (_, events)) =
        tokio::join!(scan_with(&pool, &gw, &s), events_once(&pool, &stripe, &s));
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
