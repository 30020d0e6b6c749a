//! The review loop (docs/review.md) through the real binary: `differs` in the
//! JSON and the table, the CSV round trip of 500 findings, all or nothing,
//! and every finding's history across resolve, reopen and resolve again.

use crate::support::*;
use serde_json::{json, Value};
use sqlx::PgPool;

fn env(pool: &PgPool) -> Vec<(&'static str, String)> {
    vec![
        ("DATABASE_URL", database_url(pool)),
        ("USER", "alice".to_owned()),
    ]
}

/// Records a finding on a payment as the scan would, returns its id.
async fn finding(pool: &PgPool, payment: i64, kind: &str, local: &str, details: Value) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO reconciliation_findings
                (payment_id, kind, local_status, external_status, details, last_seen_at)
         VALUES ($1, $2, $3, 'succeeded', $4, now()) RETURNING id",
    )
    .bind(payment)
    .bind(kind)
    .bind(local)
    .bind(details)
    .fetch_one(pool)
    .await
    .unwrap()
}

fn stdout(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{o:?}");
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn each_money_kind_says_what_differs_in_json_and_table(pool: PgPool) {
    let p = insert_payment(&pool, "pi_Money", "paid", 3600).await;
    let cases = [
        (
            "amount_mismatch",
            json!({"local_amount": 2000, "stripe_amount": 1999, "currency": "usd"}),
            json!({"field": "amount", "local": "20.00 USD", "stripe": "19.99 USD"}),
            "amount 20.00 ≠ 19.99 USD",
        ),
        (
            "currency_mismatch",
            json!({"local_currency": "eur", "stripe_currency": "usd"}),
            json!({"field": "currency", "local": "EUR", "stripe": "USD"}),
            "currency EUR ≠ USD",
        ),
        (
            "refunded",
            json!({"amount": 500, "amount_refunded": 500, "currency": "usd", "refund": "full"}),
            json!({"field": "amount_refunded", "local": null, "stripe": "5.00 of 5.00 USD"}),
            "refunded 5.00 of 5.00 USD",
        ),
        (
            "disputed",
            json!({"amount": 1099, "currency": "jpy"}),
            json!({"field": "disputed", "local": null, "stripe": "1099 JPY"}),
            "disputed 1099 JPY",
        ),
        (
            "refunded_locally_not_externally",
            json!({"amount": 1234, "amount_refunded": 0, "currency": "kwd"}),
            json!({"field": "amount_refunded", "local": "paid", "stripe": "0.000 of 1.234 KWD"}),
            "refunded here, 0.000 of 1.234 KWD refunded at Stripe",
        ),
        (
            "duplicate_payment_intent",
            Value::Null,
            json!({"field": "payment_intent", "local": "on several payments", "stripe": null}),
            "one PaymentIntent on several payments",
        ),
        (
            "missed_success",
            Value::Null,
            json!({"field": "status", "local": "paid", "stripe": "succeeded"}),
            "status paid ≠ succeeded",
        ),
    ];
    for (kind, details, _, _) in &cases {
        finding(&pool, p, kind, "paid", details.clone()).await;
    }
    sqlx::query(
        "INSERT INTO reconciliation_findings
                (payment_id, stripe_payment_intent_id, kind, local_status, external_status, details)
         VALUES (NULL, 'pi_Orphan', 'missing_locally', 'none', 'succeeded',
                 '{\"amount\": 1099, \"amount_received\": 1099, \"currency\": \"eur\"}')",
    )
    .execute(&pool)
    .await
    .unwrap();

    let listed = stdout(&reconciler_output(&["findings", "list", "--json"], &env(&pool)).await);
    let by_kind: std::collections::HashMap<String, Value> = listed
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| (v["kind"].as_str().unwrap().to_owned(), v["differs"].clone()))
        .collect();
    for (kind, _, want, _) in &cases {
        assert_eq!(&by_kind[*kind], want, "{kind}");
    }
    assert_eq!(
        by_kind["missing_locally"],
        json!({"field": "payment", "local": null, "stripe": "10.99 EUR"})
    );
    let table = stdout(&reconciler_output(&["findings", "list"], &env(&pool)).await);
    for (kind, _, _, phrase) in &cases {
        assert!(table.contains(phrase), "{kind}: {phrase} not in\n{table}");
    }
    assert!(
        table.contains("no payment for 10.99 EUR at Stripe"),
        "{table}"
    );
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn five_hundred_findings_go_out_as_csv_and_come_back_resolved_in_one_command(pool: PgPool) {
    insert_paid(&pool, 500).await;
    sqlx::query(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status, details)
         SELECT id, 'amount_mismatch', 'paid', 'succeeded',
                jsonb_build_object('local_amount', 2000, 'stripe_amount', 1999, 'currency', 'usd')
           FROM payments",
    )
    .execute(&pool)
    .await
    .unwrap();
    // A hostile order id must not become a spreadsheet formula.
    sqlx::query("UPDATE payments SET order_id = '=HYPERLINK(\"http://x\")' WHERE id = 1")
        .execute(&pool)
        .await
        .unwrap();

    let csv = stdout(
        &reconciler_output(
            &["findings", "list", "--csv", "--open", "--limit", "1000"],
            &env(&pool),
        )
        .await,
    );
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let headers = reader.headers().unwrap().clone();
    assert_eq!(headers.get(0), Some("id"));
    assert!(headers.iter().any(|h| h == "differs_local"));
    assert_eq!(headers.iter().next_back(), Some("note"));
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), 500);
    let order = headers.iter().position(|h| h == "order_id").unwrap();
    assert!(records
        .iter()
        .any(|r| r.get(order) == Some("'=HYPERLINK(\"http://x\")")));

    // The spreadsheet: every row gets a note, a few a reviewer of their own.
    let mut edited = csv::Writer::from_writer(Vec::new());
    edited.write_record(&headers).unwrap();
    for (i, r) in records.iter().enumerate() {
        let mut fields: Vec<String> = r.iter().map(str::to_owned).collect();
        *fields.last_mut().unwrap() = format!("checked, \"ticket\" PAY-{i}");
        edited.write_record(&fields).unwrap();
    }
    let dir = std::env::temp_dir().join(format!("review-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!(
        "{}.csv",
        pool.connect_options().get_database().unwrap()
    ));
    std::fs::write(&file, edited.into_inner().unwrap()).unwrap();
    let path = file.to_str().unwrap();

    let dry = stdout(
        &reconciler_output(
            &["findings", "resolve", "--file", path, "--dry-run"],
            &env(&pool),
        )
        .await,
    );
    assert!(dry.contains("500 finding(s) would be resolved"), "{dry}");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE resolved_at IS NULL"
        )
        .await,
        500
    );

    let done = stdout(
        &reconciler_output(
            &["findings", "resolve", "--file", path, "--by", "bob"],
            &env(&pool),
        )
        .await,
    );
    assert!(done.contains("resolved 500 finding(s)"), "{done}");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings
                       WHERE resolution = 'manual' AND resolved_by = 'bob'
                         AND resolution_note LIKE 'checked, \"ticket\" PAY-%'"
        )
        .await,
        500
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_findings_history WHERE what = 'resolved' AND who = 'bob'").await,
        500
    );
    // The same file again: every finding is already resolved; nothing changes.
    let again = reconciler_output(&["findings", "resolve", "--file", path], &env(&pool)).await;
    assert_eq!(again.status.code(), Some(65), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("line 2: finding"),
        "{again:?}"
    );
    std::fs::remove_file(&file).ok();
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_file_with_one_bad_line_resolves_nothing(pool: PgPool) {
    insert_paid(&pool, 4).await;
    let mut ids = Vec::new();
    for p in 1..=4 {
        ids.push(
            finding(
                &pool,
                p,
                "disputed",
                "paid",
                json!({"amount": 100, "currency": "usd"}),
            )
            .await,
        );
    }
    let dir = std::env::temp_dir().join(format!("review-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = pool.connect_options().get_database().unwrap().to_owned();
    let cases = [
        (
            format!("id,note\n{},ok\n{},\n", ids[0], ids[1]),
            "line 3",
            "empty note",
        ),
        (
            format!("id,note\n{},ok\n999999,ok\n", ids[0]),
            "line 3",
            "does not exist",
        ),
        (
            format!("id,note\n{},ok\n{},again\n", ids[0], ids[0]),
            "line 3",
            "already named on line 2",
        ),
        (
            format!("id,note\n{},ok\n{},a,b\n", ids[0], ids[1]),
            "line 3",
            "malformed",
        ),
        (
            format!("id,note\n{},ok\nx{},ok\n", ids[0], ids[1]),
            "line 3",
            "not a finding id",
        ),
    ];
    for (i, (text, line, why)) in cases.iter().enumerate() {
        let file = dir.join(format!("{db}-{i}.csv"));
        std::fs::write(&file, text).unwrap();
        let out = reconciler_output(
            &["findings", "resolve", "--file", file.to_str().unwrap()],
            &env(&pool),
        )
        .await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(65), "{text}: {out:?}");
        assert!(
            err.contains(line) && err.contains(why) && err.contains("nothing was resolved"),
            "{text}: {err}"
        );
        assert_eq!(
            count(
                &pool,
                "SELECT count(*) FROM reconciliation_findings WHERE resolved_at IS NOT NULL"
            )
            .await,
            0
        );
        std::fs::remove_file(&file).ok();
    }
    // An already-resolved finding on the last line: the first stays open.
    let resolved = reconciler_output(
        &["findings", "resolve", &ids[3].to_string(), "--note", "done"],
        &env(&pool),
    )
    .await;
    assert!(resolved.status.success(), "{resolved:?}");
    let file = dir.join(format!("{db}-resolved.csv"));
    std::fs::write(&file, format!("id,note\n{},ok\n{},ok\n", ids[2], ids[3])).unwrap();
    let out = reconciler_output(
        &["findings", "resolve", "--file", file.to_str().unwrap()],
        &env(&pool),
    )
    .await;
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 3: finding"),
        "{out:?}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already resolved"),
        "{out:?}"
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_findings WHERE resolved_at IS NOT NULL"
        )
        .await,
        1
    );
    std::fs::remove_file(&file).ok();
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn history_keeps_every_resolution_across_a_reopening(pool: PgPool) {
    let p = insert_payment(&pool, "pi_Back", "paid", 3600).await;
    let first = finding(
        &pool,
        p,
        "refunded",
        "paid",
        json!({"amount": 500, "amount_refunded": 100, "currency": "usd"}),
    )
    .await;
    // A refresh that changes what Stripe shows is history; one that only
    // moves last_seen_at is not.
    sqlx::query("UPDATE reconciliation_findings SET last_seen_at = now() WHERE id = $1")
        .bind(first)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE reconciliation_findings SET details = details || '{\"amount_refunded\": 200}' WHERE id = $1")
        .bind(first).execute(&pool).await.unwrap();
    let out = reconciler_output(
        &[
            "findings",
            "resolve",
            &first.to_string(),
            "--note",
            "partial refund agreed",
        ],
        &env(&pool),
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    let second = finding(
        &pool,
        p,
        "refunded",
        "paid",
        json!({"amount": 500, "amount_refunded": 500, "currency": "usd"}),
    )
    .await;
    let out = reconciler_output(
        &[
            "findings",
            "resolve",
            &second.to_string(),
            "--note",
            "full refund, order cancelled",
            "--by",
            "bob",
        ],
        &env(&pool),
    )
    .await;
    assert!(out.status.success(), "{out:?}");

    let shown: Value = serde_json::from_str(&stdout(
        &reconciler_output(
            &["findings", "show", &second.to_string(), "--json"],
            &env(&pool),
        )
        .await,
    ))
    .unwrap();
    let history = shown["history"].as_array().unwrap();
    let steps: Vec<(i64, &str, Option<&str>)> = history
        .iter()
        .map(|h| {
            (
                h["finding_id"].as_i64().unwrap(),
                h["what"].as_str().unwrap(),
                h["note"].as_str(),
            )
        })
        .collect();
    let reopens = format!("reopens finding {first}");
    assert_eq!(
        steps,
        [
            (first, "detected", None),
            (first, "refreshed", None),
            (first, "resolved", Some("partial refund agreed")),
            (second, "reopened", Some(reopens.as_str())),
            (second, "resolved", Some("full refund, order cancelled")),
        ]
    );
    let who: Vec<&str> = history.iter().map(|h| h["who"].as_str().unwrap()).collect();
    assert_eq!((who[2], who[4]), ("alice", "bob"));
    assert!(!who[0].is_empty() && who[0] != "alice", "{who:?}");
    assert_eq!(shown["differs"]["stripe"], "5.00 of 5.00 USD");
    assert_eq!(
        shown["dashboard_url"],
        "https://dashboard.stripe.com/payments/pi_Back"
    );
    let text =
        stdout(&reconciler_output(&["findings", "show", &second.to_string()], &env(&pool)).await);
    assert!(
        text.contains("partial refund agreed") && text.contains("reopened"),
        "{text}"
    );

    // Append-only: the history cannot be changed or deleted.
    for sql in [
        "UPDATE reconciliation_findings_history SET note = 'rewritten'",
        "DELETE FROM reconciliation_findings_history",
        "TRUNCATE reconciliation_findings_history",
    ] {
        let refused = sqlx::query(sql).execute(&pool).await.unwrap_err();
        assert!(
            refused.to_string().contains("append-only"),
            "{sql}: {refused}"
        );
    }
}
