//! Money beyond the brief: an unexpanded charge, a charge without
//! `disputed`, money proven later, an acknowledged or partial refund, a
//! partial capture, a dry run's counts, and a 404 that never clears a money
//! finding.

use super::money::commands;
use crate::support::arrange::{self, charge, clean};
use crate::support::stripe_fake::StripeFake;
use crate::support::*;
use serde_json::json;
use sqlx::PgPool;
use stripe_reconciler::reconcile::Verdict;
use stripe_reconciler::scan::{run_batch, Mode, ScanGroups};

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_unexpanded_charge_is_unverifiable_never_repaired(pool: PgPool) {
    let stripe = StripeFake::start().await;
    // A proxy that drops `expand[]`: the charge comes back as a bare id.
    let payment = arrange::payment("pi_Stripped")
        .local("pending")
        .latest_charge(json!("ch_3Stripped"))
        .insert(&pool, &stripe)
        .await
        .id;
    let mut settings = settings(200);
    settings.run.unverifiable_cycles = 1;

    let report = scan(&pool, &stripe, &settings).await;

    assert_eq!(report.verdicts.get(Verdict::Unverifiable), 1);
    assert_eq!(report.commands_enqueued, 0);
    assert_eq!(
        verified(&pool, payment).await,
        (None, false),
        "not stamped as confirmed with Stripe"
    );
    let f = findings_of(&pool, payment).await;
    let mut kinds: Vec<&str> = f.iter().map(|f| f.kind.as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        ["missed_success", "persistently_unverifiable"],
        "the missed success is shown while the money is unproven"
    );
    let stuck = f
        .iter()
        .find(|f| f.kind == "persistently_unverifiable")
        .unwrap();
    let last_error = stuck.details.as_ref().unwrap()["last_error"].to_string();
    assert!(last_error.contains("expanded"), "{last_error}");
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_refunded_charge_without_disputed_is_refunded(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let mut trimmed = charge("ch_3Trimmed", "pi_Trimmed", 1099, 300, false);
    trimmed.as_object_mut().unwrap().remove("disputed");
    let p = arrange::payment("pi_Trimmed")
        .latest_charge(trimmed)
        .insert(&pool, &stripe)
        .await;
    let payment = p.id;

    let report = p.scan(&pool, &stripe).await;

    assert_eq!(report.verdicts.get(Verdict::NeedsReview), 1);
    let f = findings_of(&pool, payment).await;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].kind.as_str(), f[0].open), ("refunded", true));
    assert_eq!(f[0].details.as_ref().unwrap()["amount_refunded"], 300);
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_missed_success_waits_for_its_money_then_gets_its_repair(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let mut trimmed = charge("ch_3Unproven", "pi_Unproven", 1099, 0, false);
    trimmed.as_object_mut().unwrap().remove("disputed");
    let p = arrange::payment("pi_Unproven")
        .local("pending")
        .latest_charge(trimmed)
        .insert(&pool, &stripe)
        .await;
    let payment = p.id;

    let report = p.scan(&pool, &stripe).await;

    assert_eq!(report.commands_enqueued, 0);
    assert!(commands(&pool).await.is_empty(), "no repair while unproven");
    assert_eq!(verified(&pool, payment).await, (None, false), "not stamped");
    let f = findings_of(&pool, payment).await;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].kind.as_str(), f[0].open), ("missed_success", true));
    let why = f[0].details.as_ref().unwrap()["money_unproven"].clone();
    assert!(
        why.as_str().is_some_and(|w| w.contains("disputed")),
        "{why}"
    );

    // A later read shows the whole charge: the money is proven kept.
    mount_pi(&stripe, &clean("pi_Unproven")).await;
    let report = rescan(&pool, &stripe, &settings(200)).await;

    assert_eq!(report.commands_enqueued, 1);
    assert_eq!(
        commands(&pool).await,
        [(payment, "ApplyPaymentSucceeded".to_owned(), false, None)]
    );
    let f = findings_of(&pool, payment).await;
    assert_eq!(f.len(), 1, "the same finding, now repairable: {f:?}");
    assert!(f[0].open);
    assert!(f[0]
        .details
        .as_ref()
        .map_or(true, |d| d.get("money_unproven").is_none()));
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_acknowledged_partial_refund_does_not_hide_the_payment_from_review(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let p = arrange::payment("pi_Goodwill")
        .local("pending")
        .refunded(200)
        .insert(&pool, &stripe)
        .await;
    let payment = p.id;
    p.scan(&pool, &stripe).await;
    let refund = findings_of(&pool, payment).await;
    assert_eq!(refund[0].kind, "refunded");
    // A person acknowledges the $2 goodwill refund.
    let mut conn = pool.acquire().await.unwrap();
    assert!(stripe_reconciler::store::findings::resolve_manually(
        &mut conn,
        refund[0].id,
        "alice",
        "goodwill refund agreed with the customer"
    )
    .await
    .unwrap());
    drop(conn);

    rescan(&pool, &stripe, &settings(200)).await;

    let f = findings_of(&pool, payment).await;
    // The payment is still pending here while Stripe kept the money: an
    // acknowledgement cannot hide that (it holds only for rows whose status
    // is in sync), so the refund finding opens again; it is never repaired.
    assert!(
        f.iter().any(|f| f.kind == "refunded" && f.open),
        "the refund of a pending payment stays in the queue: {f:?}"
    );
    assert!(
        !f.iter().any(|f| f.kind == "missed_success"),
        "no automatic repair after an acknowledged refund: {f:?}"
    );
    // Stripe kept $8.99 for a payment still pending here: that must stay
    // visible in the review queue (or be repaired), not vanish.
    assert!(
        f.iter().any(|f| f.open),
        "payment {payment} is pending while its PaymentIntent succeeded, and no finding is open: {f:?}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_partial_capture_is_not_a_refund(pool: PgPool) {
    let stripe = StripeFake::start().await;
    // Authorised $10.99 with manual capture, captured $8.00: Stripe releases
    // the other $2.99 as a refund of the uncaptured remainder (PaymentIntent
    // capture, `amount_to_capture`: "any additional amount is automatically
    // refunded"). The customer paid $8.00 and got nothing back.
    let mut part = charge("ch_3Part", "pi_PartCaptured", 1099, 299, false);
    part["amount_captured"] = json!(800);
    let p = arrange::payment("pi_PartCaptured")
        .local("pending")
        .latest_charge(part)
        .field("capture_method", json!("manual"))
        .field("amount_received", json!(800))
        .insert(&pool, &stripe)
        .await;
    let payment = p.id;

    p.scan(&pool, &stripe).await;

    let f = findings_of(&pool, payment).await;
    assert_eq!(
        f.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(),
        ["missed_success"],
        "a partial capture is reported as a refund and blocks the repair: {f:?}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_dry_run_counts_only_the_findings_a_real_run_would_create(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let p = arrange::payment("pi_Acknowledged")
        .refunded(100)
        .insert(&pool, &stripe)
        .await;
    let payment = p.id;
    p.scan(&pool, &stripe).await;
    let refund = findings_of(&pool, payment).await;
    let mut conn = pool.acquire().await.unwrap();
    assert!(stripe_reconciler::store::findings::resolve_manually(
        &mut conn,
        refund[0].id,
        "alice",
        "$1 goodwill refund"
    )
    .await
    .unwrap());
    drop(conn);

    let s = settings(200);
    let facts = facts(&pool, &s).await;
    let dry = run_batch(
        &pool,
        &gateway(&stripe),
        &ScanGroups::of(&s, &facts),
        Mode::DryRun { after: None },
        None,
    )
    .await
    .unwrap();
    let real = rescan(&pool, &stripe, &settings(200)).await;

    assert_eq!(real.findings_created, 0, "the acknowledgement holds");
    assert_eq!(
        dry.findings_created, real.findings_created,
        "a dry run predicts what the run writes"
    );
}

/// A 404 says nothing about the money: a dispute found earlier stays open
/// (and keeps blocking repairs) when Stripe later answers 404 for the row;
/// only an answer that shows the charge can clear it.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_404_never_clears_a_money_finding(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let payment = arrange::payment("pi_Disputed")
        .disputed()
        .insert(&pool, &stripe)
        .await
        .id;
    let gw = gateway(&stripe);
    scan_with(&pool, &gw, &settings(200)).await.unwrap();
    let open_disputes = "SELECT count(*) FROM reconciliation_findings
                          WHERE payment_id = $1 AND kind = 'disputed' AND resolved_at IS NULL";
    assert_eq!(count_for(&pool, open_disputes, payment).await, 1);

    // Stripe no longer holds it: 404 `resource_missing`.
    stripe.delete("pi_Disputed");
    rewind_cursor(&pool).await;
    scan_with(&pool, &gw, &settings(200)).await.unwrap();

    assert_eq!(
        count_for(&pool, open_disputes, payment).await,
        1,
        "the dispute stays open beside missing_externally"
    );
    assert_eq!(
        count_for(
            &pool,
            "SELECT count(*) FROM reconciliation_findings
              WHERE payment_id = $1 AND kind = 'missing_externally' AND resolved_at IS NULL",
            payment
        )
        .await,
        1
    );
}
