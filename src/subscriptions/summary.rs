//! What a subscriptions run did ([`SubscriptionsSummary`]), logged and
//! printed like the payments scan's summary (docs/subscriptions.md,
//! "Running it").

use serde::Serialize;

use crate::config::LogFormat;
use crate::key::PaymentKey;
use crate::outcome::RunOutcome;
use crate::read::VerdictCounts;
use crate::stripe::RequestCounts;

/// The counters of one batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchCounts {
    /// Rows read.
    pub scanned: u64,
    /// Rows per verdict.
    pub verdicts: VerdictCounts,
    /// Rows whose subscription id is NULL, empty or not `sub_…`: skipped.
    pub skipped: u64,
    /// Rows read by retrieve after their list request failed.
    pub list_fallbacks: u64,
    /// Findings newly recorded.
    pub findings_created: u64,
    /// Open findings a read no longer saw, cleared.
    pub findings_cleared: u64,
    /// Repair commands enqueued.
    pub commands_enqueued: u64,
    /// Rows whose writes the database refused (a `write_refused` finding each).
    pub writes_refused: u64,
    /// Whether the batch reached the end of the table.
    pub wrapped: bool,
    /// The cursor after the batch.
    pub cursor_key: Option<PaymentKey>,
}

/// A subscriptions run's summary: printed, logged and pushed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SubscriptionsSummary {
    /// The job (`subscriptions-vs-stripe`).
    pub job: String,
    /// Always `subscriptions`.
    pub object: &'static str,
    /// Nothing written.
    pub dry_run: bool,
    /// Batches committed.
    pub batches: u64,
    /// Rows read.
    pub rows_scanned: u64,
    /// Rows per verdict.
    pub verdicts: VerdictCounts,
    /// Rows without a subscription id to check.
    pub rows_without_subscription: u64,
    /// Rows retrieved after their list request failed.
    pub list_fallbacks: u64,
    /// Findings newly recorded.
    pub findings_created: u64,
    /// Findings cleared.
    pub findings_cleared: u64,
    /// Repair commands enqueued.
    pub commands_enqueued: u64,
    /// Rows whose writes were refused.
    pub writes_refused: u64,
    /// Whether the cursor reached the end of the table.
    pub wrapped: bool,
    /// The cursor as the run left it.
    pub cursor_key: Option<PaymentKey>,
    /// Wall time, seconds.
    pub duration_seconds: f64,
    /// How the run ended.
    pub outcome: RunOutcome,
    /// Stripe requests per endpoint.
    pub stripe_requests: RequestCounts,
}

impl crate::lifecycle::Ended for SubscriptionsSummary {
    fn ended(&mut self, outcome: RunOutcome, duration_seconds: f64) {
        self.outcome = outcome;
        self.duration_seconds = duration_seconds;
    }
}

impl SubscriptionsSummary {
    /// Adds a committed batch.
    pub fn add(&mut self, b: &BatchCounts) {
        self.batches += 1;
        self.rows_scanned += b.scanned;
        self.verdicts.merge(&b.verdicts);
        self.rows_without_subscription += b.skipped;
        self.list_fallbacks += b.list_fallbacks;
        self.findings_created += b.findings_created;
        self.findings_cleared += b.findings_cleared;
        self.commands_enqueued += b.commands_enqueued;
        self.writes_refused += b.writes_refused;
        self.wrapped |= b.wrapped;
        if b.cursor_key.is_some() || b.wrapped {
            self.cursor_key = b.cursor_key.clone();
        }
    }
}

/// Logs the summary (one tracing event).
pub(super) fn log(s: &SubscriptionsSummary) {
    tracing::info!(
        job = %s.job,
        outcome = %s.outcome,
        dry_run = s.dry_run,
        batches = s.batches,
        rows = s.rows_scanned,
        verdicts = %s.verdicts.to_json(),
        rows_without_subscription = s.rows_without_subscription,
        list_fallbacks = s.list_fallbacks,
        findings_created = s.findings_created,
        commands_enqueued = s.commands_enqueued,
        findings_cleared = s.findings_cleared,
        writes_refused = s.writes_refused,
        wrapped = s.wrapped,
        duration_seconds = s.duration_seconds,
        stripe_retrieve_requests = s.stripe_requests.retrieve,
        stripe_list_requests = s.stripe_requests.list,
        "subscriptions run summary"
    );
}

/// One JSON line for machines, a small table for people.
pub(super) fn print(s: &SubscriptionsSummary, format: LogFormat) {
    match format {
        LogFormat::Json => match serde_json::to_string(s) {
            Ok(line) => println!("{line}"),
            Err(e) => tracing::error!(error = %e, "cannot serialise the run summary"),
        },
        LogFormat::Pretty => {
            println!(
                "subscriptions run summary{}",
                if s.dry_run {
                    " (dry run: nothing written)"
                } else {
                    ""
                }
            );
            println!("  outcome            {}", s.outcome.as_str());
            println!("  batches            {}", s.batches);
            println!("  rows scanned       {}", s.rows_scanned);
            for (verdict, rows) in s.verdicts.iter() {
                println!("  {:<18} {rows}", verdict.as_str());
            }
            println!("  without sub_ id    {}", s.rows_without_subscription);
            println!("  list fallbacks     {}", s.list_fallbacks);
            println!("  findings created   {}", s.findings_created);
            println!("  commands enqueued  {}", s.commands_enqueued);
            println!("  findings cleared   {}", s.findings_cleared);
            println!("  writes refused     {}", s.writes_refused);
            println!("  wrapped            {}", s.wrapped);
            println!("  duration           {:.2} s", s.duration_seconds);
        }
    }
}
