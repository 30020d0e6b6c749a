//! The connected accounts' feeds of an events run
//! (`RECONCILER_ACCOUNT_COLUMN`, docs/connect.md): the active accounts of
//! `payments`, each with the slices of its window from its own stored
//! position, least recently read first.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::feed::{self, Start};
use super::groups::{job_name, EventsContext};
use super::summary::EventsSummary;
use super::EventsError;
use crate::config::STRIPE_EVENTS_RETENTION;
use crate::store::events_position::{self, EventsPosition};
use crate::store::payments;
use crate::store::Context;
use crate::stripe::AccountId;

/// The most connected accounts whose feeds one run considers.
pub const MAX_ACCOUNTS_PER_RUN: usize = 10_000;

/// With `RECONCILER_ACCOUNT_COLUMN`: the active connected accounts
/// (`RECONCILER_EVENTS_ACCOUNT_ACTIVE_SECONDS`) with the slices of each
/// one's window (never committing before its stored position), least
/// recently read first (never read: first). A stored value that is not an
/// `acct_` id is never sent: it is logged and skipped.
pub(super) async fn connected_feeds(
    ctx: &EventsContext<'_>,
    listed_at: DateTime<Utc>,
    summary: &mut EventsSummary,
) -> Result<Vec<(AccountId, Start)>, EventsError> {
    let (schema, events) = (ctx.settings.scan.schema, ctx.settings.events);
    let Some(column) = schema.account_column.as_ref() else {
        return Ok(Vec::new());
    };
    let job = job_name(ctx);
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("starting a transaction")?;
    let values = payments::active_accounts(
        &mut tx,
        column,
        events.account_active,
        MAX_ACCOUNTS_PER_RUN,
        ctx.settings.scan.facts.partition.as_ref(),
        &ctx.settings.scan.facts.times,
    )
    .await?;
    let accounts = parse_accounts(&values);
    let ids: Vec<&str> = accounts.iter().map(AccountId::as_str).collect();
    let positions: HashMap<String, EventsPosition> =
        events_position::read_accounts(&mut tx, &job, &ids)
            .await?
            .into_iter()
            .collect();
    tx.commit().await.context("committing")?;
    let mut feeds: Vec<(Option<DateTime<Utc>>, AccountId, Start)> = Vec::new();
    for account in accounts {
        let position = positions.get(account.as_str());
        let start = account_start(ctx, &account, position, listed_at, summary);
        feeds.push((position.and_then(|p| p.last_success_at), account, start));
    }
    feeds.sort_by_key(|(last, _, _)| *last);
    summary.accounts = feeds.len() as u64;
    Ok(feeds.into_iter().map(|(_, a, s)| (a, s)).collect())
}

/// The stored account values that are connected account ids; the others
/// are logged once (a few samples), never sent to Stripe.
fn parse_accounts(values: &[String]) -> Vec<AccountId> {
    if values.len() >= MAX_ACCOUNTS_PER_RUN {
        tracing::warn!(limit = MAX_ACCOUNTS_PER_RUN, "more active connected accounts than one events run considers; the others are read by the scan only");
    }
    let (accounts, invalid): (Vec<_>, Vec<_>) = values
        .iter()
        .map(|v| (v, AccountId::parse(v)))
        .partition(|(_, parsed)| parsed.is_ok());
    if !invalid.is_empty() {
        // One line a run, however many: a wrong column must not flood the log.
        let samples: Vec<String> = invalid
            .iter()
            .take(3)
            .map(|(v, _)| crate::terminal::escape(v).into_owned())
            .collect();
        tracing::warn!(values = invalid.len(), samples = ?samples, "the account column holds values that are not connected account ids (acct_ followed by letters and digits): their feeds are not read; is RECONCILER_ACCOUNT_COLUMN the right column?");
    }
    accounts.into_iter().filter_map(|(_, a)| a.ok()).collect()
}

/// Where `account`'s feed starts from its stored `position`
/// ([`feed::start`]); a gap (a position older than Stripe keeps events) is
/// logged and raises the summary's gap.
fn account_start(
    ctx: &EventsContext<'_>,
    account: &AccountId,
    position: Option<&EventsPosition>,
    listed_at: DateTime<Utc>,
    summary: &mut EventsSummary,
) -> Start {
    let start = feed::start(
        position,
        listed_at,
        ctx.settings.events.lookback,
        STRIPE_EVENTS_RETENTION,
    );
    if let Some(gap) = start.window.gap_seconds {
        tracing::warn!(account = %account.as_str(), gap_seconds = gap, "a connected account's events position is older than Stripe keeps events (30 days): restarting at the oldest available event (the scan covers those rows)");
        summary.gap_seconds = Some(summary.gap_seconds.unwrap_or(0.0).max(gap));
    }
    start
}
