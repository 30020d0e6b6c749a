//! Any job run once through [`run_once`], the function the binary's
//! lifecycle runs after its start-up checks (docs/layout.md, "Adding a
//! job"): the tests run the jobs the way the binary does, with no entry
//! point of their own, and with the facts of the database found by the same
//! detection ([`preflight::checked`]).

use sqlx::PgPool;
use stripe_reconciler::config::Settings;
use stripe_reconciler::facts::TableFacts;
use stripe_reconciler::lifecycle::{run_once, Job, RunContext};
use stripe_reconciler::preflight;
use tokio_util::sync::CancellationToken;

/// Runs `job` once with the groups of `settings` through `gateway`: lease,
/// body, summary. Returns the summary and the error that stopped the run.
pub async fn run_job<J: Job>(
    pool: &PgPool,
    gateway: &J::Gateway,
    settings: &Settings,
    job: J,
) -> (J::Summary, Result<(), J::Error>) {
    run_job_until(pool, gateway, settings, job, CancellationToken::new()).await
}

/// [`run_job`] with the shutdown signal `shutdown` (a test cancels it to
/// play SIGTERM).
pub async fn run_job_until<J: Job>(
    pool: &PgPool,
    gateway: &J::Gateway,
    settings: &Settings,
    mut job: J,
    shutdown: CancellationToken,
) -> (J::Summary, Result<(), J::Error>) {
    let facts = facts(pool, settings).await;
    let mut ctx = RunContext::new(pool, gateway, J::groups(settings, &facts), shutdown);
    run_once(&mut ctx, &mut job).await
}

/// What the start-up checks learn of `payments` for `settings`: its key
/// type, time columns and partition kind, by the binary's own detection.
pub async fn facts(pool: &PgPool, settings: &Settings) -> TableFacts {
    let mut conn = pool.acquire().await.unwrap();
    preflight::checked(&mut conn, settings).await.unwrap()
}
