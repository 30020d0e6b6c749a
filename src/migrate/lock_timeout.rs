//! What `migrate` says when a `CREATE INDEX CONCURRENTLY` on the
//! application's table did not get its lock in time.

use super::MigrateError;
use crate::store::payment_index as schema;

/// The line `migrate` prints when a `CREATE INDEX CONCURRENTLY` on the
/// application's table did not get its lock in time. When the drop of the
/// build's invalid leftover timed out too (a transaction with an older
/// snapshot holds both back), the line says the index is still there: the
/// application's writes maintain it until the next `migrate` drops it.
pub(super) async fn line(
    conn: &mut sqlx::PgConnection,
    index: &str,
    on: &str,
) -> Result<String, MigrateError> {
    let left = schema::invalid_indexes_named_in(&mut *conn, index)
        .await
        .map_err(MigrateError::Store)?
        .iter()
        .any(|name| name == index);
    let timeout = crate::store::legacy::INDEX_LOCK_TIMEOUT;
    Ok(if left {
        format!(
            "{index} on {on}: not built, a transaction on payments held its lock for more than {timeout} (CREATE INDEX CONCURRENTLY waits for the transactions already running); {index} is left on payments, invalid (unused by queries, but the application's writes maintain it) and could not be dropped either: run migrate again later, it drops the leftover and builds the index"
        )
    } else {
        format!(
            "{index} on {on}: not built, a transaction on payments held its lock for more than {timeout} (CREATE INDEX CONCURRENTLY waits for the transactions already running); nothing was left behind, run migrate again later"
        )
    })
}
