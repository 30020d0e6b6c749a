//! [`RunContext`]: what one run of a job works with.

use std::time::Instant;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::lease::Lease;
use crate::stripe::StripeGateway;

/// When the run started; every duration of the run is measured from it.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    started: Instant,
}

impl Clock {
    /// Starts the clock now.
    pub fn start() -> Self {
        Clock {
            started: Instant::now(),
        }
    }

    /// The instant the run started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Seconds since the start.
    pub fn elapsed_seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

/// What one run works with: the database pool, the Stripe gateway (its rate
/// limiter and request counts are the run's), the job's settings groups
/// (`G`, e.g. [`crate::scan::ScanGroups`]), the lease once taken, the
/// shutdown signal and the clock.
pub struct RunContext<'a, G> {
    /// The database.
    pub pool: &'a PgPool,
    /// Stripe, shared by every read of the run.
    pub gateway: &'a StripeGateway,
    /// The settings groups the job works with (references into
    /// [`crate::config::Settings`]).
    pub settings: G,
    /// The lease the run holds; `None` before it is taken and for a run that
    /// takes none (a dry run).
    pub lease: Option<Lease>,
    /// Cancelled on SIGTERM/SIGINT.
    pub shutdown: CancellationToken,
    /// The run's start.
    pub clock: Clock,
}

impl<'a, G> RunContext<'a, G> {
    /// A context with no lease yet, its clock started now.
    pub fn new(
        pool: &'a PgPool,
        gateway: &'a StripeGateway,
        settings: G,
        shutdown: CancellationToken,
    ) -> Self {
        RunContext {
            pool,
            gateway,
            settings,
            lease: None,
            shutdown,
            clock: Clock::start(),
        }
    }
}
