//! Phase 2 of a batch of events: Stripe, with no transaction open, under a
//! lease renewed for the reads; the outage rule.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::groups::{lease_of, EventsContext};
use super::lookup::Looked;
use super::orphans::{self, OrphanRead};
use super::plan::RowAction;
use super::source::{Feed, Source};
use super::EventsError;
use crate::outcome::RunError;
use crate::read::{observe_all, stripe_reachable, Observation};
use crate::reconcile::Verdict;
use crate::store::payments::PaymentRow;
use crate::store::Context;
use crate::stripe::{AccountId, PaymentIntentId};

/// What Stripe said: phase 2 of a batch.
pub(super) struct Answers {
    pub(super) observations: Vec<Observation>,
    pub(super) orphan_reads: Vec<OrphanRead>,
    /// Stripe reads planned (rows and orphans).
    pub(super) reads: usize,
}

/// Phase 2: Stripe, with no transaction open, under a lease long enough for
/// it; the outage rule; a shutdown abandons the batch, and so does the end
/// of the held PaymentIntents' time (`None`: nothing to write).
/// `session_rows` are the rows judged by their Checkout Session that the
/// batch's session events name (docs/checkout-sessions.md), read beside the plan's.
pub(super) async fn ask_stripe(
    ctx: &EventsContext<'_>,
    feed: Feed<'_>,
    looked: &Looked<'_>,
    session_rows: Vec<PaymentRow>,
) -> Result<Option<Answers>, EventsError> {
    let plan = &looked.plan;
    let reads = plan.count(RowAction::Retrieve) + plan.orphan_reads.len() + session_rows.len();
    renew_for_reads(ctx, reads).await?;
    let to_read: Vec<_> = plan
        .rows
        .iter()
        .filter(|(_, a)| *a == RowAction::Retrieve)
        .map(|(i, _)| looked.rows[*i].row.clone())
        .chain(session_rows)
        .collect();
    let now = looked.rules.now;
    let until = match feed.source {
        Source::Retry { until: Some(u) } => tokio::time::Instant::from_std(u),
        // Never: a slice's reads end with its answers.
        _ => tokio::time::Instant::now() + Duration::from_secs(86_400 * 365),
    };
    let (observations, orphan_reads) = tokio::select! {
        biased;
        () = ctx.shutdown.cancelled() => return Err(RunError::Interrupted.into()),
        () = tokio::time::sleep_until(until) => return Ok(None),
        read = read_all(ctx, to_read, feed.account, &plan.orphan_reads, now) => read?,
    };
    let asked = observations.iter().filter(|o| o.asked_stripe).count() + orphan_reads.len();
    let failed = observations
        .iter()
        .filter(|o| o.asked_stripe && o.decision.verdict == Verdict::Unverifiable)
        .count()
        + orphan_reads.iter().filter(|o| o.unverifiable()).count();
    stripe_reachable(ctx.gateway, asked, failed).await?;
    if ctx.shutdown.is_cancelled() {
        return Err(RunError::Interrupted.into());
    }
    Ok(Some(Answers {
        observations,
        orphan_reads,
        reads,
    }))
}

/// Rows (each on its own account, from its account column) and orphans (on
/// the feed's `account`) read concurrently under the gateway's shared limiter.
async fn read_all(
    ctx: &EventsContext<'_>,
    rows: Vec<PaymentRow>,
    account: Option<&AccountId>,
    orphans: &[PaymentIntentId],
    now: DateTime<Utc>,
) -> Result<(Vec<Observation>, Vec<OrphanRead>), RunError> {
    let (pool, gateway, settings) = (ctx.pool, ctx.gateway, &ctx.settings);
    let key = settings.events.orphan_metadata_key.as_deref();
    let reads = settings.read();
    let (observed, orphans) = tokio::join!(
        observe_all(pool, gateway, rows, &reads, now),
        orphans::read(
            gateway,
            account,
            orphans,
            key,
            settings.scan.stripe.max_in_flight
        )
    );
    Ok((observed?, orphans?))
}

/// Extends the lease to cover `reads` Stripe reads at the rate limit (twice
/// over), before they start; [`RunError::ConcurrentRun`] when it was lost.
async fn renew_for_reads(ctx: &EventsContext<'_>, reads: usize) -> Result<(), EventsError> {
    let lease = lease_of(ctx)?;
    let rps = ctx.settings.scan.stripe.rate_limit_rps.max(1);
    let ttl = lease.ttl_seconds + 2.0 * reads as f64 / f64::from(rps);
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("starting a transaction")?;
    lease.renew_for(&mut tx, ttl).await?;
    tx.commit().await.context("committing")?;
    Ok(())
}
