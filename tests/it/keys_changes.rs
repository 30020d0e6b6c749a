//! Rows that move under the walk (docs/keys.md, "No row skipped"): a row committed late with an
//! old `created_at` is verified by the next cycle; a row whose key or
//! `created_at` changes is read as a new row; `migrate` registers a uuid
//! table's existing rows, and a deleted payment's finding resolves when the
//! walk passes its state row.

use std::collections::BTreeSet;

use crate::support::keyed::*;
use crate::support::stripe_fake::StripeFake;
use crate::support::*;
use sqlx::PgPool;
use stripe_reconciler::config::ReadMode;
#[sqlx::test(migrations = false)]
async fn a_late_committed_row_with_an_old_created_at_is_verified_by_the_next_cycle(pool: PgPool) {
    app_table(&pool, "uuid", "bigint", true).await;
    migrate(&pool, &[]).await;
    let stripe = StripeFake::start().await;
    for i in 0..12 {
        insert(
            &pool,
            "gen_random_uuid()",
            &format!("pi_L{i:02}"),
            "paid",
            3600 - 60 * i,
        )
        .await;
    }
    stripe.mirror(&pool, "succeeded").await;
    let mut s = job(&pool, ReadMode::Retrieve, 4).await;
    s.scan.batches_per_run = Sizing::Fixed(1);
    run(&pool, &stripe, &s).await; // rows 0..4 of the first cycle
                                   // Committed now, created two days ago: behind the cursor, never seen.
    let late = insert(&pool, "gen_random_uuid()", "pi_Late", "pending", 2 * 86400).await;
    stripe.mirror(&pool, "succeeded").await;
    let mut cycles = 0;
    let mut runs = 0;
    while cycles < 2 {
        cycles += u32::from(run(&pool, &stripe, &s).await.wrapped);
        runs += 1;
        assert!(runs < 20, "the cycles end");
    }
    assert_eq!(unconfirmed(&pool).await, 0, "the late row was verified");
    assert_eq!(
        open_findings(&pool).await,
        BTreeSet::from([(late, "missed_success".to_owned())])
    );
}

#[sqlx::test(migrations = false)]
async fn a_row_whose_key_or_created_at_changes_is_read_as_a_new_row(pool: PgPool) {
    app_table(&pool, "uuid", "bigint", true).await;
    migrate(&pool, &[]).await;
    let stripe = StripeFake::start().await;
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(
            insert(
                &pool,
                "gen_random_uuid()",
                &format!("pi_C{i}"),
                "paid",
                3600 - 60 * i,
            )
            .await,
        );
    }
    stripe.mirror(&pool, "succeeded").await;
    let s = job(&pool, ReadMode::Retrieve, 4).await;
    assert!(run(&pool, &stripe, &s).await.wrapped);
    assert!(open_findings(&pool).await.is_empty());

    // The application moves one row's created_at (now the newest) and
    // drifts it; it gives another row a new key.
    sqlx::query(
        "UPDATE payments SET created_at = now() - interval '1 second', status = 'pending',
                updated_at = now() - interval '1 hour'
          WHERE id = $1::uuid",
    )
    .bind(&ids[0])
    .execute(&pool)
    .await
    .unwrap();
    let new_key: String = sqlx::query_scalar(
        "UPDATE payments SET id = gen_random_uuid(), status = 'pending' WHERE id = $1::uuid
         RETURNING id::text",
    )
    .bind(&ids[1])
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(run(&pool, &stripe, &s).await.wrapped, "the next cycle");
    assert_eq!(
        open_findings(&pool).await,
        BTreeSet::from([
            (ids[0].clone(), "missed_success".to_owned()),
            (new_key, "missed_success".to_owned()),
        ])
    );
    assert_eq!(unconfirmed(&pool).await, 0);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM reconciliation_payment_state s
              WHERE NOT EXISTS (SELECT 1 FROM payments p WHERE p.id = s.payment_id)"
        )
        .await,
        0,
        "the old key's state is forgotten"
    );
    let moved: bool = sqlx::query_scalar(
        "SELECT s.created_at = p.created_at FROM reconciliation_payment_state s
           JOIN payments p ON p.id = s.payment_id WHERE p.id = $1::uuid",
    )
    .bind(&ids[0])
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(moved, "the state row follows the new created_at");
}

