//! How many batches a subscriptions run starts: `RECONCILER_BATCHES_PER_RUN`
//! when it is a number; with `auto`, enough to walk the table's estimated
//! rows (the catalogue's `reltuples`) once per
//! `RECONCILER_TARGET_CYCLE_SECONDS`, at one run per
//! `RECONCILER_SCHEDULE_INTERVAL_SECONDS` (docs/subscriptions.md).

use super::groups::SubscriptionsContext;
use crate::config::Sizing;
use crate::facts::SubscriptionTable;
use crate::store::Context;

/// Batches for `auto` when the table's size is unknown (never analysed).
const UNKNOWN_SIZE_BATCHES: u64 = 10;

/// The batches this run starts (at least 1).
pub async fn batches_to_run(ctx: &SubscriptionsContext<'_>, table: &SubscriptionTable) -> u64 {
    let scan = ctx.settings.scan;
    if let Sizing::Fixed(n) = scan.batches_per_run {
        return u64::from(n.max(1));
    }
    let estimate: Result<Option<f32>, _> = async {
        let mut conn = ctx.pool.acquire().await.context("connecting")?;
        crate::store::subscriptions::state::estimated_rows(&mut conn, &table.table).await
    }
    .await;
    let Some(rows) = estimate.ok().flatten().filter(|r| *r >= 0.0) else {
        return UNKNOWN_SIZE_BATCHES;
    };
    let runs_per_cycle =
        (scan.target_cycle.as_secs_f64() / scan.schedule_interval.as_secs_f64().max(1.0)).max(1.0);
    let batches = f64::from(rows) / f64::from(scan.batch_size.max(1)) / runs_per_cycle;
    // One more than the even share: a run also catches up on the table's growth.
    (batches.ceil() as u64).saturating_add(1).max(1)
}
