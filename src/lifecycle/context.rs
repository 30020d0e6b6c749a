//! [`RunContext`]: what one run of a job works with.

use std::time::Instant;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::config::{GatewaySetupError, Settings};
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

/// What one run works with: the database pool, the Stripe gateway (`S`; its
/// rate limiter and request counts are the run's; [`NoGateway`] for a job
/// that reads nothing from Stripe), the job's settings groups (`G`, a struct
/// of references into [`crate::config::Settings`]), the lease once taken,
/// the shutdown signal and the clock (docs/layout.md, "Adding a job").
pub struct RunContext<'a, G, S = StripeGateway> {
    /// The database.
    pub pool: &'a PgPool,
    /// Stripe, shared by every read of the run.
    pub gateway: &'a S,
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

impl<'a, G, S> RunContext<'a, G, S> {
    /// A context with no lease yet, its clock started now.
    pub fn new(pool: &'a PgPool, gateway: &'a S, settings: G, shutdown: CancellationToken) -> Self {
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

/// What a job reads Stripe through, built by the lifecycle before anything
/// else: the [`StripeGateway`], or [`NoGateway`].
pub trait Gateway: Sized {
    /// The gateway for `settings` (`STRIPE_API_KEY`, `STRIPE_API_BASE`, the
    /// read budget; its retries never wait past the run deadline).
    ///
    /// # Errors
    /// [`GatewaySetupError`]: no key (exit 78) or no HTTP client (exit 1).
    fn build(settings: &Settings) -> Result<Self, GatewaySetupError>;
}

impl Gateway for StripeGateway {
    fn build(settings: &Settings) -> Result<Self, GatewaySetupError> {
        settings.stripe.gateway(settings.run.run_deadline)
    }
}

/// The gateway of a job that reads nothing from Stripe (`repair`): no key
/// is required.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoGateway;

impl Gateway for NoGateway {
    fn build(_settings: &Settings) -> Result<Self, GatewaySetupError> {
        Ok(NoGateway)
    }
}
