//! Hostile text never reaches the operator's terminal (docs/design.md, "Invariants"): stored
//! strings that carry ESC/OSC sequences, a bell, a newline forging a row or a
//! right-to-left override print as one escaped line in every human-readable
//! output, and `--json` keeps their exact bytes. Real binary, real PostgreSQL.

use std::collections::BTreeMap;
use std::process::Output;

use crate::support::*;
use serde_json::{json, Value};
use sqlx::PgPool;

/// Order ids an attacker could give an order: clear the screen, set the
/// window title, ring the bell, forge a `refunded` row, reverse the text.
const HOSTILE_ORDERS: [&str; 5] = [
    "order-esc\x1b[2J\x1b[H",
    "order-osc\x1b]0;pwned\x07",
    "order-bel\x07\x07",
    "order-nl\n 999999  1  order-x  pi_fake  refunded  paid  succeeded",
    "order-rlo\u{202e}dednufer",
];

/// What a terminal acts on or a reader cannot see, decided here and not by
/// the code under test: every `Cc` control (C0, DEL, C1), the bidi
/// embeddings, overrides, isolates and marks, the zero-width characters,
/// the BOM and the Unicode line and paragraph separators.
fn is_raw_hostile(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200b}'..='\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{061c}'
                | '\u{feff}'
        )
}

fn stdout(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).expect("stdout is UTF-8")
}

/// Output lines (without their `\n`) that carry nothing a terminal acts on.
fn assert_inert(out: &str) {
    for line in out.lines() {
        let raw: Vec<char> = line.chars().filter(|&c| is_raw_hostile(c)).collect();
        assert!(raw.is_empty(), "raw {raw:?} in {line:?}");
    }
}

/// Inserts a payment with this order id and PaymentIntent id, a day old.
async fn payment(pool: &PgPool, order_id: &str, pi: &str) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
         VALUES ($1, $2, 'paid', now() - interval '1 day', now() - interval '1 day')
         RETURNING id",
    )
    .bind(order_id)
    .bind(pi)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Inserts an open finding and returns its id.
async fn finding(
    pool: &PgPool,
    payment_id: Option<i64>,
    pi: Option<&str>,
    kind: &str,
    external: &str,
    details: Value,
) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO reconciliation_findings
             (payment_id, stripe_payment_intent_id, kind, local_status, external_status, details)
         VALUES ($1, $2, $3, 'paid', $4, $5) RETURNING id",
    )
    .bind(payment_id)
    .bind(pi)
    .bind(kind)
    .bind(external)
    .bind(details)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// The seeded findings: id -> the exact strings stored with it.
