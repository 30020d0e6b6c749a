//! The application's own `payments` (docs/schema.md), created before `migrate`:
//! its status words (`RECONCILER_LOCAL_STATUSES`) both ways, read and
//! written, and amounts in major units (`RECONCILER_AMOUNT_UNIT=major`) in
//! two-, zero- and three-decimal currencies.

use crate::support::arrange;
use crate::support::stripe_fake::StripeFake;
use crate::support::*;
use serde_json::json;
use sqlx::PgPool;
use stripe_reconciler::config::{AmountUnit, ColumnName, Settings, StatusMap};
use stripe_reconciler::reconcile::Verdict;
use stripe_reconciler::repair::{drain_with, RepairOptions};
use tokio_util::sync::CancellationToken;

const WORDS: &str = "pending=awaiting_payment,pending;paid=complete,paid;\
                     failed=canceled,expired;refunded=refunded,partially_refunded";

/// An application's `payments` with its own words (a CHECK the reconciler
/// must respect) and an amount in major units, then the reconciler's
/// migrations over it.
async fn application_schema(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE payments (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text,
             status text NOT NULL CHECK (status IN ('awaiting_payment', 'complete', 'canceled',
                                                    'expired', 'refunded', 'on_hold')),
             total numeric(14,3),
             total_cents integer,
             currency text,
             version bigint NOT NULL DEFAULT 0,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now());
         CREATE INDEX payments_pi ON payments (stripe_payment_intent_id);",
    )
    .execute(pool)
    .await
    .unwrap();
    stripe_reconciler::MIGRATOR.run(pool).await.unwrap();
}

fn with_words() -> Settings {
    let mut s = settings(200);
    s.schema.statuses = StatusMap::parse(WORDS).unwrap();
    s
}

async fn kinds(pool: &PgPool, payment: i64) -> Vec<String> {
    findings_of(pool, payment)
        .await
        .into_iter()
        .map(|f| f.kind)
        .collect()
}

