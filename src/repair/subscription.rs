//! `ApplySubscriptionState`, applied by the canonical writer
//! (docs/findings.md, "Subscription repairs"): the row locked, then its
//! findings; a compare-and-set of the configured columns on the values the
//! scan saw; the findings resolved `repaired` — or, when the row moved
//! since the scan, `superseded` with nothing written (the next scan judges
//! the row as it is). Only the status, period end and ends-at columns (and
//! the updated column, now) are ever written.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::command::Applied;
use super::error::RepairError;
use crate::facts::SubscriptionTable;
use crate::key::PaymentKey;
use crate::reconcile::Resolution;
use crate::store::outbox::ClaimedCommand;
use crate::store::subscriptions::read::StoredSubscription;
use crate::store::subscriptions::writer::{self, Carried, Values, Written};

/// The command's payload (docs/findings.md).
#[derive(Debug, Deserialize)]
struct Payload {
    subscription_id: String,
    finding_ids: Vec<i64>,
    #[serde(default)]
    expected: Map<String, Value>,
    #[serde(default)]
    apply: Map<String, Value>,
}

fn values(map: &Map<String, Value>) -> (Values, Carried) {
    let int = |k: &str| map.get(k).and_then(Value::as_i64);
    (
        Values {
            status: map.get("status").and_then(Value::as_str).map(str::to_owned),
            period_end: int("period_end"),
            ends_at: int("ends_at"),
        },
        Carried {
            status: map.contains_key("status"),
            period_end: map.contains_key("period_end"),
            ends_at: map.contains_key("ends_at"),
        },
    )
}

/// Whether the row already holds `apply` in every carried column.
fn holds(row: &StoredSubscription, apply: &Values, carried: Carried) -> bool {
    (!carried.status || row.status == apply.status)
        && (!carried.period_end || row.period_end == apply.period_end)
        && (!carried.ends_at || row.ends_at == apply.ends_at)
}

/// Applies one `ApplySubscriptionState` on `table`.
///
/// # Errors
/// [`RepairError`]: a malformed payload, findings that are not this row's,
/// or the database (the command is kept for a later run).
pub(super) async fn process(
    conn: &mut sqlx::PgConnection,
    table: &SubscriptionTable,
    command: &ClaimedCommand,
) -> Result<Applied, RepairError> {
    let payload: Payload =
        serde_json::from_value(command.payload.clone()).map_err(RepairError::MalformedPayload)?;
    let key = PaymentKey::new(payload.subscription_id.clone());
    let row = writer::lock(&mut *conn, table, &key).await?;
    let findings = writer::lock_findings(&mut *conn, &payload.finding_ids).await?;
    if let Some(f) = findings.iter().find(|f| f.key.as_ref() != Some(&key)) {
        return Err(RepairError::UnknownFinding(f.id));
    }
    let open: Vec<i64> = findings.iter().filter(|f| f.open).map(|f| f.id).collect();
    let Some(row) = row else {
        writer::resolve(&mut *conn, &open, Resolution::PaymentDeleted).await?;
        return Ok(Applied::Skipped(format!(
            "subscription row {key} was deleted"
        )));
    };
    if open.is_empty() {
        return Ok(Applied::Skipped("findings already resolved".into()));
    }
    let (expected, carried) = values(&payload.expected);
    let (apply, _) = values(&payload.apply);
    let written = Written {
        key: &key,
        columns: carried,
        expected: &expected,
        apply: &apply,
    };
    if writer::apply(&mut *conn, table, written).await? {
        writer::resolve(&mut *conn, &open, Resolution::Repaired).await?;
        tracing::info!(outbox_id = command.id, subscription = %key, "subscription state applied");
        return Ok(Applied::Changed);
    }
    if holds(&row, &apply, carried) {
        writer::resolve(&mut *conn, &open, Resolution::Repaired).await?;
        return Ok(Applied::NoOp);
    }
    writer::resolve(&mut *conn, &open, Resolution::Superseded).await?;
    Ok(Applied::Skipped(format!(
        "subscription row {key} changed since the scan saw it; nothing written"
    )))
}
