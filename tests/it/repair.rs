//! The canonical writer and the outbox worker, on a real PostgreSQL; a stuck
//! or unconfirmed repair command is closed by the scan that sees why.

use crate::support::stripe_fake::{self, StripeFake};
use crate::support::*;
use serde_json::json;
use sqlx::PgPool;
use stripe_reconciler::reconcile::RepairCommand;
use stripe_reconciler::repair::worker::MAX_ATTEMPTS;
use stripe_reconciler::repair::{drain, RepairOptions, RepairReport};
use tokio_util::sync::CancellationToken;

/// A finding of `kind` for the payment and its repair command, as a scan writes them.
pub(super) async fn enqueue_repair(
    pool: &PgPool,
    payment_id: i64,
    kind: &str,
    command: &str,
) -> i64 {
    let finding: i64 = sqlx::query_scalar(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status) VALUES ($1, $2, 'pending') RETURNING id",
    )
    .bind(payment_id)
    .bind(kind)
    .fetch_one(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('Payment', $1::text, $2, jsonb_build_object('payment_id', $1::bigint, 'finding_id', $3::bigint, 'expected_local_status', 'pending'))",
    )
    .bind(payment_id)
    .bind(command)
    .bind(finding)
    .execute(pool)
    .await
    .unwrap();
    finding
}

