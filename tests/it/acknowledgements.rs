//! Acknowledgements (docs/findings.md, "Acknowledgements"): a finding a person resolved by hand
//! is not
//! opened again while what it was resolved for stays the same (kind, local
//! and Stripe status, and the details that matter for its kind:
//! `src/reconcile/acknowledgement.rs`, docs/findings.md), and a changed
//! detail that matters opens a new one. One table over every kind that can be
//! acknowledged, all in one database: scan, resolve each by hand, scan again
//! (it holds), change each case's detail, scan again (it reopens).

use crate::support::stripe_fake::{self, StripeFake};
use serde_json::{json, Value};
use sqlx::PgPool;
use stripe_reconciler::config::{ColumnName, Settings, StatusMap};
use stripe_reconciler::reconcile::Rules;

use crate::support::arrange::{charge, clean, intent};
use crate::support::*;

const DAY: i64 = 86_400;

/// What Stripe answers for a case's PaymentIntent.
enum Answer {
    Object(Value),
    NotFound,
}

/// How a case's drift changes in a detail that matters.
enum Change {
    /// Stripe answers this instead.
    Stripe(Value),
    /// The row is updated (`SET …`), then left an hour in the past.
    Row(&'static str),
    /// Nothing can change but the statuses, which are the kind itself.
    Nothing,
}

struct Case {
    kind: &'static str,
    pi: &'static str,
    local: &'static str,
    /// `(amount_cents, currency)` of the row.
    money: (Option<i64>, &'static str),
    answer: Answer,
    change: Change,
}

fn case(
    kind: &'static str,
    pi: &'static str,
    local: &'static str,
    answer: Answer,
    change: Change,
) -> Case {
    Case {
        kind,
        pi,
        local,
        money: (Some(1099), "usd"),
        answer,
        change,
    }
}

/// `id` in `status`, created `days` ago.
fn aged(id: &str, status: &str, days: f64) -> Value {
    let mut pi = payment_intent(id, status);
    pi["created"] = json!(chrono::Utc::now().timestamp() - (days * DAY as f64) as i64);
    pi
}

/// A succeeded PaymentIntent whose charge was not expanded: the money is
/// unproven and Stripe's status is not recorded (the status drift is).
fn unexpanded(id: &str) -> Value {
    intent(id, "succeeded", json!("ch_3NotExpanded"))
}

fn cases() -> Vec<Case> {
    use Answer::{NotFound, Object as Is};
    use Change::{Nothing, Row, Stripe};
    vec![
        case(
            "missed_success",
            "pi_AckMissed",
            "pending",
            Is(clean("pi_AckMissed")),
            Stripe(unexpanded("pi_AckMissed")),
        ),
        case(
            "missed_cancel",
            "pi_AckCancel",
            "pending",
            Is(payment_intent("pi_AckCancel", "canceled")),
            Nothing,
        ),
        case(
            "paid_locally_not_externally",
            "pi_AckProcessing",
            "paid",
            Is(payment_intent("pi_AckProcessing", "processing")),
            Stripe(payment_intent("pi_AckProcessing", "requires_action")),
        ),
        case(
            "unexpected:failed->succeeded",
            "pi_AckUnexpected",
            "failed",
            Is(clean("pi_AckUnexpected")),
            Stripe(unexpanded("pi_AckUnexpected")),
        ),
        case(
            "missing_externally",
            "pi_AckGone",
            "pending",
            NotFound,
            Row("status = 'failed'"),
        ),
        case(
            "invalid_payment_intent_id",
            "not-a-payment-intent",
            "pending",
            NotFound,
            Row("status = 'paid'"),
        ),
        case(
            "refunded",
            "pi_AckRefund",
            "paid",
            Is(intent(
                "pi_AckRefund",
                "succeeded",
                charge("ch_3R", "pi_AckRefund", 1099, 200, false),
            )),
            Stripe(intent(
                "pi_AckRefund",
                "succeeded",
                charge("ch_3R", "pi_AckRefund", 1099, 300, false),
            )),
        ),
        case(
            "refunded_locally_not_externally",
            "pi_AckNotRefunded",
            "refunded",
            Is(clean("pi_AckNotRefunded")),
            Stripe(intent(
                "pi_AckNotRefunded",
                "succeeded",
                charge("ch_3N", "pi_AckNotRefunded", 2000, 0, false),
            )),
        ),
        case(
            "disputed",
            "pi_AckDispute",
            "paid",
            Is(intent(
                "pi_AckDispute",
                "succeeded",
                charge("ch_3D", "pi_AckDispute", 1099, 0, true),
            )),
            Stripe(intent(
                "pi_AckDispute",
                "succeeded",
                charge("ch_3D", "pi_AckDispute", 2000, 0, true),
            )),
        ),
        Case {
            money: (Some(1000), "usd"),
            ..case(
                "amount_mismatch",
                "pi_AckAmount",
                "paid",
                Is(clean("pi_AckAmount")),
                Row("amount_cents = 1200"),
            )
        },
        Case {
            money: (None, "usd"),
            ..case(
                "amount_mismatch",
                "pi_AckNoAmount",
                "paid",
                Is(clean("pi_AckNoAmount")),
                Row("amount_cents = 1000"),
            )
        },
        Case {
            money: (Some(1099), "eur"),
            ..case(
                "currency_mismatch",
                "pi_AckCurrency",
                "paid",
                Is(clean("pi_AckCurrency")),
                Row("currency = 'gbp'"),
            )
        },
        case(
            "authorization_expiring",
            "pi_AckHold",
            "pending",
            Is(aged("pi_AckHold", "requires_capture", 6.0)),
            Stripe(aged("pi_AckHold", "requires_capture", 6.5)),
        ),
        case(
            "stuck_processing",
            "pi_AckSlow",
            "pending",
            Is(aged("pi_AckSlow", "processing", 15.0)),
            Stripe(aged("pi_AckSlow", "processing", 16.0)),
        ),
        case(
            "abandoned",
            "pi_AckAbandoned",
            "pending",
            Is(aged("pi_AckAbandoned", "requires_payment_method", 8.0)),
            Stripe(aged("pi_AckAbandoned", "requires_payment_method", 9.0)),
        ),
    ]
}

/// The scan's settings for the table: amount and currency columns, the
/// `refunded` word, and `abandoned` on (7 days).
fn ack_settings() -> Settings {
    let mut s = settings(200);
    s.schema.amount_column =
        Some(ColumnName::parse("RECONCILER_AMOUNT_COLUMN", "amount_cents").unwrap());
    s.schema.currency_column =
        Some(ColumnName::parse("RECONCILER_CURRENCY_COLUMN", "currency").unwrap());
    s.schema.statuses =
        StatusMap::parse("pending=pending;paid=paid;failed=failed;refunded=refunded").unwrap();
    s.rules = Rules {
        abandoned_after_seconds: Some(7 * DAY),
        ..Rules::default()
    };
    s
}

/// Stripe (the one fake) holds `answer` for `pi`, replacing what it held.
fn answer(stripe: &StripeFake, pi: &str, answer: &Answer) {
    match answer {
        Answer::Object(body) => {
            stripe.add_object(None, body.clone());
        }
        Answer::NotFound => stripe.delete(pi),
    }
}

/// `(open, resolution)` of every finding of `kind` for `payment`, oldest first.
async fn of_kind(pool: &PgPool, payment: i64, kind: &str) -> Vec<(bool, Option<String>)> {
    findings_of(pool, payment)
        .await
        .into_iter()
        .filter(|f| f.kind == kind)
        .map(|f| (f.open, f.resolution))
        .collect()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_acknowledgement_holds_per_kind_until_a_detail_that_matters_changes(pool: PgPool) {
    sqlx::raw_sql(
        "ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_status_check,
                              ADD COLUMN amount_cents bigint, ADD COLUMN currency text",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stripe = StripeFake::start().await;
    let s = ack_settings();
    let cases = cases();
    let mut ids = Vec::new();
    for c in &cases {
        let id = insert_payment(&pool, c.pi, c.local, 3600).await;
        sqlx::query("UPDATE payments SET amount_cents = $2, currency = $3 WHERE id = $1")
            .bind(id)
            .bind(c.money.0)
            .bind(c.money.1)
            .execute(&pool)
            .await
            .unwrap();
        answer(&stripe, c.pi, &c.answer);
        ids.push(id);
    }

    scan(&pool, &stripe, &s).await;
    let mut conn = pool.acquire().await.unwrap();
    for (c, id) in cases.iter().zip(&ids) {
        let f = findings_of(&pool, *id).await;
        assert_eq!(
            f.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(),
            [c.kind],
            "{} ({}): the arrangement",
            c.kind,
            c.pi
        );
        assert!(stripe_reconciler::store::findings::resolve_manually(
            &mut conn,
            f[0].id,
            "alice",
            "known and accepted"
        )
        .await
        .unwrap());
    }
    drop(conn);

    // The next cycle, nothing changed: every acknowledgement holds.
    let report = rescan(&pool, &stripe, &s).await;
    for (c, id) in cases.iter().zip(&ids) {
        assert_eq!(
            of_kind(&pool, *id, c.kind).await,
            [(false, Some("manual".to_owned()))],
            "{} ({}): reopened although nothing changed",
            c.kind,
            c.pi
        );
    }
    assert_eq!(report.findings_created, 0);

    // A detail that matters changes: a new finding opens.
    for (c, id) in cases.iter().zip(&ids) {
        match &c.change {
            Change::Stripe(body) => answer(&stripe, c.pi, &Answer::Object(body.clone())),
            Change::Row(set) => {
                sqlx::query(&format!(
                    "UPDATE payments SET {set}, updated_at = now() - interval '1 hour' WHERE id = $1"
                ))
                .bind(id)
                .execute(&pool)
                .await
                .unwrap();
            }
            Change::Nothing => {}
        }
    }
    rescan(&pool, &stripe, &s).await;
    for (c, id) in cases.iter().zip(&ids) {
        let want: &[(bool, Option<String>)] = match c.change {
            Change::Nothing => &[(false, Some("manual".to_owned()))],
            _ => &[(false, Some("manual".to_owned())), (true, None)],
        };
        assert_eq!(
            of_kind(&pool, *id, c.kind).await,
            want,
            "{} ({}): after the change",
            c.kind,
            c.pi
        );
    }
}

/// Never acknowledged: `persistently_unverifiable` says the reconciler could
/// not check the row; resolving it by hand says the cause was fixed, so a
/// cause still there is reported again.
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_persistent_failure_resolved_by_hand_is_reported_again(pool: PgPool) {
    let stripe = StripeFake::start().await;
    let payment = insert_payment(&pool, "pi_AckDown", "pending", 3600).await;
    stripe.fail_object(stripe_fake::RETRIEVE, "pi_AckDown", server_error());
    let s = settings(200);
    for _ in 0..s.run.unverifiable_cycles {
        one_cycle(&pool, &stripe, &s).await;
    }
    let f = findings_of(&pool, payment).await;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, "persistently_unverifiable");
    let mut conn = pool.acquire().await.unwrap();
    assert!(stripe_reconciler::store::findings::resolve_manually(
        &mut conn,
        f[0].id,
        "alice",
        "Stripe was down"
    )
    .await
    .unwrap());
    drop(conn);
    one_cycle(&pool, &stripe, &s).await;
    assert_eq!(
        of_kind(&pool, payment, "persistently_unverifiable").await,
        [(false, Some("manual".to_owned())), (true, None)]
    );
}

/// Runs batches until one wraps the cursor (one cycle).
async fn one_cycle(pool: &PgPool, stripe: &StripeFake, s: &Settings) {
    for _ in 0..50 {
        if scan(pool, stripe, s).await.wrapped {
            return;
        }
    }
    panic!("the cursor did not wrap in 50 batches");
}