#[sqlx::test(migrations = false)]
async fn the_applications_status_words_are_read_and_written(pool: PgPool) {
    application_schema(&pool).await;
    let stripe = StripeFake::start().await;
    let rows = [
        (
            "pi_Waiting",
            "awaiting_payment",
            "requires_payment_method",
            0,
        ),
        ("pi_Complete", "complete", "succeeded", 0),
        ("pi_Canceled", "canceled", "canceled", 0),
        ("pi_Refunded", "refunded", "succeeded", 1099),
        ("pi_Missed", "awaiting_payment", "succeeded", 0),
        ("pi_NoRefund", "refunded", "succeeded", 0),
        ("pi_OnHold", "on_hold", "succeeded", 0),
    ];
    let mut ids = Vec::new();
    for (pi, word, external, refunded) in rows {
        let p = arrange::payment(pi)
            .local(word)
            .stripe(external)
            .refunded(refunded);
        ids.push(p.insert(&pool, &stripe).await.id);
    }
    let [waiting, complete, canceled, refunded, missed, no_refund, on_hold] = ids[..] else {
        unreachable!()
    };

    let report = scan(&pool, &stripe, &with_words()).await;

    assert_eq!(report.verdicts.get(Verdict::InSync), 4, "{report:?}");
    for in_sync in [waiting, complete, canceled, refunded] {
        assert_eq!(
            kinds(&pool, in_sync).await,
            Vec::<String>::new(),
            "no false finding"
        );
    }
    assert_eq!(kinds(&pool, missed).await, ["missed_success"]);
    let f = findings_of(&pool, no_refund).await;
    assert_eq!(
        f.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(),
        ["refunded_locally_not_externally"]
    );
    assert_eq!(f[0].details.as_ref().unwrap()["amount_refunded"], json!(0));
    let f = findings_of(&pool, on_hold).await;
    assert_eq!(
        f.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(),
        ["unexpected:on_hold->succeeded"]
    );
    assert_eq!(
        f[0].details.as_ref().unwrap()["local_status"],
        json!("on_hold")
    );

    // The missed success is repaired to the application's word for paid.
    let statuses = StatusMap::parse(WORDS).unwrap();
    let report = drain_with(
        &pool,
        RepairOptions::default(),
        &statuses,
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(report.applied, 1, "{report:?}");
    assert_eq!(status_of(&pool, missed).await, ("complete".to_owned(), 1));
    let f = findings_of(&pool, missed).await;
    assert_eq!(
        (f[0].open, f[0].resolution.as_deref()),
        (false, Some("repaired"))
    );
    // Nothing else was written.
    for untouched in [waiting, complete, canceled, refunded, no_refund, on_hold] {
        assert_eq!(status_of(&pool, untouched).await.1, 0);
    }
}

#[sqlx::test(migrations = false)]
async fn the_writer_guards_on_every_word_of_pending(pool: PgPool) {
    application_schema(&pool).await;
    let statuses =
        StatusMap::parse("pending=awaiting_payment,pending;paid=complete;failed=canceled,expired")
            .unwrap();
    let waiting = insert_payment(&pool, "pi_A", "awaiting_payment", 3600).await;
    let expired = insert_payment(&pool, "pi_B", "expired", 3600).await;
    let to_fail = insert_payment(&pool, "pi_C", "awaiting_payment", 3600).await;

    let done = stripe_reconciler::repair::apply_payment_succeeded(
        &pool,
        &statuses,
        &waiting.into(),
        None,
        "webhook",
    )
    .await
    .unwrap();
    assert!(done.changed);
    assert_eq!(status_of(&pool, waiting).await.0, "complete");
    let done = stripe_reconciler::repair::apply_payment_succeeded(
        &pool,
        &statuses,
        &expired.into(),
        None,
        "webhook",
    )
    .await
    .unwrap();
    assert!(!done.changed, "expired is failed, not pending");
    assert_eq!(status_of(&pool, expired).await.0, "expired");
    stripe_reconciler::repair::apply_payment_canceled(
        &pool,
        &statuses,
        &to_fail.into(),
        None,
        "webhook",
    )
    .await
    .unwrap();
    assert_eq!(
        status_of(&pool, to_fail).await.0,
        "canceled",
        "the first word of failed"
    );
}

fn major(mut settings: Settings) -> Settings {
    settings.schema.amount_column =
        Some(ColumnName::parse("RECONCILER_AMOUNT_COLUMN", "total").unwrap());
    settings.schema.currency_column =
        Some(ColumnName::parse("RECONCILER_CURRENCY_COLUMN", "currency").unwrap());
    settings.schema.amount_unit = AmountUnit::Major;
    settings
}

#[sqlx::test(migrations = false)]
async fn major_unit_amounts_are_compared_with_each_currencys_exponent(pool: PgPool) {
    application_schema(&pool).await;
    let stripe = StripeFake::start().await;
    let rows = [
        ("pi_Usd", "12.00", "USD", 1200, "usd"),
        ("pi_Jpy", "1200", "JPY", 1200, "jpy"),
        ("pi_Kwd", "1.234", "KWD", 1234, "kwd"),
        ("pi_Tenth", "12.345", "USD", 1234, "usd"),
        ("pi_Cents", "12.00", "usd", 1250, "usd"),
    ];
    let mut ids = Vec::new();
    for (pi, total, currency, amount, stripe_currency) in rows {
        let p = arrange::payment(pi)
            .local("complete")
            .columns(json!({"total": total, "currency": currency}))
            .charged(amount, stripe_currency);
        ids.push(p.insert(&pool, &stripe).await.id);
    }
    let [usd, jpy, kwd, tenth, cents] = ids[..] else {
        unreachable!()
    };

    let report = scan(&pool, &stripe, &major(with_words())).await;

    assert_eq!(report.verdicts.get(Verdict::InSync), 3, "{report:?}");
    for in_sync in [usd, jpy, kwd] {
        assert_eq!(kinds(&pool, in_sync).await, Vec::<String>::new());
    }
    let f = findings_of(&pool, tenth).await;
    assert_eq!(
        f.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(),
        ["amount_mismatch"]
    );
    let d = f[0].details.clone().unwrap();
    assert_eq!(
        (&d["local_amount_major"], &d["exponent"]),
        (&json!("12.345"), &json!(2)),
        "{d}"
    );
    assert!(
        d["reason"]
            .as_str()
            .unwrap()
            .contains("not a whole number of minor units"),
        "{d}"
    );
    let f = findings_of(&pool, cents).await;
    assert_eq!(f[0].kind, "amount_mismatch");
    let d = f[0].details.clone().unwrap();
    assert_eq!(
        (&d["local_amount"], &d["stripe_amount"]),
        (&json!(1200), &json!(1250)),
        "{d}"
    );
}

fn run_env(
    pool: &PgPool,
    stripe: &StripeFake,
    extra: &[(&'static str, &str)],
) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DATABASE_URL", database_url(pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_READ_MODE", "retrieve".to_owned()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    env
}

async fn run(env: Vec<(&'static str, String)>) -> (Option<i32>, String) {
    let out = reconciler_output(&["run"], &env).await;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[sqlx::test(migrations = false)]
async fn a_malformed_status_map_or_unit_exits_78_naming_the_variable(pool: PgPool) {
    application_schema(&pool).await;
    let stripe = StripeFake::start().await;
    for (extra, var, says) in [
        (
            vec![(
                "RECONCILER_LOCAL_STATUSES",
                "pending=pending;paid=complete,pending;failed=failed",
            )],
            "RECONCILER_LOCAL_STATUSES",
            "mapped twice",
        ),
        (
            vec![(
                "RECONCILER_LOCAL_STATUSES",
                "pending=pending;paid=paid;failed=failed;shipped=sent",
            )],
            "RECONCILER_LOCAL_STATUSES",
            "not a local state",
        ),
        (
            vec![("RECONCILER_LOCAL_STATUSES", "pending=pending;paid=paid")],
            "RECONCILER_LOCAL_STATUSES",
            "failed is missing",
        ),
        (
            vec![
                ("RECONCILER_AMOUNT_UNIT", "major"),
                ("RECONCILER_AMOUNT_COLUMN", "total"),
            ],
            "RECONCILER_AMOUNT_UNIT",
            "RECONCILER_CURRENCY_COLUMN",
        ),
        (
            vec![
                ("RECONCILER_AMOUNT_UNIT", "major"),
                ("RECONCILER_AMOUNT_COLUMN", "total_cents"),
                ("RECONCILER_CURRENCY_COLUMN", "currency"),
            ],
            "RECONCILER_AMOUNT_UNIT",
            "an integer column holds minor units",
        ),
        (
            vec![
                ("RECONCILER_AMOUNT_COLUMN", "total"),
                ("RECONCILER_CURRENCY_COLUMN", "currency"),
            ],
            "RECONCILER_AMOUNT_COLUMN",
            "RECONCILER_AMOUNT_UNIT=major",
        ),
    ] {
        let (code, text) = run(run_env(&pool, &stripe, &extra)).await;
        assert_eq!(code, Some(78), "{extra:?}: {text}");
        assert!(
            text.contains(var) && text.contains(says),
            "{extra:?}: {text}"
        );
    }
    assert_eq!(requests(&stripe).await, 0, "refused before any read");
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings").await,
        0
    );
}

#[sqlx::test(migrations = false)]
async fn a_numeric_column_in_major_units_is_accepted_by_run(pool: PgPool) {
    application_schema(&pool).await;
    let stripe = StripeFake::start().await;
    let id = arrange::payment("pi_Major")
        .local("complete")
        .columns(json!({"total": 10.99, "currency": "usd"}))
        .insert(&pool, &stripe)
        .await
        .id;
    let (code, text) = run(run_env(
        &pool,
        &stripe,
        &[
            ("RECONCILER_AMOUNT_UNIT", "major"),
            ("RECONCILER_AMOUNT_COLUMN", "total"),
            ("RECONCILER_CURRENCY_COLUMN", "currency"),
            ("RECONCILER_LOCAL_STATUSES", WORDS),
        ],
    ))
    .await;
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(kinds(&pool, id).await, Vec::<String>::new(), "{text}");
}