async fn seed(pool: &PgPool) -> BTreeMap<i64, Value> {
    let mut seeded = BTreeMap::new();
    for (i, order) in HOSTILE_ORDERS.iter().enumerate() {
        let pi = format!("pi_hostile{i}");
        let p = payment(pool, order, &pi).await;
        let id = finding(
            pool,
            Some(p),
            None,
            "missing_externally",
            "succeeded",
            json!({}),
        )
        .await;
        seeded.insert(
            id,
            json!({ "order_id": order, "stripe_payment_intent_id": pi }),
        );
    }
    // Every other stored string of a finding: a PaymentIntent id, a Stripe
    // status, details (serde_json leaves C1 and bidi characters raw), and a
    // manual resolution's author and note.
    let pi = "pi_x\u{202e}\u{9b}2J";
    let external = "succeeded\x1b[31m\u{2066}";
    let details = json!({ "message": "csi\u{9b}2J isolate\u{2067} zw\u{200b}\u{feff} ls\u{2028}" });
    let id = finding(
        pool,
        None,
        Some(pi),
        "missing_locally",
        external,
        details.clone(),
    )
    .await;
    let by = "mallory\x1b]0;t\x07";
    let note = "checked\r\nok\u{85}";
    sqlx::query(
        "UPDATE reconciliation_findings
            SET resolved_at = now(), resolution = 'manual', resolved_by = $2, resolution_note = $3
          WHERE id = $1",
    )
    .bind(id)
    .bind(by)
    .bind(note)
    .execute(pool)
    .await
    .unwrap();
    seeded.insert(
        id,
        json!({
            "order_id": null,
            "stripe_payment_intent_id": pi,
            "external_status": external,
            "details": details,
            "resolved_by": by,
            "resolution_note": note,
        }),
    );
    seeded
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn findings_list_prints_each_hostile_finding_as_one_escaped_line(pool: PgPool) {
    let seeded = seed(&pool).await;
    let env = [("DATABASE_URL", database_url(&pool))];

    let table = stdout(&reconciler_output(&["findings", "list"], &env).await);

    assert_inert(&table);
    let lines: Vec<&str> = table.lines().collect();
    // A header, one line per finding, the count.
    assert_eq!(lines.len(), seeded.len() + 2, "{table}");
    assert_eq!(lines.last(), Some(&"6 finding(s)"), "{table}");
    let ids: Vec<i64> = lines[1..lines.len() - 1]
        .iter()
        .map(|l| {
            l.split_whitespace()
                .next()
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("not a finding's line: {l:?}"))
        })
        .collect();
    assert_eq!(ids, seeded.keys().rev().copied().collect::<Vec<_>>());
    // The forged row is text inside its own finding's line.
    let refunded: Vec<&&str> = lines.iter().filter(|l| l.contains("refunded")).collect();
    assert_eq!(refunded.len(), 1, "{table}");
    assert!(refunded[0].contains(r"order-nl\n 999999  1"), "{table}");
    for shown in [
        r"order-esc\u{1b}[2J\u{1b}[H",
        r"order-osc\u{1b}]0;pwned\u{7}",
        r"order-bel\u{7}\u{7}",
        r"order-rlo\u{202e}dednufer",
        r"pi_x\u{202e}\u{9b}2J",
        r"succeeded\u{1b}[31m\u{2066}",
        r"manual by mallory\u{1b}]0;t\u{7}: checked\r\nok\u{85}",
        r"csi\u{9b}2J isolate\u{2067} zw\u{200b}\u{feff} ls\u{2028}",
    ] {
        assert!(table.contains(shown), "{shown} not in {table}");
    }
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn findings_list_json_keeps_the_exact_bytes(pool: PgPool) {
    let seeded = seed(&pool).await;
    let env = [("DATABASE_URL", database_url(&pool))];

    let out = stdout(&reconciler_output(&["findings", "list", "--json"], &env).await);

    let listed: BTreeMap<i64, Value> = out
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"));
            (v["id"].as_i64().unwrap(), v)
        })
        .collect();
    assert_eq!(listed.len(), seeded.len(), "{out}");
    for (id, want) in &seeded {
        for (field, value) in want.as_object().unwrap() {
            assert_eq!(&listed[id][field], value, "finding {id} {field}");
        }
    }
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn status_escapes_the_order_and_payment_intent_holding_the_lag(pool: PgPool) {
    // The only payment, never confirmed: it holds the lag.
    payment(&pool, HOSTILE_ORDERS[3], "pi_\u{202e}lag\x1b[2J").await;
    let env = [("DATABASE_URL", database_url(&pool))];

    let screen = stdout(&reconciler_output(&["status"], &env).await);

    assert_inert(&screen);
    let held: Vec<&str> = screen
        .lines()
        .filter(|l| l.contains("held by payment"))
        .collect();
    assert_eq!(held.len(), 1, "{screen}");
    assert!(
        held[0].contains(r"order order-nl\n 999999  1  order-x  pi_fake  refunded"),
        "{screen}"
    );
    assert!(held[0].contains(r"pi_\u{202e}lag\u{1b}[2J"), "{screen}");
    assert!(!screen.lines().any(|l| l.trim_start().starts_with("999999")));
}
