//! Money beats status (docs/design.md, "Money beyond status"): the latest charge read in
//! the same request, refunds, disputes, duplicates and amount/currency
//! mismatches recorded as findings that block every repair of their payment,
//! on a real PostgreSQL with Stripe faked by the one fake (`stripe_fake`).

use crate::support::arrange::{self, charge, intent};
use crate::support::stripe_fake::StripeFake;
use crate::support::*;
use serde_json::{json, Value};
use sqlx::PgPool;
use stripe_reconciler::reconcile::{Charge, ChargeFacts, Verdict};
use stripe_reconciler::repair::RepairReport;
use stripe_reconciler::stripe::PaymentIntentId;

/// `payment_id` of every `PaymentStatusChanged` event, in order.
async fn status_events(pool: &PgPool) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT (payload->>'payment_id')::bigint FROM outbox
          WHERE event_type = 'PaymentStatusChanged' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// `(payment_id, event_type, processed, last_error)` of every repair command.
pub(super) async fn commands(pool: &PgPool) -> Vec<(i64, String, bool, Option<String>)> {
    sqlx::query_as(
        "SELECT (payload->>'payment_id')::bigint, event_type, processed_at IS NOT NULL, last_error
           FROM outbox WHERE event_type LIKE 'Apply%' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

// (1) Every shape of `latest_charge`, through the real gateway.

#[tokio::test]
async fn latest_charge_is_read_in_every_shape_stripe_sends() {
    let stripe = StripeFake::start().await;
    let known = |amount_refunded, refunded, disputed| {
        ChargeFacts::Known(Charge {
            amount: Some(1099),
            amount_captured: Some(1099),
            amount_refunded: Some(amount_refunded),
            refunded: Some(refunded),
            disputed: Some(disputed),
        })
    };
    let mut legacy = intent("pi_Legacy", "succeeded", Value::Null);
    legacy.as_object_mut().unwrap().remove("latest_charge");
    legacy["charges"] = json!({
        "object": "list",
        "data": [charge("ch_3Legacy", "pi_Legacy", 1099, 0, true)],
        "has_more": false,
        "total_count": 1,
        "url": "/v1/charges?payment_intent=pi_Legacy"
    });
    let mut legacy_empty = intent("pi_LegacyEmpty", "requires_payment_method", Value::Null);
    legacy_empty
        .as_object_mut()
        .unwrap()
        .remove("latest_charge");
    legacy_empty["charges"] = json!({
        "object": "list", "data": [], "has_more": false, "total_count": 0,
        "url": "/v1/charges?payment_intent=pi_LegacyEmpty"
    });
    let mut absent = intent("pi_Absent", "succeeded", Value::Null);
    absent.as_object_mut().unwrap().remove("latest_charge");
    let cases = [
        (
            intent("pi_NoCharge", "requires_payment_method", Value::Null),
            ChargeFacts::None,
        ),
        (
            intent("pi_BareId", "succeeded", json!("ch_123")),
            ChargeFacts::NotExpanded,
        ),
        (
            intent(
                "pi_Expanded",
                "succeeded",
                charge("ch_3Expanded", "pi_Expanded", 1099, 500, false),
            ),
            known(500, false, false),
        ),
        (legacy, known(0, false, true)),
        (legacy_empty, ChargeFacts::None),
        (absent, ChargeFacts::NotExpanded),
    ];
    for (body, _) in &cases {
        // Stripe's rule: `latest_charge` expanded only when the read asks
        // `expand[]=latest_charge` (its id otherwise).
        stripe.add_object(None, body.clone());
    }
    let gateway = gateway(&stripe);

    for (body, expected) in &cases {
        let id = body["id"].as_str().unwrap();
        let facts = gateway
            .payment_intent(&PaymentIntentId::parse(id).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(&facts.charge, expected, "{id}");
        assert_eq!(facts.amount, Some(1099), "{id}");
        assert_eq!(facts.currency.as_deref(), Some("usd"), "{id}");
        assert_eq!(
            facts.created.map(|c| c.timestamp()),
            body["created"].as_i64(),
            "{id}"
        );
    }
    let ids: Vec<&str> = cases
        .iter()
        .map(|(b, _)| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(stripe.retrieved(), ids, "one retrieve per PaymentIntent");
    let seen = stripe.seen();
    assert_eq!(seen.len(), cases.len());
    for r in &seen {
        assert_eq!(r.expand, ["latest_charge"], "{:?}", r.id);
    }
}

// (2) Scan, then repair, end to end.

#[sqlx::test(migrations = false)]
async fn refunds_disputes_and_duplicates_are_reported_and_never_repaired(pool: PgPool) {
    payments_without_unique(&pool).await;
    let stripe = StripeFake::start().await;
    let pending = |pi: &str| arrange::payment(pi).local("pending");
    let refunded = pending("pi_Refunded")
        .refunded(1099)
        .insert(&pool, &stripe)
        .await
        .id;
    let disputed = pending("pi_Disputed")
        .disputed()
        .insert(&pool, &stripe)
        .await
        .id;
    let dup_a = pending("pi_Shared").insert(&pool, &stripe).await.id;
    // A second row holding the same PaymentIntent.
    let dup_b = insert_payment(&pool, "pi_Shared", "pending", 3600).await;
    let clean_id = pending("pi_Clean").insert(&pool, &stripe).await.id;

    let report = scan(&pool, &stripe, &settings(200)).await;

    assert_eq!(report.verdicts.get(Verdict::NeedsReview), 4);
    assert_eq!(report.verdicts.get(Verdict::Repairable), 1);
    assert_eq!((report.findings_created, report.commands_enqueued), (5, 1));
    let queued = commands(&pool).await;
    assert_eq!(
        queued,
        vec![(clean_id, "ApplyPaymentSucceeded".into(), false, None)],
        "a command only for the clean missed success"
    );

    let repaired = drain_all(&pool).await;

    assert_eq!(
        (repaired.applied, repaired.skipped, repaired.failed),
        (1, 0, 0)
    );
    for blocked in [refunded, disputed, dup_a, dup_b] {
        assert_eq!(status_of(&pool, blocked).await, ("pending".into(), 0));
    }
    assert_eq!(status_of(&pool, clean_id).await, ("paid".into(), 1));
    assert_eq!(
        status_events(&pool).await,
        vec![clean_id],
        "exactly one event"
    );

    let f = findings_of(&pool, refunded).await;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].kind.as_str(), f[0].open), ("refunded", true));
    let d = f[0].details.clone().unwrap();
    assert_eq!(
        (
            &d["amount"],
            &d["amount_refunded"],
            &d["currency"],
            &d["refund"]
        ),
        (&json!(1099), &json!(1099), &json!("usd"), &json!("full")),
        "{d}"
    );
    let f = findings_of(&pool, disputed).await;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].kind.as_str(), f[0].open), ("disputed", true));
    assert_eq!(f[0].details.as_ref().unwrap()["amount"], 1099);
    for dup in [dup_a, dup_b] {
        let f = findings_of(&pool, dup).await;
        assert_eq!(f.len(), 1, "one finding per row sharing the id: {f:?}");
        assert_eq!(
            (f[0].kind.as_str(), f[0].open),
            ("duplicate_payment_intent", true)
        );
    }
    let f = findings_of(&pool, clean_id).await;
    assert_eq!(
        (f[0].kind.as_str(), f[0].resolution.as_deref()),
        ("missed_success", Some("repaired"))
    );

    // The next cycle sees the same money findings: nothing new, no command.
    sqlx::query("UPDATE payments SET updated_at = now() - interval '1 hour'")
        .execute(&pool)
        .await
        .unwrap();
    let again = rescan(&pool, &stripe, &settings(200)).await;
    assert_eq!((again.findings_created, again.commands_enqueued), (0, 0));
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE resolved_at IS NULL"
        )
        .await,
        4
    );
    assert_eq!(drain_all(&pool).await.applied, 0);
    assert_eq!(status_events(&pool).await, vec![clean_id]);
}

