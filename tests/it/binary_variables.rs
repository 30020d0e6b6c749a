//! The variables whose effect was tested only in the library, through the
//! shipped binary and the command that reads them (docs/testing.md,
//! "Variables × commands"): each test runs `stripe-reconciler` with the
//! variable set and asserts what a user would check (findings, the fake
//! Stripe's counts, the summary, `status`, the log), and fails when the
//! command's wiring of the variable breaks (checked by breaking it).

use std::process::Output;

use serde_json::json;
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
