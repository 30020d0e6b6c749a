//! `findings resolve --file` is all or nothing on the database's side too:
//! a trigger on the reconciler's own `reconciliation_findings` (in the
//! test's own database) refuses the last of the five resolutions the file
//! asks for, after four were already written by the same command; nothing
//! is resolved, and the same file resolves every finding once the trigger
//! is past it. A command that resolved line by line, or committed in
//! chunks of any size under five, fails here: its first chunk would stay.

use sqlx::PgPool;

use crate::support::*;

/// An open `missing_externally` finding on a new payment `pi`.
async fn open_finding(pool: &PgPool, pi: &str) -> i64 {
    let p = insert_payment(pool, pi, "paid", 0).await;
    sqlx::query_scalar(
        "INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status)
         VALUES ($1, 'missing_externally', 'paid', NULL) RETURNING id",
    )
    .bind(p)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Refuses the fifth finding resolved (by anyone, in any statement: the
/// last of the file's five) with an error; counts every resolution it sees in `resolutions_seen`, which
/// a rollback does not undo.
async fn refuse_the_fifth_resolution(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE SEQUENCE resolutions_seen;
         CREATE FUNCTION refuse_fifth() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF nextval('resolutions_seen') = 5 THEN
                 RAISE EXCEPTION 'the test refuses the fifth resolution (finding %)', NEW.id;
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_fifth BEFORE UPDATE OF resolved_at ON reconciliation_findings
            FOR EACH ROW WHEN (OLD.resolved_at IS NULL AND NEW.resolved_at IS NOT NULL)
            EXECUTE FUNCTION refuse_fifth();",
    )
    .execute(pool)
    .await
    .unwrap();
}

async fn resolve_file(pool: &PgPool, path: &std::path::Path) -> std::process::Output {
    let env = [("DATABASE_URL", database_url(pool))];
    let file = path.to_str().unwrap();
    let args = ["findings", "resolve", "--file", file, "--by", "alice"];
    reconciler_output(&args, &env).await
}

async fn resolved(pool: &PgPool) -> i64 {
    count(
        pool,
        "SELECT count(*) FROM reconciliation_findings WHERE resolved_at IS NOT NULL",
    )
    .await
}

#[sqlx::test(migrator = "stripe_reconciler::MIGRATOR")]
async fn a_resolution_refused_midway_resolves_nothing(pool: PgPool) {
    let mut text = String::from("id,note\n");
    for i in 0..5 {
        let id = open_finding(&pool, &format!("pi_Atomic{i}")).await;
        text.push_str(&format!("{id},checked with the bank\n"));
    }
    let dir = std::env::temp_dir().join(format!(
        "resolve-atomic-{}-{}",
        std::process::id(),
        database_url(&pool).rsplit('/').next().unwrap()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("decisions.csv");
    std::fs::write(&path, &text).unwrap();
    refuse_the_fifth_resolution(&pool).await;

    let out = resolve_file(&pool, &path).await;

    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("the test refuses the fifth resolution"),
        "{}",
        all_output(&out)
    );
    // The trigger saw exactly five resolutions: four written, the last
    // refused, and the command stopped there.
    let seen: i64 = sqlx::query_scalar("SELECT last_value FROM resolutions_seen")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(seen, 5);
    assert_eq!(resolved(&pool).await, 0, "the first four were rolled back");

    // The same file, the trigger past its fifth: every finding resolved.
    let out = resolve_file(&pool, &path).await;
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(resolved(&pool).await, 5);
    std::fs::remove_dir_all(&dir).unwrap();
}