// (3) A command enqueued before the refund was seen.

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_worker_skips_a_command_whose_payment_got_a_refund_finding(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let p = arrange::payment("pi_LateRefund")
        .local("pending")
        .insert(&pool, &stripe)
        .await;
    let payment = p.id;
    let report = p.scan(&pool, &stripe).await;
    assert_eq!(report.commands_enqueued, 1);
    // Seen by another path (a person, a webhook handler) before the worker ran.
    sqlx::query(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status, details)
         VALUES ($1, 'refunded', 'pending', 'succeeded', '{\"amount\": 1099, \"amount_refunded\": 1099}')",
    )
    .bind(payment)
    .execute(&pool)
    .await
    .unwrap();

    let repaired = drain_all(&pool).await;

    assert_eq!(
        (repaired.applied, repaired.skipped, repaired.failed),
        (0, 1, 0)
    );
    assert_eq!(status_of(&pool, payment).await, ("pending".into(), 0));
    assert!(status_events(&pool).await.is_empty());
    let queued = commands(&pool).await;
    assert_eq!(queued.len(), 1);
    let (_, _, processed, last_error) = &queued[0];
    assert!(processed, "closed, not left for a retry: {queued:?}");
    assert!(
        last_error
            .as_deref()
            .unwrap_or("")
            .contains("blocks repairs"),
        "{queued:?}"
    );
    assert_eq!(drain_all(&pool).await, RepairReport::default());
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_rescan_that_sees_the_refund_closes_the_earlier_command(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let late_refund = arrange::payment("pi_LateRefund").local("pending");
    let p = late_refund.clone().insert(&pool, &stripe).await;
    let payment = p.id;
    assert_eq!(p.scan(&pool, &stripe).await.commands_enqueued, 1);
    // Refunded in full before the worker ran.
    mount_pi(&stripe, &late_refund.refunded(1099).stripe_object()).await;

    let report = rescan(&pool, &stripe, &settings(200)).await;

    assert_eq!(
        (
            report.findings_created,
            report.findings_cleared,
            report.commands_enqueued
        ),
        (1, 1, 0)
    );
    let f = findings_of(&pool, payment).await;
    let kinds: Vec<(&str, bool, Option<&str>)> = f
        .iter()
        .map(|f| (f.kind.as_str(), f.open, f.resolution.as_deref()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("missed_success", false, Some("superseded")),
            ("refunded", true, None)
        ]
    );
    let queued = commands(&pool).await;
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert!(queued[0].2, "the superseded finding's command is closed");
    assert!(queued[0].3.is_some(), "with a reason: {queued:?}");

    let repaired = drain_all(&pool).await;
    assert_eq!(repaired.applied, 0);
    assert_eq!(status_of(&pool, payment).await, ("pending".into(), 0));
    assert!(status_events(&pool).await.is_empty());
}

