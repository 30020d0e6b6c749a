//! The run's figures as Prometheus gauges (DESIGN.md, Metrics and Interface),
//! encoded with the text format and PUT to the Pushgateway with the async
//! client (the `prometheus` crate's own push is blocking and panics inside
//! tokio). Each push replaces the previous run's group `job=<RECONCILER_JOB>`.

use std::collections::HashMap;
use std::time::Duration;

use prometheus::{Encoder, Gauge, Opts, Registry, TextEncoder};
use url::Url;

use crate::outcome::RunOutcome;
use crate::reconcile::{open_findings_by_label, Verdict};
use crate::scan::RunSummary;
use crate::status::Status;

/// Whole-push timeout: a dead or slow Pushgateway costs at most this.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// A push failed. The run's database work and exit code do not change; the
/// staleness alert (`StripeReconcilerNotRunning`) catches a gateway that never
/// receives figures.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The figures could not be encoded.
    #[error("cannot encode metrics")]
    Encode(#[from] prometheus::Error),
    /// PUSHGATEWAY_URL cannot take the grouping key.
    #[error("PUSHGATEWAY_URL cannot be a base URL")]
    BadUrl,
    /// No answer, or an error status.
    #[error("Pushgateway push failed")]
    Http(#[source] reqwest::Error),
    /// No answer within [`PUSH_TIMEOUT`].
    #[error("Pushgateway push timed out")]
    Timeout,
}

/// The events job's stored state, for its gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventsState {
    /// Every event created before this was handled (the position).
    pub covered_until: Option<chrono::DateTime<chrono::Utc>>,
    /// When an events run last committed.
    pub last_success: Option<chrono::DateTime<chrono::Utc>>,
}

/// `(name without prefix, help)` of the events job's plain gauges (pushed to
/// `job=<RECONCILER_JOB>-events`).
const EVENTS_GAUGES: [(&str, &str); 12] = [
    (
        "events_last_success_timestamp_seconds",
        "When an events run last committed (Unix time).",
    ),
    ("events_read", "PaymentIntent events read by the last events run."),
    ("events_pages", "Event list pages read by the last events run."),
    (
        "events_payment_intents_checked",
        "Distinct PaymentIntents the last events run handled (each once).",
    ),
    (
        "events_payment_intents_retrieved",
        "PaymentIntents the last events run re-read from Stripe.",
    ),
    (
        "events_rows_confirmed",
        "Rows confirmed with Stripe after their event: not re-read.",
    ),
    (
        "events_findings_created",
        "Findings newly recorded by the last events run (missing_locally included).",
    ),
    (
        "events_missing_locally_created",
        "missing_locally findings newly recorded by the last events run.",
    ),
    (
        "events_commands_enqueued",
        "Repair commands enqueued by the last events run.",
    ),
    (
        "events_lag_seconds",
        "Now minus the events position: every event created before it was handled.",
    ),
    (
        "events_gap_seconds",
        "Seconds of events never read by the last run (position older than 30 days, or the page limit); 0 when none.",
    ),
    (
        "events_truncated",
        "1 if the last events run hit RECONCILER_EVENTS_MAX_PAGES.",
    ),
];

/// The gauges of one run, in a private registry. A gauge exists only once it
/// has been set: a figure that is unknown (no run history yet, database down)
/// is absent from the push, not zero.
pub struct RunMetrics {
    registry: Registry,
    gauges: HashMap<&'static str, Gauge>,
}

/// `(name without prefix, help)` of every plain gauge.
const GAUGES: [(&str, &str); 21] = [
    ("rows_scanned", "Rows read from payments by the last run."),
    (
        "batches",
        "Batches committed by the last run (a wrap counts as one).",
    ),
    (
        "findings_created",
        "Findings newly recorded by the last run.",
    ),
    (
        "commands_enqueued",
        "Repair commands enqueued by the last run.",
    ),
    ("run_duration_seconds", "Wall time of the last run."),
    ("wrapped", "1 if the last run reached the end of the table."),
    (
        "last_run_timestamp_seconds",
        "When the last run ended (Unix time).",
    ),
    (
        "last_success_timestamp_seconds",
        "When a run last completed (Unix time).",
    ),
    (
        "lag_seconds",
        "Reconciliation lag: oldest time since a payment was last confirmed with Stripe.",
    ),
    (
        "cycle_last_completed_timestamp_seconds",
        "When the cursor last reached the end of the table (Unix time).",
    ),
    ("cycle_age_seconds", "Age of the current cycle."),
    (
        "cycle_progress_ratio",
        "Share of the id range behind the cursor (0 to 1).",
    ),
    (
        "cursor_position",
        "The cursor: last payments.id scanned in this cycle.",
    ),
    (
        "payments_rows",
        "Rows in payments (planner estimate on large tables).",
    ),
    ("outbox_pending", "Repair commands not yet processed."),
    (
        "outbox_oldest_pending_age_seconds",
        "Age of the oldest unprocessed repair command (0 when none).",
    ),
    (
        "capacity_ratio",
        "B*R/G: rows scanned per hour over new rows per hour (+Inf when none arrive).",
    ),
    (
        "expected_cycle_seconds",
        "Expected cycle time N/(B*R-G); absent when B*R <= G.",
    ),
    (
        "scanned_rows_per_hour",
        "B*R measured from the job's run history.",
    ),
    (
        "new_rows_per_hour",
        "G: new payments per hour measured from the run history.",
    ),
    (
        "concurrent_run_timestamp_seconds",
        "When a run last stopped because another run held the cursor.",
    ),
];

