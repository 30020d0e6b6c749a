//! One batch on its own: phases 1, 2 and 3 in a row ([`super::batch`],
//! [`super::commit`]), for callers outside a run's pipeline.

use sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::batch::{prepare, read_stripe, Mode, Start};
use super::commit::commit;
use super::groups::ScanGroups;
use super::report::BatchReport;
use crate::job::RunContext;
use crate::lease::Lease;
use crate::outcome::RunError;
use crate::read::Pacing;
use crate::stripe::StripeGateway;

/// Runs one batch.
///
/// # Errors
/// - [`RunError::ConcurrentRun`]: the cursor moved under us; nothing written.
/// - [`RunError::StripeRejected`]: 401/403 or a wrong base URL; nothing written.
/// - [`RunError::StripeWrongAccount`]: every read 404s; nothing written.
/// - [`RunError::StripeDown`]: most reads failed; nothing written.
/// - [`RunError::Store`]: a database failure; the transaction rolled back.
pub async fn run_batch(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &ScanGroups<'_>,
    mode: Mode,
    lease: Option<&Lease>,
) -> Result<BatchReport, RunError> {
    run_batch_until(
        pool,
        gateway,
        settings,
        mode,
        lease,
        &CancellationToken::new(),
    )
    .await
}

/// [`run_batch`], abandoned without a write when `shutdown` fires during
/// phases 1 and 2. Phase 3 is never interrupted: once it starts, the batch
/// commits or rolls back as a whole, and the caller learns which.
///
/// # Errors
/// As [`run_batch`], and [`RunError::Interrupted`].
#[tracing::instrument(name = "batch", skip_all, fields(job = %settings.run.job))]
pub async fn run_batch_until(
    pool: &PgPool,
    gateway: &StripeGateway,
    settings: &ScanGroups<'_>,
    mode: Mode,
    lease: Option<&Lease>,
    shutdown: &CancellationToken,
) -> Result<BatchReport, RunError> {
    let mut ctx = RunContext::new(pool, gateway, *settings, shutdown.clone());
    ctx.lease = lease.cloned();
    let in_flight = Semaphore::new((settings.stripe.max_in_flight as usize).max(1));
    let prepared = prepare(&ctx, &mode, &Start::Cursor).await?;
    let pacing = Pacing {
        in_flight: &in_flight,
        all_started: None,
    };
    let read = read_stripe(&ctx, prepared, pacing).await?;
    commit(&ctx, &mode, read).await
}