// (4) A stale command: the payment now holds another PaymentIntent.

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_command_for_a_payment_intent_the_payment_no_longer_holds_is_skipped(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let p = arrange::payment("pi_FirstAttempt")
        .local("pending")
        .insert(&pool, &stripe)
        .await;
    let payment = p.id;
    assert_eq!(p.scan(&pool, &stripe).await.commands_enqueued, 1);
    // The application retried the checkout with a new PaymentIntent.
    sqlx::query("UPDATE payments SET stripe_payment_intent_id = 'pi_SecondAttempt' WHERE id = $1")
        .bind(payment)
        .execute(&pool)
        .await
        .unwrap();

    let repaired = drain_all(&pool).await;

    assert_eq!(
        (repaired.applied, repaired.skipped, repaired.failed),
        (0, 1, 0)
    );
    let (status, version, intent): (String, i64, String) = sqlx::query_as(
        "SELECT status, version, stripe_payment_intent_id FROM payments WHERE id = $1",
    )
    .bind(payment)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (status.as_str(), version, intent.as_str()),
        ("pending", 0, "pi_SecondAttempt"),
        "payment untouched"
    );
    assert!(status_events(&pool).await.is_empty());
    let queued = commands(&pool).await;
    assert!(queued[0].2, "{queued:?}");
    assert!(
        queued[0]
            .3
            .as_deref()
            .unwrap_or("")
            .contains("pi_FirstAttempt"),
        "{queued:?}"
    );
    let f = findings_of(&pool, payment).await;
    assert!(
        !f[0].open,
        "the finding about the old PaymentIntent is closed"
    );
}