impl Default for RunMetrics {
    fn default() -> Self {
        RunMetrics {
            registry: Registry::new(),
            gauges: HashMap::new(),
        }
    }
}

impl RunMetrics {
    /// An empty set of figures.
    pub fn new() -> Self {
        Self::default()
    }

    fn gauge(
        &mut self,
        name: &'static str,
        help: &str,
        label: Option<(&str, &str)>,
    ) -> Option<Gauge> {
        let full = format!("stripe_reconciler_{name}");
        let made = match label {
            None => Gauge::with_opts(Opts::new(full, help)),
            Some((k, v)) => Gauge::with_opts(Opts::new(full, help).const_label(k, v)),
        };
        let g = made.and_then(|g| self.registry.register(Box::new(g.clone())).map(|()| g));
        g.map_err(|e| tracing::error!(metric = name, error = %e, "cannot register metric"))
            .ok()
    }

    fn set(&mut self, name: &'static str, value: f64) {
        if let Some(g) = self.gauges.get(name) {
            g.set(value);
            return;
        }
        let help = GAUGES
            .iter()
            .chain(EVENTS_GAUGES.iter())
            .find(|(n, _)| *n == name)
            .map_or("", |(_, h)| *h);
        if let Some(g) = self.gauge(name, help, None) {
            g.set(value);
            self.gauges.insert(name, g);
        }
    }

    fn set_labelled(
        &mut self,
        name: &'static str,
        help: &str,
        label: &str,
        value_label: &str,
        value: f64,
    ) {
        if let Some(g) = self.gauge(name, help, Some((label, value_label))) {
            g.set(value);
        }
    }

    /// Records a run's figures; `now_unix` is the end of the run.
    pub fn observe_run(&mut self, s: &RunSummary, now_unix: f64) {
        self.set("rows_scanned", s.rows_scanned as f64);
        self.set("batches", s.batches as f64);
        self.set("findings_created", s.findings_created as f64);
        self.set("commands_enqueued", s.commands_enqueued as f64);
        self.set("run_duration_seconds", s.duration_seconds);
        self.set("wrapped", f64::from(u8::from(s.wrapped)));
        self.set("last_run_timestamp_seconds", now_unix);
        if let Some(c) = s.cursor_position {
            self.set("cursor_position", c as f64);
        }
        for v in Verdict::ALL {
            let n = s.verdicts.get(v) as f64;
            self.set_labelled(
                "verdicts",
                "Rows per verdict in the last run.",
                "verdict",
                v.as_str(),
                n,
            );
        }
        for (endpoint, n) in s.stripe_requests.by_endpoint() {
            self.set_labelled(
                "stripe_requests",
                "Stripe requests sent by the last run, per endpoint (retries included).",
                "endpoint",
                endpoint,
                n as f64,
            );
        }
        for o in RunOutcome::ALL {
            let on = f64::from(u8::from(o == s.outcome));
            self.set_labelled(
                "run_outcome",
                "1 for the last run's outcome, 0 for the others.",
                "outcome",
                o.as_str(),
                on,
            );
        }
    }

    /// Records the job's state.
    pub fn observe_status(&mut self, st: &Status) {
        self.set("lag_seconds", st.lag_seconds);
        self.set("cursor_position", st.cursor_position as f64);
        self.set("cycle_progress_ratio", st.cycle_progress_percent / 100.0);
        self.set("payments_rows", st.rows);
        self.set("outbox_pending", st.outbox_pending as f64);
        self.set(
            "outbox_oldest_pending_age_seconds",
            st.outbox_oldest_pending_seconds,
        );
        if let Some(age) = st.cycle_age_seconds {
            self.set("cycle_age_seconds", age);
        }
        if let Some(t) = st.cycle_last_completed_unix {
            self.set("cycle_last_completed_timestamp_seconds", t);
        }
        if let Some(t) = st.last_success_unix {
            self.set("last_success_timestamp_seconds", t);
        }
        if let Some(c) = &st.capacity {
            self.set("capacity_ratio", c.ratio);
            self.set("scanned_rows_per_hour", c.scanned_rows_per_hour);
            self.set("new_rows_per_hour", c.new_rows_per_hour);
            if let Some(e) = c.expected_cycle_seconds {
                self.set("expected_cycle_seconds", e);
            }
        }
        // Bounded labels: undocumented statuses collapse onto `unknown` /
        // `other` and their counts are summed (the raw kinds stay in the rows).
        let by_kind: Vec<(&String, i64)> = st.open_findings.iter().map(|(k, n)| (k, *n)).collect();
        for (kind, n) in open_findings_by_label(&by_kind) {
            self.set_labelled(
                "open_findings",
                "Open findings per kind (bounded label values).",
                "kind",
                kind,
                n as f64,
            );
        }
    }

