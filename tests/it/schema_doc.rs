//! docs/schema.md ("What `migrate` creates") lists every table,
//! view, function and trigger `migrate` creates, and says which of them read
//! the application's `payments`.

use sqlx::PgPool;

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_schema_page_names_everything_migrate_creates(pool: PgPool) {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/schema.md")).unwrap();
    let created: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'm', 'p')
            AND c.relname NOT IN ('payments', 'outbox', '_sqlx_migrations')
         UNION ALL
         SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = current_schema()
         UNION ALL
         SELECT t.tgname::text FROM pg_trigger t WHERE NOT t.tgisinternal
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let missing: Vec<&String> = created
        .iter()
        .filter(|name| !doc.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/schema.md does not name {missing:?}"
    );
    // Nothing depends on payments: no view or rule of the reconciler's.
    let views_on_payments: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT v.relname::text FROM pg_depend d
           JOIN pg_rewrite r ON r.oid = d.objid
           JOIN pg_class v ON v.oid = r.ev_class
          WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = 'payments'::regclass
            AND v.oid <> 'payments'::regclass",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        views_on_payments.is_empty(),
        "views that would refuse the application's column changes: {views_on_payments:?}"
    );
    let section = &doc[doc.find("### On `payments`").unwrap()
        ..doc.find("### The reconciler's own tables").unwrap()];
    assert!(
        section.contains("Nothing the reconciler creates depends on `payments`")
            && section.contains("`reconciliation_payment_ref`"),
        "the payments section must say how the view reads payments: {section}"
    );
}

/// The application changes and drops its own columns the view shows, and
/// drops the table itself: PostgreSQL refuses none of it because of the
/// reconciler, and the view keeps answering (a dropped column reads NULL).
#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn the_bi_view_never_blocks_the_applications_own_changes(pool: PgPool) {
    sqlx::query(
        "INSERT INTO payments (id, order_id, stripe_payment_intent_id, status)
         OVERRIDING SYSTEM VALUE VALUES (7, 'ord_7', 'pi_Seven', 'pending')",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status, details)
         VALUES (7, 'missed_success', 'pending', 'succeeded', '{}')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let row: (Option<String>, Option<String>) = sqlx::query_as(
        "SELECT order_id, payment_intent_id FROM reconciliation_review WHERE payment_key = '7'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(row, (Some("ord_7".into()), Some("pi_Seven".into())));

    sqlx::query("ALTER TABLE payments ALTER COLUMN order_id TYPE varchar(200)")
        .execute(&pool)
        .await
        .expect("the application retypes its own column");
    sqlx::query("ALTER TABLE payments DROP COLUMN order_id")
        .execute(&pool)
        .await
        .expect("the application drops its own column");
    let row: (Option<String>, Option<String>) = sqlx::query_as(
        "SELECT order_id, payment_intent_id FROM reconciliation_review WHERE payment_key = '7'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        row,
        (None, Some("pi_Seven".into())),
        "a dropped column reads NULL"
    );
}
