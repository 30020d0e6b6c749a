//! `stripe-reconciler run [--dry-run]`

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use sqlx::PgPool;

use super::CommandError;
use crate::config::{ConfigError, JobSettings, LogFormat, Settings};
use crate::metrics::ScanMetrics;
use crate::outcome::RunOutcome;
use crate::reconcile::Verdict;
use crate::scan::{self, RunOptions, RunSummary};
use crate::status::{self, Status};
use crate::store::payment_index::{self, PaymentIntentIndex};
use crate::store::payments::{self, MoneyColumns};
use crate::store::Context;
use crate::stripe::{GatewayConfig, RetryPolicy, StripeGateway};
use crate::{db, shutdown};

/// Stripe's default per-endpoint rate limit (`shared/stripe/FACTS.md`).
const STRIPE_ENDPOINT_LIMIT_RPS: u32 = 25;

/// Scans, prints the summary on stdout, logs it, pushes the figures (also for
/// a failed run; not for a dry run), and returns the run's error.
pub(super) async fn run(settings: &Settings, dry_run: bool) -> Result<(), CommandError> {
    let api_key = settings.require_stripe_key()?.clone();
    if settings.job.rate_limit_rps > STRIPE_ENDPOINT_LIMIT_RPS {
        tracing::warn!(
            rate_limit_rps = settings.job.rate_limit_rps,
            "RECONCILER_RATE_LIMIT_RPS is above Stripe's {STRIPE_ENDPOINT_LIMIT_RPS}/s limit on this endpoint, which the application shares; use this only against a local stand-in"
        );
    }
    let gateway = StripeGateway::new(GatewayConfig {
        base: settings.stripe_api_base.clone(),
        api_key,
        rate_limit_rps: NonZeroU32::new(settings.job.rate_limit_rps).unwrap_or(NonZeroU32::MIN),
        timeout: settings.job.http_timeout,
        retry: RetryPolicy::default(),
        deadline: settings
            .job
            .run_deadline
            .map(|d| tokio::time::Instant::now() + d),
    })?;
    // Before the first await that can take long: a SIGTERM while connecting
    // must still end in a summary and a push, not a killed process.
    let token = shutdown::on_signal();
    let started = Instant::now();
    let pool = match db::connect(settings.connect_options()?).await {
        Ok(pool) => pool,
        Err(e) => {
            let summary = RunSummary {
                job: settings.job.job.clone(),
                dry_run,
                outcome: RunOutcome::DatabaseError,
                duration_seconds: started.elapsed().as_secs_f64(),
                ..RunSummary::default()
            };
            publish(settings, &summary, None).await;
            return Err(e.into());
        }
    };
    let settings = &check_columns(&pool, settings, true).await?;
    let (summary, result) = scan::run(
        &pool,
        &gateway,
        &settings.job,
        RunOptions { dry_run },
        token.clone(),
    )
    .await;
    log_summary(&summary);
    print_summary(&summary, settings.log_format);
    // After a signal, the pod has its termination grace period (30 s by
    // default) for the state query and the push: keep both short.
    let state_timeout = if token.is_cancelled() {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(30)
    };
    let state = read_status(&pool, &settings.job, state_timeout).await;
    publish(settings, &summary, state.as_ref()).await;
    if !dry_run {
        crate::notify::after_run(settings, &pool, &summary.job).await;
    }
    pool.close().await;
    result.map_err(CommandError::from)
}

/// The schema a run relies on: an index on `payments.stripe_payment_intent_id`
/// (each batch looks duplicates up by it; without one every row would scan
/// the table), `RECONCILER_AMOUNT_COLUMN` / `RECONCILER_CURRENCY_COLUMN` /
/// `RECONCILER_ACCOUNT_COLUMN` naming columns of `payments` with usable
/// types, and the partition's column (with its index). Exit 78 naming what to
/// fix. Returns the settings with the partition's kind fixed
/// ([`super::partition::checked`]). `need_partition_index`: `run` reads
/// every batch by the partition's index; `events` looks rows up by
/// PaymentIntent and does not need it.
pub(super) async fn check_columns(
    pool: &PgPool,
    settings: &Settings,
    need_partition_index: bool,
) -> Result<Settings, CommandError> {
    let mut conn = pool
        .acquire()
        .await
        .context("connecting")
        .map_err(CommandError::Store)?;
    super::migrate::check_schema(&mut conn, settings, false).await?;
    let settings = super::partition::checked(&mut conn, settings).await?;
    if need_partition_index {
        super::partition::require_index(&mut conn, &settings).await?;
    }
    let columns = MoneyColumns::of(&settings.job);
    if payment_index::payment_intent_index(&mut conn)
        .await
        .map_err(CommandError::Store)?
        == PaymentIntentIndex::Missing
    {
        return Err(ConfigError::Invalid {
            var: "DATABASE_URL",
            reason: "payments.stripe_payment_intent_id has no index: run `stripe-reconciler migrate` (it adds one) before `run`".to_owned(),
        }
        .into());
    }
    if columns.amount.is_some() || columns.currency.is_some() || columns.account.is_some() {
        payments::check_columns(&mut conn, columns)
            .await
            .map_err(super::partition::column_error)?;
    }
    Ok(settings)
}

