//! The subscriptions job in `status` (docs/subscriptions.md, "status"):
//! its cursor and cycle, rows confirmed, lag, open findings by kind and
//! pending repairs, read beside the payments job's state.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;

use super::groups::job_name;
use crate::config::Settings;
use crate::key::PaymentKey;
use crate::store::subscriptions::state::{self, SubscriptionFigures};
use crate::store::{cursor, StoreError};
use crate::terminal::{human_duration, shown};

/// The subscriptions job's state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubscriptionsStatus {
    /// `subscriptions-vs-stripe`.
    pub job: String,
    /// The last row walked in the current cycle (`None`: its start).
    pub cursor_key: Option<PaymentKey>,
    /// When the current cycle began.
    pub cycle_started_at: Option<DateTime<Utc>>,
    /// When the previous cycle reached the end of the table.
    pub last_cycle_completed_at: Option<DateTime<Utc>>,
    /// Rows confirmed, lag, open findings, pending repairs.
    #[serde(flatten)]
    pub figures: SubscriptionFigures,
}

/// Reads the state; `None` when `RECONCILER_SUBSCRIPTIONS_TABLE` is not set.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn read_status(
    conn: &mut PgConnection,
    settings: &Settings,
) -> Result<Option<SubscriptionsStatus>, StoreError> {
    if settings.subscriptions.is_none() {
        return Ok(None);
    }
    let job = job_name(&settings.run);
    let row = cursor::read(&mut *conn, &job).await?;
    let figures = state::read(conn, &job, &settings.outbox).await?;
    Ok(Some(SubscriptionsStatus {
        cursor_key: row
            .as_ref()
            .and_then(|c| c.position.as_ref().map(|p| p.key.clone())),
        cycle_started_at: row.as_ref().map(|c| c.cycle_started_at),
        last_cycle_completed_at: row.and_then(|c| c.last_cycle_completed_at),
        job,
        figures,
    }))
}

/// The state as lines of the `status` screen.
pub fn render_status(s: &SubscriptionsStatus) -> String {
    let f = &s.figures;
    let mut out = format!(
        "\nsubscriptions ({})\n  cursor             {}\n  last cycle done    {}\n  rows confirmed     {}\n  lag                {}\n  outbox pending     {}\n",
        shown(&s.job),
        s.cursor_key.as_ref().map_or_else(|| "start of the table".to_owned(), |k| shown(k.as_str()).into_owned()),
        s.last_cycle_completed_at.map_or_else(|| "never".to_owned(), |t| t.format("%Y-%m-%d %H:%M:%S").to_string()),
        f.rows_confirmed,
        f.lag_seconds.map_or_else(|| "-".to_owned(), human_duration),
        f.outbox_pending.map_or_else(|| "- (relayed outbox)".to_owned(), |n| n.to_string()),
    );
    for (kind, n) in &f.open_findings {
        out.push_str(&format!("  open {:<40} {n}\n", shown(kind)));
    }
    out
}
