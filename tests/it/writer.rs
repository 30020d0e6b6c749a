//! The canonical writer's promises on their own: the status change, its
//! `PaymentStatusChanged` event and the finding's resolution commit together
//! or not at all (an outbox that refuses the event leaves the payment, its
//! version and its finding as they were), and a repair command whose finding
//! is of another kind is refused even on the right payment.

use sqlx::PgPool;
use stripe_reconciler::repair::apply_payment_succeeded;
use stripe_reconciler::repair::writer::WriteError;

use super::repair::enqueue_repair;
use crate::support::*;

/// A pending payment with an open finding of `kind`, and (when `command` is
/// given) its repair command in the outbox; returns `(payment, finding)`.
async fn payment_with_finding(pool: &PgPool, kind: &str, command: Option<&str>) -> (i64, i64) {
    let payment = insert_payment(pool, "pi_Writer", "pending", 3600).await;
    let finding: i64 = sqlx::query_scalar(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status)
         VALUES ($1, $2, 'pending', 'succeeded') RETURNING id",
    )
    .bind(payment)
    .bind(kind)
    .fetch_one(pool)
    .await
    .unwrap();
    if let Some(command) = command {
        sqlx::query(
            "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
             VALUES ('Payment', $1::text, $2,
                     jsonb_build_object('payment_id', $1::bigint, 'finding_id', $3::bigint,
                                        'expected_local_status', 'pending'))",
        )
        .bind(payment)
        .bind(command)
        .bind(finding)
        .execute(pool)
        .await
        .unwrap();
    }
    (payment, finding)
}

/// The outbox (the test database's own) refuses every status-change event.
async fn outbox_refuses_status_events(pool: &PgPool) {
    sqlx::query(
        "ALTER TABLE outbox ADD CONSTRAINT test_refuses_status_events
         CHECK (event_type <> 'PaymentStatusChanged') NOT VALID",
    )
    .execute(pool)
    .await
    .unwrap();
}

async fn finding_open(pool: &PgPool, finding: i64) -> bool {
    sqlx::query_scalar("SELECT resolved_at IS NULL FROM reconciliation_findings WHERE id = $1")
        .bind(finding)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn status_events(pool: &PgPool) -> i64 {
    count(
        pool,
        "SELECT count(*) FROM outbox WHERE event_type = 'PaymentStatusChanged'",
    )
    .await
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_refused_event_leaves_status_version_and_finding_unchanged(pool: PgPool) {
    let (payment, finding) = payment_with_finding(&pool, "missed_success", None).await;
    outbox_refuses_status_events(&pool).await;

    let e = apply_payment_succeeded(
        &pool,
        &Default::default(),
        &payment.into(),
        Some(finding),
        "webhook",
    )
    .await
    .unwrap_err();

    assert!(matches!(e, WriteError::Store(_)), "{e:?}");
    assert_eq!(status_of(&pool, payment).await, ("pending".into(), 0));
    assert!(finding_open(&pool, finding).await, "the finding stays open");
    assert_eq!(status_events(&pool).await, 0);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_repair_whose_event_is_refused_changes_nothing_and_is_kept_for_later(pool: PgPool) {
    let (payment, finding) =
        payment_with_finding(&pool, "missed_success", Some("ApplyPaymentSucceeded")).await;
    outbox_refuses_status_events(&pool).await;

    let report = drain_all(&pool).await;

    assert_eq!((report.applied, report.failed), (0, 1), "{report:?}");
    assert_eq!(status_of(&pool, payment).await, ("pending".into(), 0));
    assert!(finding_open(&pool, finding).await);
    assert_eq!(status_events(&pool).await, 0);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox WHERE event_type = 'ApplyPaymentSucceeded'
                AND processed_at IS NULL AND attempts = 1"
        )
        .await,
        1,
        "the command is kept, one attempt counted"
    );

    // Once the outbox accepts the event, the next drain applies it once.
    sqlx::query("ALTER TABLE outbox DROP CONSTRAINT test_refuses_status_events")
        .execute(&pool)
        .await
        .unwrap();
    let report = drain_all(&pool).await;
    assert_eq!((report.applied, report.failed), (1, 0), "{report:?}");
    assert_eq!(status_of(&pool, payment).await, ("paid".into(), 1));
    assert!(!finding_open(&pool, finding).await);
    assert_eq!(status_events(&pool).await, 1);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_command_citing_a_finding_of_another_kind_on_the_same_payment_is_refused(pool: PgPool) {
    // The right payment, the wrong kind: a cancel finding cited by a success command.
    let (payment, finding) =
        payment_with_finding(&pool, "missed_cancel", Some("ApplyPaymentSucceeded")).await;

    let report = drain_all(&pool).await;

    assert_eq!(
        (report.applied, report.no_op, report.failed),
        (0, 0, 1),
        "{report:?}"
    );
    assert_eq!(status_of(&pool, payment).await, ("pending".into(), 0));
    assert!(finding_open(&pool, finding).await);
    assert_eq!(status_events(&pool).await, 0);
    let last_error: Option<String> = sqlx::query_scalar(
        "SELECT last_error FROM outbox WHERE event_type = 'ApplyPaymentSucceeded'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        last_error
            .as_deref()
            .is_some_and(|e| e.contains("missed_cancel")),
        "the reason names the finding's kind: {last_error:?}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_command_that_does_not_match_its_finding_is_refused(pool: PgPool) {
    let a = insert_payment(&pool, "pi_A", "pending", 3600).await;
    let b = insert_payment(&pool, "pi_B", "pending", 3600).await;
    let finding_a = enqueue_repair(&pool, a, "missed_cancel", "ApplyPaymentCanceled").await;
    // A forged command: marks payment B paid, citing A's cancel finding.
    sqlx::query(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('Payment', $1::text, 'ApplyPaymentSucceeded', jsonb_build_object('payment_id', $1::bigint, 'finding_id', $2::bigint))",
    )
    .bind(b)
    .bind(finding_a)
    .execute(&pool)
    .await
    .unwrap();

    let report = drain_all(&pool).await;

    assert_eq!(
        (report.applied, report.failed),
        (1, 1),
        "A's own command applies, the forged one fails"
    );
    assert_eq!(status_of(&pool, b).await, ("pending".into(), 0));
    assert_eq!(status_of(&pool, a).await, ("failed".into(), 1));
}
