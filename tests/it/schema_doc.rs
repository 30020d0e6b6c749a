//! docs/schema.md ("What `migrate` creates", issue 29) lists every table,
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
    // The view reads payments: the page says so, and what that means for the
    // application's own changes to those columns.
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
    assert_eq!(views_on_payments, ["reconciliation_review"]);
    let section = &doc[doc.find("### On `payments`").unwrap()
        ..doc.find("### The reconciler's own tables").unwrap()];
    assert!(
        section.contains("`reconciliation_review`") && section.contains("used by a view"),
        "the payments section must name the view and the changes it refuses: {section}"
    );
}
