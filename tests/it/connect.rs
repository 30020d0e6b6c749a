//! Connect (docs/connect.md): rows of connected accounts (`RECONCILER_ACCOUNT_COLUMN`)
//! read with `Stripe-Account`, against the shared fake Stripe
//! (`support::stripe_fake`), which answers 404 unless the header names the
//! account the PaymentIntent belongs to, like Stripe does. An account the platform lost access to
//! leaves only its own rows UNVERIFIABLE; the run goes on. `findings list`
//! shows the account. Unusable accounts and columns are `connect_faults`;
//! the arrangement is `support::connected`.

use crate::support::connected::*;
use crate::support::stripe_fake::{no_access, StripeFake, LIST, RETRIEVE};
use crate::support::*;
use serde_json::Value;
use sqlx::PgPool;
use stripe_reconciler::config::{ReadMode, StripeSettings};
use wiremock::matchers::{method, path_regex, query_param};
use wiremock::Mock;

const A: &str = "acct_1AlphaConnected";
const B: &str = "acct_1BravoConnected";
const REVOKED: &str = "acct_1RevokedAccess";

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_platform_and_two_connected_accounts_each_get_their_drift_found_in_both_read_modes(
    pool: PgPool,
) {
    add_account_column(&pool).await;
    let t0 = an_hour_ago() - 7200;
    let stripe = StripeFake::start().await;
    let mut expected = Vec::new();
    let mut n = 0;
    for account in [None, Some(A), Some(B)] {
        // Three in sync, one pending locally whose PaymentIntent succeeded.
        for (local, remote) in [
            ("paid", "succeeded"),
            ("failed", "canceled"),
            ("paid", "succeeded"),
            ("pending", "succeeded"),
        ] {
            n += 1;
            let pi = format!("pi_Conn{n}");
            stripe.add(account, &pi, remote, t0 + n);
            let id = insert_on(&pool, account, &pi, local, t0 + n).await;
            if local == "pending" {
                expected.push((id, "missed_success".to_owned(), account.map(str::to_owned)));
            }
        }
    }

    for mode in [ReadMode::Retrieve, ReadMode::List] {
        forget_scan_state(&pool).await;
        let lists = |a| stripe.count_on(Some(a), LIST);
        let (lists_a, lists_b) = (lists(A), lists(B));
        let summary = run(&pool, &stripe, &connect_settings(mode)).await;
        assert_eq!(summary.stripe_accounts_unreachable, 0, "{mode:?}");
        assert_eq!(
            findings_with_accounts(&pool).await,
            expected,
            "{mode:?}: one missed_success per account, each naming its account, no missing_externally"
        );
        if mode == ReadMode::List {
            assert!(
                lists(A) > lists_a && lists(B) > lists_b,
                "each account listed with its own header"
            );
            assert_eq!(stripe.failed_list_pages(), 0, "{:#?}", stripe.seen());
        }
        // The repair commands carry the account; the platform's carry none.
        let payloads: Vec<Value> = outbox(&pool).await.into_iter().map(|o| o.payload).collect();
        let accounts: Vec<Option<&str>> = payloads
            .iter()
            .map(|p| p.get("stripe_account_id").and_then(Value::as_str))
            .collect();
        assert_eq!(accounts, vec![None, Some(A), Some(B)], "{payloads:?}");
    }
    let headers = stripe.accounts_asked();
    assert!(headers.contains(&Some(A.to_owned())) && headers.contains(&Some(B.to_owned())));
    assert!(
        headers.contains(&None),
        "the platform's rows go without the header"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_revoked_account_leaves_its_rows_unverifiable_while_the_others_are_recorded(
    pool: PgPool,
) {
    add_account_column(&pool).await;
    let t0 = an_hour_ago() - 7200;
    let stripe = StripeFake::start().await;
    stripe.add(None, "pi_Plat1", "succeeded", t0);
    let plat = insert_on(&pool, None, "pi_Plat1", "pending", t0).await;
    stripe.add(Some(A), "pi_Alpha1", "canceled", t0 + 1);
    let alpha = insert_on(&pool, Some(A), "pi_Alpha1", "pending", t0 + 1).await;
    let mut revoked_rows = Vec::new();
    for i in 0..8 {
        revoked_rows.push(
            insert_on(
                &pool,
                Some(REVOKED),
                &format!("pi_Rev{i}"),
                "paid",
                t0 + 2 + i,
            )
            .await,
        );
    }
    stripe.refuse(REVOKED);
    // Stripe is not down: but a probe that fails would end the batch as an
    // outage if the revoked account's rows counted as failed reads.
    Mock::given(method("GET"))
        .and(path_regex("^/v1/payment_intents$"))
        .and(query_param("limit", "1"))
        .respond_with(server_error())
        .with_priority(1)
        .mount(&stripe)
        .await;

    for mode in [ReadMode::Retrieve, ReadMode::List] {
        forget_scan_state(&pool).await;
        let reads_before = reads_on(&stripe, REVOKED);
        let s = Settings {
            // One read at a time: the first refusal stops the reads of that account.
            stripe: StripeSettings {
                max_in_flight: 1,
                ..connect_settings(mode).stripe
            },
            ..connect_settings(mode)
        };
        let summary = run(&pool, &stripe, &s).await;

        assert_eq!(
            summary.stripe_accounts_unreachable, 1,
            "{mode:?}: {summary:?}"
        );
        assert_eq!(
            findings_with_accounts(&pool).await,
            vec![
                (plat, "missed_success".to_owned(), None),
                (alpha, "missed_cancel".to_owned(), Some(A.to_owned())),
            ],
            "{mode:?}"
        );
        assert_eq!(
            reads_on(&stripe, REVOKED) - reads_before,
            1,
            "{mode:?}: no more reads spent on a revoked account"
        );
        let errors: Vec<(i64, Option<String>)> = sqlx::query_as(
            "SELECT payment_id, last_error FROM reconciliation_unverifiable ORDER BY payment_id",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(errors.len(), 8, "{mode:?}: {errors:?}");
        for (id, error) in &errors {
            assert!(revoked_rows.contains(id));
            let error = error.as_deref().unwrap_or_default();
            assert!(
                error.contains(&format!("no access to connected account {REVOKED}")),
                "{error}"
            );
            assert!(
                !error.contains("sk_test"),
                "Stripe's message quotes the key: not kept: {error}"
            );
        }
    }
}

/// Requests the fake received with `Stripe-Account: account`.
fn reads_on(stripe: &StripeFake, account: &str) -> usize {
    stripe
        .accounts_asked()
        .iter()
        .filter(|h| h.as_deref() == Some(account))
        .count()
}

/// The gateway tells Stripe's refusal of a connected account apart from a
/// rejected key: only a read made with `Stripe-Account` whose error says the
/// platform has no access (or `account_invalid`) spares the run.
#[tokio::test]
async fn only_a_refused_connected_account_read_is_account_unreachable() {
    use stripe_reconciler::stripe::{AccountId, GatewayError, PaymentIntentId};
    let stripe = StripeFake::start().await;
    stripe
        .refuse(REVOKED)
        .answer_on(
            Some("acct_1Invalid"),
            RETRIEVE,
            err(400, "invalid_request_error", "account_invalid"),
        )
        .answer_on(
            Some("acct_1BadKey"),
            RETRIEVE,
            err(401, "invalid_request_error", "api_key_invalid"),
        )
        // The platform's own read with Stripe's no-access body is still the key's fault.
        .answer_on(None, RETRIEVE, no_access("acct_1Platform"));
    let gw = gateway(&stripe);
    let pi = PaymentIntentId::parse("pi_1").unwrap();
    let on = |a: &str| AccountId::parse(a).unwrap();

    let revoked = gw.payment_intent_on(Some(&on(REVOKED)), &pi).await;
    assert!(
        matches!(&revoked, Err(GatewayError::AccountUnreachable { status: 403, account, .. }) if account == REVOKED),
        "{revoked:?}"
    );
    let invalid = gw.payment_intent_on(Some(&on("acct_1Invalid")), &pi).await;
    assert!(
        matches!(&invalid, Err(GatewayError::AccountUnreachable { status: 400, code: Some(c), .. }) if c == "account_invalid"),
        "{invalid:?}"
    );
    let bad_key = gw.payment_intent_on(Some(&on("acct_1BadKey")), &pi).await;
    assert!(
        matches!(bad_key, Err(GatewayError::Rejected { status: 401, .. })),
        "{bad_key:?}"
    );
    let platform = gw.payment_intent(&pi).await;
    assert!(
        matches!(platform, Err(GatewayError::Rejected { status: 403, .. })),
        "{platform:?}"
    );
    assert_eq!(
        gw.accounts().unreachable_count(),
        2,
        "the two refused accounts are remembered"
    );
    assert!(gw.accounts().unreachable(&on("acct_1BadKey")).is_none());
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn findings_list_shows_the_account_and_links_the_connected_accounts_payment(pool: PgPool) {
    add_account_column(&pool).await;
    let t0 = an_hour_ago() - 7200;
    let stripe = StripeFake::start().await;
    stripe.add(Some(A), "pi_AlphaDrift", "succeeded", t0);
    insert_on(&pool, Some(A), "pi_AlphaDrift", "pending", t0).await;
    run(&pool, &stripe, &connect_settings(ReadMode::Retrieve)).await;
    let env = vec![("DATABASE_URL", database_url(&pool))];

    let json =
        reconciler_output(&["findings", "list", "--json", "--dashboard", "test"], &env).await;
    let table = reconciler_output(&["findings", "list", "--dashboard", "test"], &env).await;

    assert_eq!(json.status.code(), Some(0), "{}", all_output(&json));
    let line: Value = serde_json::from_str(stdout(&json).lines().next().unwrap()).unwrap();
    assert_eq!(line["stripe_account_id"], A);
    assert_eq!(
        line["dashboard_url"],
        format!("https://dashboard.stripe.com/{A}/test/payments/pi_AlphaDrift")
    );
    let table = stdout(&table);
    assert!(table.contains("account") && table.contains(A), "{table}");
}
