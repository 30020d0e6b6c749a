//! The design note's own `run_batch` (shared/seed), ported line by line:
//! sequential Stripe reads and one statement per row in phase 3. The reference
//! the set-based phase 3 must match row for row. One deliberate departure,
//! as in the product: a 404 or a malformed id also stamps `last_reconciled_at`.

use sqlx::PgPool;
use stripe_reconciler::reconcile::{classify_status, Decision, LocalStatus, Verdict};
use stripe_reconciler::stripe::{GatewayError, PaymentIntentId, StripeGateway};

pub async fn seed_run_batch(
    pool: &PgPool,
    gateway: &StripeGateway,
    job: &str,
    batch: i64,
    grace_secs: f64,
) -> usize {
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO reconciliation_cursor (job) VALUES ($1) ON CONFLICT DO NOTHING")
        .bind(job)
        .execute(&mut *tx)
        .await
        .unwrap();
    let cursor_id: i64 =
        sqlx::query_scalar("SELECT last_id FROM reconciliation_cursor WHERE job = $1")
            .bind(job)
            .fetch_one(&mut *tx)
            .await
            .unwrap();
    let rows: Vec<(i64, String, String, bool)> = sqlx::query_as(
        "SELECT id, stripe_payment_intent_id, status, updated_at > now() - make_interval(secs => $1) AS recently_changed
           FROM payments WHERE id > $2 ORDER BY id LIMIT $3",
    )
    .bind(grace_secs)
    .bind(cursor_id)
    .bind(batch)
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    if rows.is_empty() {
        sqlx::query("UPDATE reconciliation_cursor SET last_id = 0, last_cycle_completed_at = now(), cycle_started_at = now() WHERE job = $1 AND last_id = $2")
            .bind(job)
            .bind(cursor_id)
            .execute(pool)
            .await
            .unwrap();
        return 0;
    }

    let mut results: Vec<(i64, String, Decision, Option<String>)> = Vec::new();
    for (payment_id, pi_id, local_status, recently_changed) in &rows {
        if *recently_changed {
            results.push((
                *payment_id,
                local_status.clone(),
                Decision::plain(Verdict::InFlight),
                None,
            ));
            continue;
        }
        let decision_and_observed = match PaymentIntentId::parse(pi_id) {
            Err(_) => (
                Decision::review(stripe_reconciler::reconcile::FindingKind::InvalidPaymentIntentId),
                None,
            ),
            Ok(id) => match gateway.payment_intent_status(&id).await {
                Ok(external) => (
                    classify_status(&LocalStatus::parse(local_status), &external),
                    Some(external.as_str().to_owned()),
                ),
                Err(GatewayError::NotFound { .. }) => (
                    Decision::review(stripe_reconciler::reconcile::FindingKind::MissingExternally),
                    None,
                ),
                Err(_) => (Decision::plain(Verdict::Unverifiable), None),
            },
        };
        results.push((
            *payment_id,
            local_status.clone(),
            decision_and_observed.0,
            decision_and_observed.1,
        ));
    }

    let mut tx = pool.begin().await.unwrap();
    for (payment_id, local_status, decision, observed) in &results {
        let definitive = matches!(
            decision.kind,
            Some(
                stripe_reconciler::reconcile::FindingKind::MissingExternally
                    | stripe_reconciler::reconcile::FindingKind::InvalidPaymentIntentId
            )
        );
        if observed.is_some() || definitive {
            sqlx::query(
                "INSERT INTO reconciliation_payment_state AS s (payment_id, created_at, observed_external_status, last_reconciled_at)
                 SELECT id, created_at, $1, now() FROM payments WHERE id = $2
                 ON CONFLICT (payment_id) DO UPDATE
                    SET observed_external_status = coalesce($1, s.observed_external_status), last_reconciled_at = now()",
            )
            .bind(observed)
            .bind(payment_id)
            .execute(&mut *tx)
            .await
            .unwrap();
        }
        let Some(kind) = &decision.kind else { continue };
        let finding: Option<i64> = sqlx::query_scalar(
            "INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (payment_id, kind) WHERE resolved_at IS NULL DO NOTHING
             RETURNING id",
        )
        .bind(payment_id)
        .bind(kind.as_str().as_ref())
        .bind(local_status)
        .bind(observed)
        .fetch_optional(&mut *tx)
        .await
        .unwrap();
        if let (Some(finding_id), Some(command)) = (finding, decision.command) {
            sqlx::query(
                "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
                 VALUES ('Payment', $1, $2, jsonb_build_object('payment_id', $3::bigint, 'finding_id', $4::bigint, 'expected_local_status', $5::text))",
            )
            .bind(payment_id.to_string())
            .bind(command.as_str())
            .bind(payment_id)
            .bind(finding_id)
            .bind(local_status)
            .execute(&mut *tx)
            .await
            .unwrap();
        }
    }
    let moved = sqlx::query(
        "UPDATE reconciliation_cursor SET last_id = $1 WHERE job = $2 AND last_id = $3",
    )
    .bind(rows.last().unwrap().0)
    .bind(job)
    .bind(cursor_id)
    .execute(&mut *tx)
    .await
    .unwrap();
    assert_eq!(moved.rows_affected(), 1, "ConcurrentRun");
    tx.commit().await.unwrap();
    rows.len()
}
