//! Connect (docs/connect.md), what is unusable: a connected account whose every
//! read is a 404 is unreachable (its rows UNVERIFIABLE, not exit 78); a
//! malformed account value is never sent; without the account column,
//! `missing_externally` says it could be a connected account; an unusable
//! account column exits 78 naming the variable.

use crate::support::connected::*;
use crate::support::pushgateway::{self, value};
use crate::support::stripe_fake::StripeFake;
use crate::support::*;
use serde_json::Value;
use sqlx::PgPool;
use stripe_reconciler::config::ReadMode;

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_connected_account_whose_every_read_is_404_is_unreachable_not_exit_78(pool: PgPool) {
    add_account_column(&pool).await;
    let t0 = an_hour_ago() - 7200;
    let stripe = StripeFake::start().await;
    stripe.add(None, "pi_Plat1", "succeeded", t0);
    insert_on(&pool, None, "pi_Plat1", "paid", t0).await;
    // Twelve rows naming an account this key's platform does not have.
    for i in 0..12 {
        insert_on(
            &pool,
            Some("acct_1WrongId"),
            &format!("pi_Wrong{i}"),
            "paid",
            t0 + 1 + i,
        )
        .await;
    }
    let gw = pushgateway::start().await;
    let env = vec![
        ("PUSHGATEWAY_URL", gw.url.clone()),
        ("DATABASE_URL", database_url(&pool)),
        ("STRIPE_API_KEY", API_KEY.to_owned()),
        ("STRIPE_API_BASE", stripe.uri()),
        ("RECONCILER_RATE_LIMIT_RPS", "500".to_owned()),
        ("RECONCILER_BATCHES_PER_RUN", "10".to_owned()),
        ("RECONCILER_READ_MODE", "retrieve".to_owned()),
        ("RECONCILER_ACCOUNT_COLUMN", "stripe_account".to_owned()),
    ];

    let out = reconciler_output(&["run"], &env).await;

    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let summary: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(summary["stripe_accounts_unreachable"], 1, "{summary}");
    let pushed = gw.scrape().await;
    assert_eq!(
        value(
            &pushed,
            "stripe_reconciler_stripe_accounts_unreachable",
            &[("job", "payments-vs-stripe")]
        ),
        Some(1.0),
        "{pushed}"
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE kind = 'missing_externally'"
        )
        .await,
        0,
        "not missing_externally: the account id or key is wrong"
    );
    let error: String =
        sqlx::query_scalar("SELECT last_error FROM reconciliation_unverifiable LIMIT 1")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        error.contains("acct_1WrongId") && error.contains("404"),
        "{error}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_malformed_account_value_is_never_sent_and_its_row_is_unverifiable(pool: PgPool) {
    add_account_column(&pool).await;
    let t0 = an_hour_ago() - 7200;
    let stripe = StripeFake::start().await;
    stripe.add(None, "pi_Plat1", "succeeded", t0);
    insert_on(&pool, None, "pi_Plat1", "paid", t0).await;
    insert_on(&pool, Some(""), "pi_Empty1", "paid", t0 + 1).await;
    stripe.add(None, "pi_Empty1", "succeeded", t0 + 1);
    let bad = ["acct_1\r\nX-Injected: 1", "acct_1 2", "cus_1Other", "acct_"];
    let mut bad_rows = Vec::new();
    for (i, value) in bad.iter().enumerate() {
        bad_rows.push(
            insert_on(
                &pool,
                Some(value),
                &format!("pi_Bad{i}"),
                "paid",
                t0 + 2 + i as i64,
            )
            .await,
        );
    }

    for mode in [ReadMode::Retrieve, ReadMode::List] {
        forget_scan_state(&pool).await;
        run(&pool, &stripe, &connect_settings(mode)).await;
        assert!(findings_with_accounts(&pool).await.is_empty(), "{mode:?}");
    }

    assert!(
        stripe.accounts_asked().iter().all(Option::is_none),
        "no header was ever sent: the only well-formed rows are the platform's"
    );
    let retrieved = stripe.retrieved();
    assert!(
        !retrieved.iter().any(|id| id.starts_with("pi_Bad")),
        "{retrieved:?}"
    );
    let errors: Vec<(i64, String)> = sqlx::query_as(
        "SELECT payment_id, last_error FROM reconciliation_unverifiable ORDER BY payment_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(errors.iter().map(|e| e.0).collect::<Vec<_>>(), bad_rows);
    assert!(
        errors
            .iter()
            .all(|(_, e)| e.contains("RECONCILER_ACCOUNT_COLUMN")),
        "{errors:?}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn without_the_account_column_missing_externally_says_it_could_be_a_connected_account(
    pool: PgPool,
) {
    // The platform holds one of the two; the other is Stripe's 404.
    let stripe = StripeFake::start().await;
    stripe.add(None, "pi_Found1", "succeeded", an_hour_ago());
    insert_payment(&pool, "pi_Found1", "paid", 3600).await;
    let missing = insert_payment(&pool, "pi_OnAConnectedAccount", "paid", 3600).await;

    scan(&pool, &stripe, &settings(100)).await;

    let details: Value = sqlx::query_scalar(
        "SELECT details FROM reconciliation_findings WHERE payment_id = $1 AND kind = 'missing_externally'",
    )
    .bind(missing)
    .fetch_one(&pool)
    .await
    .unwrap();
    let hint = details["hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains("connected account") && hint.contains("RECONCILER_ACCOUNT_COLUMN"),
        "{details}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn an_unusable_account_column_exits_78_naming_the_variable_in_run_and_events(pool: PgPool) {
    sqlx::query("ALTER TABLE payments ADD COLUMN account_number bigint")
        .execute(&pool)
        .await
        .unwrap();
    let stripe = StripeFake::start().await;
    for (column, says) in [
        ("no_such_column", "has no column"),
        ("account_number", "bigint"),
    ] {
        let env = vec![
            ("DATABASE_URL", database_url(&pool)),
            ("STRIPE_API_KEY", API_KEY.to_owned()),
            ("STRIPE_API_BASE", stripe.uri()),
            ("RECONCILER_ACCOUNT_COLUMN", column.to_owned()),
        ];
        // `events` checks the columns at start as `run` does.
        for command in ["run", "events"] {
            let out = reconciler_output(&[command], &env).await;
            assert_eq!(
                out.status.code(),
                Some(78),
                "{command}: {}",
                all_output(&out)
            );
            let text = all_output(&out);
            assert!(
                text.contains("RECONCILER_ACCOUNT_COLUMN") && text.contains(says),
                "{command}: {text}"
            );
        }
    }
    assert!(stripe.seen().is_empty(), "{:#?}", stripe.seen());
}
