//! `stripe-reconciler status [--json]`: the job's state ([`crate::status`]),
//! with the scan's next run planned and the events job's figures, and the
//! subscriptions job's when its table is set.

use super::CommandError;
use crate::config::Settings;
use crate::events::events_job;
use crate::preflight;
use crate::scan::plan::{plan_for, PlanFigures};
use crate::scan::ScanGroups;
use crate::status::{self, StatusQuery};
use crate::store::runs::RunHistory;
use crate::store::stats::TableFigures;
use crate::store::Context;
use crate::subscriptions;

/// Prints the job's state: a screen for people, or one JSON object.
pub(super) async fn status(settings: &Settings, json: bool) -> Result<(), CommandError> {
    let (_pool, mut conn) = super::connect(settings).await?;
    // Every read in one transaction (pooler-safe: docs/schema.md).
    let mut conn = crate::store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(CommandError::Store)?;
    let facts = preflight::checked(&mut conn, settings).await?;
    let scan = ScanGroups::of(settings, &facts);
    let plan = |table: &TableFigures, history: &RunHistory| {
        plan_for((&scan).into(), PlanFigures { table, history })
    };
    let events = events_job(&settings.run.job);
    let query = StatusQuery {
        job: &settings.run.job,
        events_job: Some(&events),
        outbox: &settings.outbox,
        partition: facts.partition.as_ref(),
        times: &facts.times,
        key: Some(&facts.key),
        account_active: settings.events.account_active,
        plan: Some(&plan),
    };
    let st = status::read_query(&mut conn, &query)
        .await
        .map_err(CommandError::Store)?;
    // The subscriptions job beside it, when its table is set.
    let subs = subscriptions::read_status(&mut conn, settings)
        .await
        .map_err(CommandError::Store)?;
    if json {
        let mut value = serde_json::to_value(&st)?;
        if let (Some(s), Some(map)) = (&subs, value.as_object_mut()) {
            map.insert("subscriptions".to_owned(), serde_json::to_value(s)?);
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", status::render(&st, settings.run.grace));
        if let Some(s) = &subs {
            print!("{}", subscriptions::render_status(s));
        }
    }
    Ok(())
}