#[sqlx::test(migrations = false)]
async fn migrate_registers_a_uuid_tables_rows_and_a_deleted_payments_finding_resolves_when_the_walk_passes_it(
    pool: PgPool,
) {
    app_table(&pool, "uuid", "bigint", true).await;
    let mut drifted = Vec::new();
    for i in 0..12 {
        let status = if i % 5 == 2 { "pending" } else { "paid" };
        let id = insert(
            &pool,
            "gen_random_uuid()",
            &format!("pi_D{i:02}"),
            status,
            3600 - 60 * i,
        )
        .await;
        if status == "pending" {
            drifted.push(id);
        }
    }
    migrate(&pool, &[]).await;
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM payments p JOIN reconciliation_payment_state s
                ON s.payment_id = p.id AND s.created_at = p.created_at
             WHERE s.last_reconciled_at IS NULL"
        )
        .await,
        12,
        "migrate registered every existing row, unconfirmed"
    );
    let stripe = StripeFake::start().await;
    stripe.mirror(&pool, "succeeded").await;
    let s = job(&pool, ReadMode::Retrieve, 4).await;
    assert!(run(&pool, &stripe, &s).await.wrapped);
    assert_eq!(drifted.len(), 2);
    assert_eq!(
        open_findings(&pool).await,
        drifted
            .iter()
            .map(|id| (id.clone(), "missed_success".to_owned()))
            .collect::<BTreeSet<_>>()
    );

    // The application deletes one drifted payment: the next cycle's walk
    // passes its state row, forgets it and resolves its finding.
    sqlx::query("DELETE FROM payments WHERE id = $1::uuid")
        .bind(&drifted[0])
        .execute(&pool)
        .await
        .unwrap();
    assert!(run(&pool, &stripe, &s).await.wrapped, "the next cycle");
    assert_eq!(
        open_findings(&pool).await,
        BTreeSet::from([(drifted[1].clone(), "missed_success".to_owned())])
    );
    let resolution: Option<String> = sqlx::query_scalar(
        "SELECT resolution FROM reconciliation_findings WHERE payment_id = $1::uuid",
    )
    .bind(&drifted[0])
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(resolution.as_deref(), Some("payment_deleted"));
    assert_eq!(
        count(&pool, "SELECT count(*) FROM reconciliation_payment_state").await,
        11,
        "the deleted payment's state row is forgotten"
    );
}

/// In a `(created_at, id)` walk a payment can hold a finding and no state
/// row (a `write_refused` row read behind the cursor: nothing but the
/// finding is written for it). When the application deletes it, the batch
/// that ends the next cycle still resolves its finding as `payment_deleted`.
#[sqlx::test(migrations = false)]
async fn a_deleted_payments_finding_without_a_state_row_resolves_at_the_end_of_the_cycle(
    pool: PgPool,
) {
    app_table(&pool, "uuid", "bigint", true).await;
    for i in 0..8 {
        insert(
            &pool,
            "gen_random_uuid()",
            &format!("pi_W{i:02}"),
            "paid",
            3600 - 60 * i,
        )
        .await;
    }
    migrate(&pool, &[]).await;
    let stripe = StripeFake::start().await;
    stripe.mirror(&pool, "succeeded").await;
    let s = job(&pool, ReadMode::Retrieve, 3).await;
    assert!(run(&pool, &stripe, &s).await.wrapped);
    assert!(open_findings(&pool).await.is_empty());

    // The refused row: a finding, no state row; then the application deletes it.
    let refused: String = sqlx::query_scalar(
        "SELECT id::text FROM payments WHERE stripe_payment_intent_id = 'pi_W03'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status)
         VALUES ($1::uuid, 'write_refused', 'paid')",
    )
    .bind(&refused)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("DELETE FROM reconciliation_payment_state WHERE payment_id = $1::uuid")
        .bind(&refused)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("DELETE FROM payments WHERE id = $1::uuid")
        .bind(&refused)
        .execute(&pool)
        .await
        .unwrap();

    assert!(run(&pool, &stripe, &s).await.wrapped, "the next cycle");
    let resolution: Option<String> = sqlx::query_scalar(
        "SELECT resolution FROM reconciliation_findings WHERE payment_id = $1::uuid",
    )
    .bind(&refused)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(resolution.as_deref(), Some("payment_deleted"));
}

/// `migrate`'s registration of a uuid table's rows is one statement: when
/// it did not finish (the state table is empty beside a non-empty
/// `payments`), the next `migrate` registers them.
#[sqlx::test(migrations = false)]
async fn migrate_registers_again_when_an_earlier_registration_did_not_finish(pool: PgPool) {
    app_table(&pool, "uuid", "bigint", true).await;
    for i in 0..5 {
        insert(
            &pool,
            "gen_random_uuid()",
            &format!("pi_R{i:02}"),
            "paid",
            600 - 60 * i,
        )
        .await;
    }
    migrate(&pool, &[]).await;
    let state = "SELECT count(*) FROM reconciliation_payment_state";
    assert_eq!(count(&pool, state).await, 5);
    sqlx::query("DELETE FROM reconciliation_payment_state")
        .execute(&pool)
        .await
        .unwrap();
    migrate(&pool, &[]).await;
    assert_eq!(
        count(&pool, state).await,
        5,
        "registered by the second migrate"
    );
}
