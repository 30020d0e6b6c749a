//! The run lease, shared by the scan (on its cursor row) and the events job
//! (on its position row): a run's identity, taking the lease before any
//! Stripe read, renewing it in every write transaction, and giving it back.
//! The SQL is [`crate::store::lease`]; a lease is a row with an owner and an
//! expiry, so a crashed run's lease expires by itself.

use sqlx::{PgConnection, PgPool};

use crate::config::{ScanSettings, StripeSettings};
use crate::outcome::RunError;
use crate::store::lease::{self, LeaseTable};
use crate::store::{Context, StoreError};
use crate::stripe::RetryPolicy;

/// This run's hold on one job's row (`lease_owner`, `lease_expires_at`).
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    /// `host:pid:random`, unique per run.
    pub owner: String,
    /// How long the lease lives without renewal, in seconds: the slowest batch
    /// the settings allow (every read timing out on every attempt, or all of
    /// them at the rate limit), at least 5 minutes. Renewed in every phase 1
    /// and phase 3. A crashed run's lease is free again after this.
    pub ttl_seconds: f64,
    /// The row's table.
    pub table: LeaseTable,
    /// The row's `job` (`RECONCILER_JOB`, or `<RECONCILER_JOB>-events`).
    pub job: String,
}

impl Lease {
    /// A fresh lease identity for this process on `job`'s row of `table`
    /// (not taken yet: see [`Lease::take`]), its TTL from the scan's batch
    /// size and the Stripe group's read budget.
    pub fn new(scan: &ScanSettings, stripe: &StripeSettings, table: LeaseTable, job: &str) -> Self {
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown-host".into());
        // The slowest batch the settings allow: every read at the rate limit,
        // or every read timing out on all its attempts, in_flight at a time.
        let reads = f64::from(scan.batch_size);
        let at_rate = reads / f64::from(stripe.rate_limit_rps.max(1));
        let attempts = f64::from(RetryPolicy::default().max_attempts);
        let all_timing_out = (reads / f64::from(stripe.max_in_flight.max(1))).ceil()
            * (attempts * stripe.http_timeout.as_secs_f64() + 6.0);
        let batch_seconds = at_rate.max(all_timing_out) + 10.0;
        Lease {
            owner: format!("{host}:{}:{:08x}", std::process::id(), fastrand::u32(..)),
            ttl_seconds: batch_seconds.max(300.0),
            table,
            job: job.to_owned(),
        }
    }

    /// Takes the lease before any Stripe read, so a second run learns it is
    /// second without spending the rate budget.
    ///
    /// # Errors
    /// [`RunError::LeaseHeld`] naming the holder and its expiry;
    /// [`RunError::Store`].
    pub async fn take(self, pool: &PgPool) -> Result<Lease, RunError> {
        let mut conn = pool.acquire().await.context("connecting")?;
        let (table, job) = (self.table, self.job.as_str());
        if lease::acquire(&mut conn, table, job, &self.owner, self.ttl_seconds).await? {
            tracing::info!(owner = %self.owner, ttl_seconds = self.ttl_seconds, "{} lease taken", table.holds());
            return Ok(self);
        }
        let (owner, expires_at) = lease::holder(&mut conn, table, job)
            .await?
            .unwrap_or_else(|| ("(released meanwhile)".to_owned(), None));
        Err(RunError::LeaseHeld {
            job: self.job,
            owner,
            expires_at,
        })
    }

    /// Extends the lease to `ttl_seconds` from now, in the caller's
    /// transaction when `conn` is in one.
    ///
    /// # Errors
    /// [`RunError::ConcurrentRun`] when another run has taken it;
    /// [`RunError::Store`].
    pub async fn renew_for(
        &self,
        conn: &mut PgConnection,
        ttl_seconds: f64,
    ) -> Result<(), RunError> {
        if lease::renew(conn, self.table, &self.job, &self.owner, ttl_seconds).await? {
            Ok(())
        } else {
            Err(RunError::ConcurrentRun {
                job: self.job.clone(),
            })
        }
    }

    /// [`Lease::renew_for`] its own `ttl_seconds`.
    ///
    /// # Errors
    /// As [`Lease::renew_for`].
    pub async fn renew(&self, conn: &mut PgConnection) -> Result<(), RunError> {
        self.renew_for(conn, self.ttl_seconds).await
    }

    /// Gives the lease back at the end of a run (also a failed one). A
    /// failure is only logged: the lease then expires by itself.
    pub async fn give_back(&self, pool: &PgPool) {
        if let Err(e) = self.release(pool).await {
            tracing::warn!(error = %e, ttl_seconds = self.ttl_seconds, "could not release the {} lease; it expires by itself", self.table.holds());
        }
    }

    async fn release(&self, pool: &PgPool) -> Result<(), StoreError> {
        let mut conn = pool.acquire().await.context("connecting")?;
        lease::release(&mut conn, self.table, &self.job, &self.owner).await
    }
}

/// Renews `lease` in `conn`'s transaction when the run holds one (a dry run
/// holds none: nothing to renew).
///
/// # Errors
/// As [`Lease::renew`].
pub async fn renew_held(conn: &mut PgConnection, lease: Option<&Lease>) -> Result<(), RunError> {
    match lease {
        Some(lease) => lease.renew(conn).await,
        None => Ok(()),
    }
}