async fn read_status(pool: &PgPool, job: &JobSettings, timeout: Duration) -> Option<Status> {
    let read = async {
        let mut conn = crate::store::begin(pool).await.context("connecting")?;
        let partition = job.partition.as_ref();
        status::read(&mut conn, &job.job, &job.outbox, partition).await
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(s)) => {
            if let Some(c) = s.capacity.filter(|c| c.ratio <= 1.0) {
                tracing::warn!(
                    capacity_ratio = c.ratio,
                    scanned_rows_per_hour = c.scanned_rows_per_hour,
                    new_rows_per_hour = c.new_rows_per_hour,
                    "capacity ratio B*R/G is at or below 1: the cursor will never complete a cycle; raise RECONCILER_BATCH_SIZE or run more often"
                );
            }
            Some(s)
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "cannot read the job's state for the metrics");
            None
        }
        Err(_) => {
            tracing::error!("reading the job's state for the metrics timed out");
            None
        }
    }
}

/// Pushes the run's figures. A run that lost the cursor to another run pushes
/// only a marker to its own group, so the holder's figures stay. Failures are
/// logged at error level and change nothing else.
async fn publish(settings: &Settings, summary: &RunSummary, state: Option<&Status>) {
    let Some(base) = settings.pushgateway_url.clone() else {
        return;
    };
    if summary.dry_run {
        tracing::info!("dry run: metrics not pushed");
        return;
    }
    let now = super::unix_now();
    let mut metrics = match ScanMetrics::new() {
        Ok(m) => m,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the metrics; nothing pushed");
            return;
        }
    };
    let (extra, method) = super::push_plan(summary.outcome, state.is_some());
    if summary.outcome == RunOutcome::ConcurrentRun {
        metrics.observe_concurrent_run(now);
    } else {
        metrics.observe_run(summary, now);
        if let Some(s) = state {
            metrics.observe_status(s);
        }
    }
    super::push_or_log(base, metrics.figures(), &settings.job.job, extra, method).await;
}

fn log_summary(s: &RunSummary) {
    let v = &s.verdicts;
    tracing::info!(
        outcome = %s.outcome,
        dry_run = s.dry_run,
        batches = s.batches,
        rows = s.rows_scanned,
        in_sync = v.get(Verdict::InSync),
        in_flight = v.get(Verdict::InFlight),
        repairable = v.get(Verdict::Repairable),
        needs_review = v.get(Verdict::NeedsReview),
        unverifiable = v.get(Verdict::Unverifiable),
        findings_created = s.findings_created,
        commands_enqueued = s.commands_enqueued,
        findings_cleared = s.findings_cleared,
        writes_refused = s.writes_refused,
        wrapped = s.wrapped,
        cursor = s.cursor_position,
        duration_seconds = s.duration_seconds,
        stripe_retrieve_requests = s.stripe_requests.retrieve,
        stripe_list_requests = s.stripe_requests.list,
        stripe_accounts_unreachable = s.stripe_accounts_unreachable,
        stripe_requests_per_row = (s.rows_scanned > 0)
            .then(|| s.stripe_requests.total() as f64 / s.rows_scanned as f64),
        "run summary"
    );
}

/// JSON (one line, exact) for machines, a small table for people (numbers,
/// flags and the outcome's fixed label: no stored text).
fn print_summary(s: &RunSummary, format: LogFormat) {
    match format {
        LogFormat::Json => match serde_json::to_string(s) {
            Ok(line) => println!("{line}"),
            Err(e) => tracing::error!(error = %e, "cannot serialise the run summary"),
        },
        LogFormat::Pretty => {
            let title = if s.dry_run {
                "run summary (dry run: nothing written)"
            } else {
                "run summary"
            };
            println!("{title}");
            println!("  outcome            {}", s.outcome.as_str());
            println!("  batches            {}", s.batches);
            println!("  rows scanned       {}", s.rows_scanned);
            for (verdict, rows) in s.verdicts.iter() {
                println!("  {:<18} {rows}", verdict.as_str());
            }
            if s.dry_run {
                // Counted with a real run's dedup rule: drift that already has
                // an open finding would create nothing.
                println!("  would create findings   {}", s.findings_created);
                println!("  would enqueue commands  {}", s.commands_enqueued);
            } else {
                println!("  findings created   {}", s.findings_created);
                println!("  commands enqueued  {}", s.commands_enqueued);
                println!("  findings cleared   {}", s.findings_cleared);
                println!("  writes refused     {}", s.writes_refused);
            }
            println!("  wrapped            {}", s.wrapped);
            if s.stripe_accounts_unreachable > 0 {
                println!(
                    "  unreachable connected accounts  {}",
                    s.stripe_accounts_unreachable
                );
            }
            println!(
                "  cursor             {}",
                s.cursor_position.map_or_else(
                    || "unknown (database unreachable)".to_owned(),
                    |c| c.to_string()
                )
            );
            println!("  duration           {:.2} s", s.duration_seconds);
        }
    }
}