async fn resolution(pool: &PgPool, finding: i64) -> Option<String> {
    sqlx::query_scalar("SELECT resolution FROM reconciliation_findings WHERE id = $1")
        .bind(finding)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn events(pool: &PgPool) -> Vec<serde_json::Value> {
    sqlx::query_scalar(
        "SELECT payload FROM outbox WHERE event_type = 'PaymentStatusChanged' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn findings_from_a_scan_are_repaired_once(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let success = insert_payment(&pool, "pi_Success", "pending", 3600).await;
    let cancel = insert_payment(&pool, "pi_Cancel", "pending", 3600).await;
    stripe.set_status("pi_Success", "succeeded");
    stripe.set_status("pi_Cancel", "canceled");
    scan_with(&pool, &gateway(&stripe), &settings(200))
        .await
        .unwrap();

    let report = drain_all(&pool).await;

    assert_eq!(
        report,
        RepairReport {
            applied: 2,
            no_op: 0,
            skipped: 0,
            failed: 0,
            stuck: 0
        }
    );
    assert_eq!(status_of(&pool, success).await, ("paid".into(), 1));
    assert_eq!(status_of(&pool, cancel).await, ("failed".into(), 1));
    let resolved: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT kind, resolution FROM reconciliation_findings ORDER BY payment_id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        resolved,
        vec![
            ("missed_success".into(), Some("repaired".into())),
            ("missed_cancel".into(), Some("repaired".into()))
        ]
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox WHERE event_type LIKE 'Apply%' AND processed_at IS NULL"
        )
        .await,
        0
    );
    let ev = events(&pool).await;
    assert_eq!(ev.len(), 2);
    assert_eq!(
        (
            ev[0]["payment_id"].clone(),
            ev[0]["from"].clone(),
            ev[0]["to"].clone(),
            ev[0]["version"].clone()
        ),
        (json!(success), json!("pending"), json!("paid"), json!(1))
    );
    assert_eq!(
        (ev[1]["payment_id"].clone(), ev[1]["to"].clone()),
        (json!(cancel), json!("failed"))
    );

    // A second drain has nothing to do; a second scan sees them in sync.
    assert_eq!(drain_all(&pool).await, RepairReport::default());
    sqlx::query("UPDATE payments SET updated_at = now() - interval '1 hour'")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE reconciliation_cursor SET last_id = 0")
        .execute(&pool)
        .await
        .unwrap();
    stripe.set_status("pi_Cancel", "canceled");
    let again = scan_with(&pool, &gateway(&stripe), &settings(200))
        .await
        .unwrap();
    assert_eq!(
        again
            .verdicts
            .get(stripe_reconciler::reconcile::Verdict::InSync),
        2
    );
    assert_eq!(again.findings_created, 0);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_webhook_wins_the_race(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let id = insert_payment(&pool, "pi_Raced", "pending", 3600).await;
    stripe.set_status("pi_Raced", "succeeded");
    scan_with(&pool, &gateway(&stripe), &settings(200))
        .await
        .unwrap();
    // The webhook handler's transaction holds the payment row while the
    // drain applies the repair command on the same row at the same time.
    let mut webhook_tx = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM payments WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *webhook_tx)
        .await
        .unwrap();
    let drain = tokio::spawn({
        let pool = pool.clone();
        async move { drain_all(&pool).await }
    });
    wait::until_true("the drain waiting on the payment row", || async {
        wait::any_lock_waits(&pool).await > 0
    })
    .await;
    assert!(!drain.is_finished(), "the drain waits for the webhook");
    // The webhook applies the transition through the canonical writer, in
    // its transaction, and commits: the waiting drain then sees it moved.
    let change = stripe_reconciler::repair::writer::StatusChange {
        command: RepairCommand::ApplyPaymentSucceeded,
        payment_id: &id.into(),
        finding_id: None,
        cause: "webhook",
    };
    let webhook = stripe_reconciler::repair::writer::apply(
        &mut webhook_tx,
        &Default::default(),
        &Default::default(),
        change,
    )
    .await
    .unwrap();
    assert!(webhook.changed);
    webhook_tx.commit().await.unwrap();

    let report = drain.await.unwrap();

    assert_eq!((report.applied, report.no_op), (0, 1));
    assert_eq!(
        status_of(&pool, id).await,
        ("paid".into(), 1),
        "version bumped once, by the webhook"
    );
    assert_eq!(events(&pool).await.len(), 1, "only the webhook's event");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE resolution = 'repaired'"
        )
        .await,
        1,
        "the no-op still resolves the finding"
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox WHERE event_type = 'ApplyPaymentSucceeded' AND processed_at IS NOT NULL").await, 1);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn two_workers_apply_a_thousand_commands_exactly_once(pool: PgPool) {
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status)
         SELECT 'o' || i, 'pi_' || i, 'pending' FROM generate_series(1, 1000) AS i",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::raw_sql(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status)
         SELECT id, CASE WHEN id % 2 = 0 THEN 'missed_success' ELSE 'missed_cancel' END, 'pending',
                CASE WHEN id % 2 = 0 THEN 'succeeded' ELSE 'canceled' END
           FROM payments;
         INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
         SELECT 'Payment', f.payment_id::text,
                CASE WHEN f.kind = 'missed_success' THEN 'ApplyPaymentSucceeded' ELSE 'ApplyPaymentCanceled' END,
                jsonb_build_object('payment_id', f.payment_id, 'finding_id', f.id, 'expected_local_status', 'pending')
           FROM reconciliation_findings f;",
    )
    .execute(&pool)
    .await
    .unwrap();
    let small = RepairOptions {
        chunk: 25,
        ..RepairOptions::default()
    };
    let token = CancellationToken::new();

    let (a, b) = tokio::join!(
        drain(&pool, small.clone(), &token),
        drain(&pool, small.clone(), &token)
    );
    let (a, b) = (a.unwrap(), b.unwrap());

    assert_eq!(a.applied + b.applied, 1000, "{a:?} {b:?}");
    assert_eq!(a.no_op + b.no_op + a.failed + b.failed, 0);
    assert!(
        a.applied > 0 && b.applied > 0,
        "both workers took part: {a:?} {b:?}"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM payments WHERE version = 1").await,
        1000
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM payments WHERE status = 'paid'").await,
        500
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox WHERE event_type = 'PaymentStatusChanged'"
        )
        .await,
        1000
    );
    assert_eq!(
        count(&pool, "SELECT count(DISTINCT aggregate_id) FROM outbox WHERE event_type = 'PaymentStatusChanged'").await,
        1000
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn poison_commands_do_not_block_the_ones_behind_them(pool: PgPool) {
    let good = insert_payment(&pool, "pi_Good", "pending", 3600).await;
    for payload in [
        json!({"payment_id": 999_999, "finding_id": 999_999}),
        json!({"unexpected": "shape"}),
        json!("not an object"),
    ] {
        sqlx::query("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('Payment', '0', 'ApplyPaymentSucceeded', $1)")
            .bind(payload)
            .execute(&pool)
            .await
            .unwrap();
    }
    // Someone else's event in a shared outbox is never touched.
    sqlx::query("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('Order', '1', 'OrderShipped', '{}')")
        .execute(&pool)
        .await
        .unwrap();
    enqueue_repair(&pool, good, "missed_success", "ApplyPaymentSucceeded").await;

    let first = drain_all(&pool).await;

    // A command whose payment does not exist is the application's delete:
    // skipped as payment_deleted (docs/schema.md, "A payment the application deletes"), not
    // retried.
    assert_eq!(
        (first.applied, first.failed, first.skipped, first.stuck),
        (1, 2, 1, 0)
    );
    assert_eq!(status_of(&pool, good).await, ("paid".into(), 1));
    let errors: Vec<(i32, Option<String>)> = sqlx::query_as(
        "SELECT attempts, last_error FROM outbox WHERE processed_at IS NULL AND event_type = 'ApplyPaymentSucceeded' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(errors.len(), 2, "poison commands are kept");
    assert!(
        errors[0]
            .1
            .as_deref()
            .unwrap()
            .starts_with("malformed payload"),
        "{errors:?}"
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox WHERE event_type = 'OrderShipped' AND processed_at IS NULL AND attempts = 0").await, 1);

    // Retried on later runs, then left for a person and counted.
    for _ in 0..4 {
        drain_all(&pool).await;
    }
    let last = drain_all(&pool).await;
    assert_eq!((last.failed, last.stuck), (0, 2));
    assert_eq!(count(&pool, "SELECT max(attempts)::bigint FROM outbox WHERE event_type = 'ApplyPaymentSucceeded' AND processed_at IS NULL").await, 5);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_command_whose_finding_was_resolved_by_hand_is_skipped(pool: PgPool) {
    let id = insert_payment(&pool, "pi_Handled", "pending", 3600).await;
    let finding = enqueue_repair(&pool, id, "missed_success", "ApplyPaymentSucceeded").await;
    sqlx::query("UPDATE reconciliation_findings SET resolved_at = now(), resolution = 'manual' WHERE id = $1")
        .bind(finding)
        .execute(&pool)
        .await
        .unwrap();

    let report = drain_all(&pool).await;

    assert_eq!((report.applied, report.skipped), (0, 1));
    assert_eq!(
        status_of(&pool, id).await,
        ("pending".into(), 0),
        "the payment is not touched"
    );
    assert_eq!(resolution(&pool, finding).await.as_deref(), Some("manual"));
    assert!(events(&pool).await.is_empty());
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_payment_that_moved_elsewhere_supersedes_the_finding(pool: PgPool) {
    let id = insert_payment(&pool, "pi_LateFailure", "pending", 3600).await;
    let finding = enqueue_repair(&pool, id, "missed_success", "ApplyPaymentSucceeded").await;
    // A late failure webhook moves it to failed first.
    stripe_reconciler::repair::apply_payment_canceled(
        &pool,
        &Default::default(),
        &id.into(),
        None,
        "webhook",
    )
    .await
    .unwrap();

    let report = drain_all(&pool).await;

    assert_eq!((report.applied, report.no_op), (0, 1));
    assert_eq!(status_of(&pool, id).await, ("failed".into(), 1));
    assert_eq!(
        resolution(&pool, finding).await.as_deref(),
        Some("superseded"),
        "not 'repaired': it is not paid"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_stuck_repair_command_is_closed_when_a_later_scan_clears_its_finding(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let id = insert_payment(&pool, "pi_Stuck", "pending", 3600).await;
    stripe.set_status("pi_Stuck", "succeeded");
    let gw = gateway(&stripe);
    let s = settings(10);
    assert_eq!(
        scan_with(&pool, &gw, &s).await.unwrap().commands_enqueued,
        1
    );
    sqlx::query(
        "UPDATE outbox SET attempts = $1, last_error = 'could not serialize access'
          WHERE event_type = 'ApplyPaymentSucceeded'",
    )
    .bind(MAX_ATTEMPTS)
    .execute(&pool)
    .await
    .unwrap();
    let before = drain(&pool, RepairOptions::default(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        (before.applied, before.stuck),
        (0, 1),
        "the command is stuck"
    );
    // The webhook got there some other way: the payment is paid, as Stripe says.
    sqlx::query(
        "UPDATE payments SET status = 'paid', version = version + 1,
                updated_at = now() - interval '1 hour' WHERE id = $1",
    )
    .bind(id)
    .execute(&pool)
    .await
    .unwrap();
    rewind_cursor(&pool).await;

    let report = scan_with(&pool, &gw, &s).await.unwrap();

    assert_eq!(report.findings_cleared, 1, "{report:?}");
    let finding: (Option<String>,) = sqlx::query_as(
        "SELECT resolution FROM reconciliation_findings WHERE payment_id = $1 AND kind = 'missed_success'",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(finding.0.as_deref(), Some("cleared"));
    let command: (bool, Option<String>) = sqlx::query_as(
        "SELECT processed_at IS NOT NULL, last_error FROM outbox WHERE event_type = 'ApplyPaymentSucceeded'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(command.0, "the stuck command is closed by the scan");
    assert!(
        command
            .1
            .as_deref()
            .unwrap_or("")
            .contains("resolved by a later scan"),
        "last_error says why: {:?}",
        command.1
    );
    let after = drain(&pool, RepairOptions::default(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(after.stuck, 0, "nothing left for a person: {after:?}");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox WHERE event_type = 'PaymentStatusChanged'"
        )
        .await,
        0,
        "the scan changed no payment"
    );
}

/// A repair is applied only while the newest read supports it: when a later
/// read cannot confirm the drift, the pending command is closed, and the next
/// read that confirms it enqueues one again; the payment is repaired once.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_pending_repair_waits_while_stripe_cannot_confirm_the_drift(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let payment = insert_payment(&pool, "pi_Missed", "pending", 3600).await;
    stripe.set_status("pi_Missed", "succeeded");
    let gw = gateway(&stripe);
    scan_with(&pool, &gw, &settings(200)).await.unwrap();
    let live = "SELECT count(*) FROM outbox WHERE processed_at IS NULL
                 AND event_type = 'ApplyPaymentSucceeded' AND aggregate_id = $1::text";
    assert_eq!(count_for(&pool, live, payment).await, 1);

    // Stripe now answers 500 for it: the command is closed, not applied.
    stripe.fail_object(stripe_fake::RETRIEVE, "pi_Missed", server_error());
    rewind_cursor(&pool).await;
    scan_with(&pool, &gw, &settings(200)).await.unwrap();
    assert_eq!(count_for(&pool, live, payment).await, 0);
    let report = drain(&pool, RepairOptions::default(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.applied, 0);

    // Stripe confirms the success again: one new command, one repair.
    stripe.heal("pi_Missed");
    rewind_cursor(&pool).await;
    scan_with(&pool, &gw, &settings(200)).await.unwrap();
    assert_eq!(count_for(&pool, live, payment).await, 1);
    let report = drain(&pool, RepairOptions::default(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.applied, 1);
    assert_eq!(
        count_for(
            &pool,
            "SELECT count(*) FROM outbox WHERE event_type = 'PaymentStatusChanged' AND aggregate_id = $1::text",
            payment
        )
        .await,
        1
    );
}

/// `repair` reads nothing from Stripe: it runs through the same lifecycle as
/// the scheduled jobs with no gateway, so no `STRIPE_API_KEY` is asked for
/// (docs/layout.md, "Adding a job").
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn repair_drains_without_a_stripe_key(pool: PgPool) {
    let id = insert_payment(&pool, "pi_NoKey", "pending", 3600).await;
    enqueue_repair(&pool, id, "missed_success", "ApplyPaymentSucceeded").await;

    let out = reconciler_output(&["repair"], &[("DATABASE_URL", database_url(&pool))]).await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["applied"], 1, "{report}");
    assert_eq!(status_of(&pool, id).await.0, "paid");
}
