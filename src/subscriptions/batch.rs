//! One subscriptions batch in three phases (docs/subscriptions.md, "A
//! batch"; the payments scan's order, docs/design.md): a short transaction
//! reads the rows after the cursor; Stripe is asked with no transaction
//! open; one transaction records what was learned and moves the cursor by
//! compare-and-set.

use chrono::Utc;

use super::groups::{SubscriptionsContext, Target};
use super::judge::{judge, Answer, Judged};
use super::read::{ask, Ask};
use super::record::{commit, Phase3};
use super::summary::BatchCounts;
use crate::config::ReadMode;
use crate::outcome::RunError;
use crate::reconcile::Verdict;
use crate::store::subscriptions::read::{read_batch, StoredSubscription};
use crate::store::{cursor, Context};
use crate::stripe::{AccountId, SubscriptionId};

/// Runs one batch; `None` when the table had no row after the cursor (the
/// cycle was completed instead).
///
/// # Errors
/// [`RunError`]: nothing of the batch is committed.
pub async fn run_batch(
    ctx: &SubscriptionsContext<'_>,
    target: Target<'_>,
) -> Result<BatchCounts, RunError> {
    let batch_size = ctx.settings.scan.batch_size;
    // 1. The rows after the cursor (a short transaction).
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("opening a transaction")?;
    cursor::ensure(&mut tx, target.job).await?;
    let position = cursor::read(&mut tx, target.job)
        .await?
        .and_then(|c| c.position);
    let after = position.as_ref().map(|p| &p.key);
    let rows = read_batch(
        &mut tx,
        target.table,
        after,
        batch_size,
        ctx.settings.run.grace,
    )
    .await?;
    tx.commit().await.context("closing a transaction")?;
    // 2. Stripe, no transaction open.
    if ctx.shutdown.is_cancelled() {
        return Err(RunError::Interrupted);
    }
    let (judged, mut counts) = ask_and_judge(ctx, target, &rows).await?;
    counts.scanned = rows.len() as u64;
    counts.wrapped = rows.len() < batch_size as usize;
    counts.cursor_key = if counts.wrapped {
        None
    } else {
        rows.last().map(|r| r.key.clone())
    };
    // 3. One transaction: what was learned, and the cursor.
    if !target.dry_run {
        let phase3 = Phase3 {
            rows: &rows,
            judged: &judged,
            old: position.as_ref(),
            wrapped: counts.wrapped,
        };
        commit(ctx, target, phase3, &mut counts).await?;
    } else {
        counts.findings_created = judged.iter().map(|j| j.findings.len() as u64).sum();
    }
    Ok(counts)
}

/// Phase 2: each row's verdict. Rows without a subscription id are
/// skipped; rows changed within the grace window are IN_FLIGHT unread.
async fn ask_and_judge(
    ctx: &SubscriptionsContext<'_>,
    target: Target<'_>,
    rows: &[StoredSubscription],
) -> Result<(Vec<Judged>, BatchCounts), RunError> {
    let mut counts = BatchCounts::default();
    let mut asks = Vec::new();
    let mut asked_rows = Vec::new();
    for row in rows {
        let Some(id) = row
            .stripe_id
            .as_deref()
            .and_then(|v| SubscriptionId::parse(v.trim()).ok())
        else {
            counts.skipped += 1;
            continue;
        };
        if row.recently_changed {
            counts.verdicts.add(Verdict::InFlight);
            continue;
        }
        let account = match AccountId::of_stored(row.account.as_deref()) {
            Ok(account) => account,
            Err(e) => {
                tracing::warn!(key = %row.key, error = %e, "the row's connected account is not an acct_ id: unverifiable");
                counts.verdicts.add(Verdict::Unverifiable);
                continue;
            }
        };
        asks.push(Ask {
            id,
            account,
            created: row.created,
        });
        asked_rows.push(row);
    }
    let list = ctx.settings.scan.read_mode == ReadMode::List;
    let answers = ask(ctx.gateway, &ctx.settings, &asks, list).await?;
    counts.list_fallbacks = answers.fallbacks;
    let now = Utc::now();
    let judged: Vec<Judged> = asked_rows
        .iter()
        .zip(&answers.answers)
        .map(|(row, answer)| {
            if let Answer::Unverifiable(reason) = answer {
                tracing::info!(key = %row.key, %reason, "subscription unverifiable");
            }
            judge(row, answer, (target.table, target.settings), now)
        })
        .collect();
    for j in &judged {
        counts.verdicts.add(j.verdict);
    }
    Ok((judged, counts))
}