    /// Records an events run's figures and the events job's state; `now_unix`
    /// is the end of the run. The last success is
    /// `events_last_success_timestamp_seconds`, not the scan's name, so the
    /// scan's staleness alert never judges the events job by the scan's
    /// schedule; `run_outcome` and `run_duration_seconds` keep the scan's
    /// names (the group `job=..-events` tells them apart).
    pub fn observe_events(
        &mut self,
        s: &crate::events::EventsSummary,
        requests: &crate::stripe::RequestCounts,
        state: Option<&EventsState>,
        now_unix: f64,
    ) {
        self.set("events_read", s.events_read as f64);
        self.set("events_pages", f64::from(s.pages));
        self.set("events_payment_intents_checked", s.payment_intents as f64);
        self.set(
            "events_payment_intents_retrieved",
            s.payment_intents_retrieved as f64,
        );
        self.set("events_rows_confirmed", s.rows_confirmed as f64);
        self.set("events_findings_created", s.findings_created as f64);
        self.set(
            "events_missing_locally_created",
            s.missing_locally_created as f64,
        );
        self.set("events_commands_enqueued", s.commands_enqueued as f64);
        self.set("events_truncated", f64::from(u8::from(s.truncated)));
        let gap = s.gap_seconds.unwrap_or(0.0);
        self.set("events_gap_seconds", gap);
        self.set("run_duration_seconds", s.duration_seconds);
        self.set("last_run_timestamp_seconds", now_unix);
        for o in RunOutcome::ALL {
            let on = f64::from(u8::from(o == s.outcome));
            self.set_labelled(
                "run_outcome",
                "1 for the last run's outcome, 0 for the others.",
                "outcome",
                o.as_str(),
                on,
            );
        }
        for (endpoint, n) in requests.by_endpoint() {
            self.set_labelled(
                "stripe_requests",
                "HTTP requests sent to Stripe by the last run, per endpoint (retries included).",
                "endpoint",
                endpoint,
                n as f64,
            );
        }
        if let Some(st) = state {
            if let Some(c) = st.covered_until {
                let lag = now_unix - c.timestamp_millis() as f64 / 1000.0;
                self.set("events_lag_seconds", lag.max(0.0));
            }
            if let Some(t) = st.last_success {
                self.set(
                    "events_last_success_timestamp_seconds",
                    t.timestamp_millis() as f64 / 1000.0,
                );
            }
        }
    }

    /// Marks the moment a run lost the cursor to another run.
    pub fn observe_concurrent_run(&mut self, now_unix: f64) {
        self.set("concurrent_run_timestamp_seconds", now_unix);
    }

    /// The figures in Prometheus text format.
    ///
    /// # Errors
    /// [`prometheus::Error`] from the encoder.
    pub fn encode(&self) -> Result<String, prometheus::Error> {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

/// How a push treats the figures already in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushMethod {
    /// HTTP PUT: the group becomes exactly these figures.
    Replace,
    /// HTTP POST: only metrics of the same names are replaced; the rest stay.
    Merge,
}

/// PUTs (or POSTs) figures to the Pushgateway under a grouping key.
pub struct Pusher {
    http: reqwest::Client,
    base: Url,
}

impl Pusher {
    /// A pusher for `PUSHGATEWAY_URL`.
    ///
    /// # Errors
    /// [`PushError::Http`] when the client cannot be built.
    pub fn new(base: Url) -> Result<Self, PushError> {
        let http = reqwest::Client::builder()
            .timeout(PUSH_TIMEOUT)
            .connect_timeout(Duration::from_secs(2))
            .build()
            .map_err(PushError::Http)?;
        Ok(Pusher { http, base })
    }

    /// Replaces the group `{base}/metrics/job/<job>[/<label>/<value>...]` with `body`.
    ///
    /// # Errors
    /// [`PushError`]; the caller logs it and carries on.
    pub async fn push(
        &self,
        job: &str,
        extra: &[(&str, &str)],
        method: PushMethod,
        body: String,
    ) -> Result<(), PushError> {
        let mut url = self.base.clone();
        {
            let mut segments = url.path_segments_mut().map_err(|()| PushError::BadUrl)?;
            segments.pop_if_empty().extend(["metrics", "job", job]);
            for (k, v) in extra {
                segments.extend([*k, *v]);
            }
        }
        let request = match method {
            PushMethod::Replace => self.http.put(url),
            PushMethod::Merge => self.http.post(url),
        };
        request
            .header(reqwest::header::CONTENT_TYPE, "text/plain; version=0.0.4")
            .body(body)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| PushError::Http(e.without_url()))?;
        Ok(())
    }
}
