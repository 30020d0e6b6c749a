//! `migrate`'s count of the PaymentIntent ids several rows of `payments`
//! hold (each such row is reported as `duplicate_payment_intent`).

use super::MigrateError;
use crate::store::duplicates as counted;

/// Prints (and logs) how many PaymentIntent ids several rows of `payments`
/// hold; returns the number of such ids. With an index on the column
/// (`indexed`), counted in bounded steps along it
/// ([`counted::count_duplicates_step`]), with a progress line every
/// [`PROGRESS_STEPS`] steps; without one, in one scan free of the role's
/// statement timeout.
pub(super) async fn report(
    conn: &mut sqlx::PgConnection,
    indexed: bool,
) -> Result<i64, MigrateError> {
    let (ids, rows) = if indexed {
        println!(
            "counting duplicate PaymentIntent ids along the index, {} rows per step",
            counted::DUPLICATE_STEP_ROWS
        );
        let mut count = counted::DuplicateCount::default();
        let mut steps = 0u64;
        while !count.done {
            counted::count_duplicates_step(&mut *conn, &mut count)
                .await
                .map_err(MigrateError::Store)?;
            steps += 1;
            tracing::debug!(
                rows_read = count.rows_read,
                "counting duplicate PaymentIntent ids"
            );
            if steps % PROGRESS_STEPS == 0 && !count.done {
                println!(
                    "counting duplicate PaymentIntent ids: {} rows read so far",
                    count.rows_read
                );
            }
        }
        (count.ids, count.rows)
    } else {
        println!("counting duplicate PaymentIntent ids (one scan of payments: no index orders the column yet)");
        counted::count_duplicates(&mut *conn)
            .await
            .map_err(MigrateError::Store)?
    };
    if ids > 0 {
        println!(
            "payments.stripe_payment_intent_id: {ids} PaymentIntent id(s) are held by {rows} rows; \
             each such row is reported as duplicate_payment_intent and never repaired"
        );
        tracing::warn!(
            duplicate_ids = ids,
            rows,
            "payments holds duplicate PaymentIntent ids"
        );
    } else {
        println!("payments.stripe_payment_intent_id: no duplicates");
    }
    Ok(ids)
}

/// Steps of the duplicate count between two progress lines (a million rows).
const PROGRESS_STEPS: u64 = 20;
