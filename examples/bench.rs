//! The benchmark of issue 6. Run it with `scripts/bench.sh` (which builds in
//! release and passes the paths); not part of the production binary.
//!
//! ```text
//! bench --bin PATH/stripe-reconciler [--admin-url postgres://root@127.0.0.1:5432/postgres]
//!       [--only 1,2,3,4,12,23] [--keep]
//! ```
//!
//! Every scenario creates its own database (`stripe_reconciler_bench_*`,
//! dropped and recreated), applies the migrations with the real binary
//! (`stripe-reconciler migrate`), seeds `payments` with one
//! `INSERT ... SELECT generate_series` and, where Stripe is involved, starts an
//! in-process Stripe stand-in (wiremock) on a free port that answers every
//! `GET /v1/payment_intents/{id}` with the fixture PaymentIntent, that id and
//! status `succeeded`, after a fixed latency, and records when each request
//! arrived. The real binary (`stripe-reconciler run`) runs as a subprocess; its
//! peak RSS is polled from `/proc/<pid>/status` (VmHWM) and its JSON log lines
//! give the batch times.
//!
//! 1. latency 200 ms, 25 reads/s, 2,000 rows in 10 batches of 200: rows/s >= 23.75
//!    and never more than 25 requests in any 1-second window.
//! 2. no latency, rate limit effectively off, 100,000 rows in batches of 1,000:
//!    rows/s of the binary beside a faithful port of the design note's
//!    sequential `run_batch` on a fresh copy of the same database (goal >= 10x).
//!    2b (extra): the same comparison with 10 ms of Stripe latency on 2,000 rows.
//! 3. the batch read and the lag query on 1,000,000 rows after ANALYZE:
//!    `EXPLAIN (ANALYZE, FORMAT JSON)` execution time (median) and plan nodes.
//! 4. peak resident memory of the batch-1,000 run of scenario 2: < 64 MiB.
//!
//! Sizes can be lowered for a quick look with `BENCH_S1_ROWS`, `BENCH_S2_ROWS`,
//! `BENCH_S3_ROWS`, `BENCH_BASELINE_ROWS` (the port walks at most that many
//! rows; default: the whole table). Timings are printed, never asserted.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use serde_json::Value;
use sqlx::postgres::PgConnection;
use sqlx::{Connection, Row};
use stripe_reconciler::store::{payment_state, stats};
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const FIXTURE: &str = include_str!("../tests/fixtures/payment_intent.json");
const API_KEY: &str = "sk_test_bench";
const DB_PREFIX: &str = "stripe_reconciler_bench";
/// The design note's default job name (also the binary's default).
const JOB: &str = "payments-vs-stripe";

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

struct Args {
    bin: PathBuf,
    admin_url: String,
    only: Vec<u32>,
    keep: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
    let mut args = Args {
        bin: default_bin(),
        admin_url: std::env::var("ADMIN_DATABASE_URL")
            .unwrap_or_else(|_| format!("postgres://{user}@127.0.0.1:5432/postgres")),
        only: vec![1, 2, 3, 4, 12],
        keep: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--bin" => args.bin = PathBuf::from(value()?),
            "--admin-url" => args.admin_url = value()?,
            "--only" => {
                args.only = value()?
                    .split(',')
                    .map(|s| s.trim().parse().context("--only takes e.g. 1,3"))
                    .collect::<Result<_, _>>()?
            }
            "--keep" => args.keep = true,
            other => bail!("unknown argument {other}"),
        }
    }
    ensure!(
        args.bin.is_file(),
        "{} not found; build it (cargo build --release --bin stripe-reconciler) or pass --bin",
        args.bin.display()
    );
    Ok(args)
}

/// `<target>/release/examples/bench` -> `<target>/release/stripe-reconciler`.
fn default_bin() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.join("stripe-reconciler")))
        .unwrap_or_else(|| PathBuf::from("target/release/stripe-reconciler"))
}

fn env_rows(var: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(var) {
        Ok(v) => v.trim().parse().with_context(|| format!("{var}={v:?}")),
        Err(_) => Ok(default),
    }
}

// ---------------------------------------------------------------------------
// Databases
// ---------------------------------------------------------------------------

struct Databases {
    admin_url: String,
    created: Vec<String>,
}

impl Databases {
    fn url(&self, name: &str) -> anyhow::Result<String> {
        let mut url = url::Url::parse(&self.admin_url).context("--admin-url is not a URL")?;
        url.set_path(&format!("/{name}"));
        Ok(url.to_string())
    }

    async fn admin(&self) -> anyhow::Result<PgConnection> {
        PgConnection::connect(&self.admin_url)
            .await
            .context("connecting to the admin database")
    }

    /// Drops and creates `name` (from `template` when given); returns its URL.
    async fn fresh(&mut self, name: &str, template: Option<&str>) -> anyhow::Result<String> {
        let mut admin = self.admin().await?;
        sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut admin)
            .await?;
        let create = match template {
            Some(t) => format!("CREATE DATABASE {name} TEMPLATE {t}"),
            None => format!("CREATE DATABASE {name}"),
        };
        sqlx::raw_sql(&create)
            .execute(&mut admin)
            .await
            .with_context(|| create.clone())?;
        admin.close().await?;
        if !self.created.iter().any(|c| c == name) {
            self.created.push(name.to_owned());
        }
        self.url(name)
    }

    async fn drop_all(&self) -> anyhow::Result<()> {
        let mut admin = self.admin().await?;
        for name in &self.created {
            sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut admin)
                .await?;
        }
        Ok(())
    }
}

fn migrate(bin: &PathBuf, url: &str) -> anyhow::Result<()> {
    let out = Command::new(bin)
        .arg("migrate")
        .env("DATABASE_URL", url)
        .env("RECONCILER_LOG_FORMAT", "json")
        .output()
        .context("starting stripe-reconciler migrate")?;
    ensure!(
        out.status.success(),
        "stripe-reconciler migrate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Seeds `rows` payments: ids `pi_<n>`, 98.5% `paid` (in sync with the
/// stand-in's `succeeded`), 1% `pending` (a missed webhook: a finding and a
/// repair command), 0.5% `failed` (`unexpected:failed->succeeded`), all
/// updated an hour ago. With `half_reconciled`, the first half of the table
/// has been confirmed with Stripe 30 minutes ago (a cycle in progress).
async fn seed(url: &str, rows: u64, half_reconciled: bool) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut conn = PgConnection::connect(url).await?;
    sqlx::query(
        "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at,
                               observed_external_status, last_reconciled_at)
         SELECT 'ord_' || g, 'pi_' || g,
                CASE WHEN g % 100 = 0 THEN 'pending' WHEN g % 200 = 1 THEN 'failed' ELSE 'paid' END,
                now() - interval '2 hours' - ($1 - g) * interval '1 second',
                now() - interval '1 hour',
                CASE WHEN $2 AND g <= $1 / 2 THEN 'succeeded' END,
                CASE WHEN $2 AND g <= $1 / 2 THEN now() - interval '30 minutes' END
           FROM generate_series(1::bigint, $1) AS g",
    )
    .bind(rows as i64)
    .bind(half_reconciled)
    .execute(&mut conn)
    .await
    .context("seeding payments")?;
    // The reconciler's own state (migration 0009): every row seen but the
    // newest 200 (inserted since the last batch registered new rows), the
    // confirmed half with its stamp. `payments`' own two columns stay as the
    // bench's seed; the product no longer reads them.
    sqlx::query(
        "INSERT INTO reconciliation_payment_state
             (payment_id, created_at, observed_external_status, last_reconciled_at)
         SELECT id, created_at, observed_external_status, last_reconciled_at FROM payments
          WHERE id <= $1 - 200",
    )
    .bind(rows as i64)
    .execute(&mut conn)
    .await
    .context("seeding the reconciler's payment state")?;
    sqlx::raw_sql("ANALYZE payments; ANALYZE reconciliation_payment_state")
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    Ok(started.elapsed())
}

/// Open findings per kind (and repair commands), to check that two runs did
/// the same work.
async fn findings_by_kind(url: &str) -> anyhow::Result<BTreeMap<String, i64>> {
    let mut conn = PgConnection::connect(url).await?;
    let rows = sqlx::query(
        "SELECT kind, count(*) FROM reconciliation_findings WHERE resolved_at IS NULL GROUP BY kind
         UNION ALL
         SELECT 'outbox:' || event_type, count(*) FROM outbox GROUP BY event_type
         UNION ALL
         SELECT 'verified', count(*) FROM reconciliation_payment_state
          WHERE last_reconciled_at IS NOT NULL",
    )
    .fetch_all(&mut conn)
    .await?;
    conn.close().await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1)))
        .collect())
}

// ---------------------------------------------------------------------------
// The Stripe stand-in
// ---------------------------------------------------------------------------

/// Answers every PaymentIntent read with the fixture, the requested id and
/// `succeeded`, after `latency`; records each request's arrival.
struct Standin {
    body_head: String,
    body_tail: String,
    latency: Duration,
    arrivals: Arc<Mutex<Vec<Instant>>>,
    served: AtomicU64,
}

impl Respond for Standin {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let arrived = Instant::now();
        self.arrivals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(arrived);
        let n = self.served.fetch_add(1, Ordering::Relaxed);
        let id = request.url.path().rsplit('/').next().unwrap_or_default();
        let id_json = serde_json::to_string(id).unwrap_or_else(|_| "\"\"".into());
        let body = format!("{}{id_json}{}", self.body_head, self.body_tail);
        let template = ResponseTemplate::new(200)
            .insert_header("Request-Id", format!("req_bench{n:012}").as_str())
            .set_body_raw(body, "application/json");
        if self.latency.is_zero() {
            template
        } else {
            template.set_delay(self.latency)
        }
    }
}

struct StripeStandin {
    server: MockServer,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl StripeStandin {
    async fn start(latency: Duration) -> anyhow::Result<Self> {
        const MARK: &str = "__BENCH_PAYMENT_INTENT_ID__";
        let mut pi: Value = serde_json::from_str(FIXTURE).context("the fixture")?;
        pi["id"] = Value::from(MARK);
        pi["status"] = Value::from("succeeded");
        // Its latest charge, expanded: captured whole, nothing refunded or
        // disputed (a succeeded PaymentIntent without one is UNVERIFIABLE).
        pi["latest_charge"] = serde_json::json!({
            "id": "ch_bench", "object": "charge", "amount": 1099, "amount_captured": 1099,
            "amount_refunded": 0, "captured": true, "currency": "usd", "disputed": false,
            "paid": true, "refunded": false, "status": "succeeded",
        });
        let text = serde_json::to_string(&pi)?;
        let (head, tail) = text
            .split_once(&format!("\"{MARK}\""))
            .context("fixture template")?;
        let arrivals = Arc::new(Mutex::new(Vec::with_capacity(200_000)));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a port")?;
        let server = MockServer::builder()
            .listener(listener)
            .disable_request_recording()
            .start()
            .await;
        Mock::given(method("GET"))
            .and(path_regex("^/v1/payment_intents/[^/]+$"))
            .respond_with(Standin {
                body_head: head.to_owned(),
                body_tail: tail.to_owned(),
                latency,
                arrivals: Arc::clone(&arrivals),
                served: AtomicU64::new(0),
            })
            .mount(&server)
            .await;
        Ok(StripeStandin { server, arrivals })
    }

    fn uri(&self) -> String {
        self.server.uri()
    }

    /// Takes the arrival times recorded so far, sorted.
    fn take_arrivals(&self) -> Vec<Instant> {
        let mut a = std::mem::take(&mut *self.arrivals.lock().unwrap_or_else(|p| p.into_inner()));
        a.sort_unstable();
        a
    }
}

/// Most arrivals in any half-open window `[t, t + width)`. With every response
/// delayed by exactly `width`, this is also the peak number of requests in
/// flight at the stand-in (intervals `[arrival, arrival + width)`).
fn max_in_window(sorted: &[Instant], width: Duration) -> usize {
    let mut best = 0;
    let mut start = 0;
    for (end, t) in sorted.iter().enumerate() {
        while *t - sorted[start] >= width {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best
}

/// Shortest time spanned by `n` consecutive arrivals (an `n`-th request
/// inside one second of the first breaks a limit of `n - 1` per second).
fn min_span(sorted: &[Instant], n: usize) -> Option<Duration> {
    if n < 2 {
        return None;
    }
    sorted.windows(n).map(|w| w[n - 1] - w[0]).min()
}

/// Smallest gap between two consecutive arrivals.
fn min_gap(sorted: &[Instant]) -> Option<Duration> {
    sorted.windows(2).map(|w| w[1] - w[0]).min()
}

// ---------------------------------------------------------------------------
// Running the real binary
// ---------------------------------------------------------------------------

struct RunSettings {
    /// 0: unset (the binary's default for the read mode).
    batch_size: u32,
    /// 0: `auto`.
    batches_per_run: u32,
    rate_limit_rps: u32,
    max_in_flight: u32,
    /// More variables (RECONCILER_READ_MODE, RECONCILER_LIST_MAX_PAGES, ...).
    extra_env: Vec<(&'static str, String)>,
}

/// The issue-6 scenarios measure one request per row: retrieve mode (their
/// stand-in serves only `GET /v1/payment_intents/{id}`).
fn retrieve_mode() -> Vec<(&'static str, String)> {
    vec![("RECONCILER_READ_MODE", "retrieve".to_owned())]
}

struct BinaryRun {
    wall: Duration,
    exit: std::process::ExitStatus,
    rows: u64,
    batches: usize,
    /// Seconds of each batch that read rows (the wrap batch is left out).
    batch_seconds: Vec<f64>,
    peak_rss_kib: u64,
    /// CPU seconds of the binary (last sample before it exited).
    cpu_seconds: f64,
    /// CPU seconds of this process (the stand-in) during the run.
    standin_cpu_seconds: f64,
    /// Busy share of all CPUs during the run.
    machine_busy: f64,
    stderr_tail: String,
    /// `stripe_requests` of the run summary: (retrieve, list).
    stripe_requests: (u64, u64),
}

static LOG_SEQ: AtomicU64 = AtomicU64::new(0);

/// utime + stime of a process, in clock ticks (USER_HZ, 100 on Linux).
fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces: fields count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// (busy, total) jiffies of all CPUs from /proc/stat.
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = cpu.iter().take(8).sum();
    let idle = cpu.get(3)? + cpu.get(4).unwrap_or(&0);
    Some((total - idle, total))
}

/// CPU use while `f` ran: (seconds of this process, busy share of the machine).
struct CpuWatch {
    own: u64,
    machine: (u64, u64),
}

impl CpuWatch {
    fn start() -> Self {
        CpuWatch {
            own: cpu_ticks("self").unwrap_or(0),
            machine: machine_ticks().unwrap_or((0, 0)),
        }
    }
    /// (CPU seconds of this process since start, busy share of all CPUs).
    fn stop(&self) -> (f64, f64) {
        let own = cpu_ticks("self").unwrap_or(0).saturating_sub(self.own) as f64 / 100.0;
        let (b, t) = machine_ticks().unwrap_or((0, 0));
        let share = (b - self.machine.0) as f64 / ((t - self.machine.1).max(1)) as f64;
        (own, share)
    }
}

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

async fn run_binary(
    bin: &PathBuf,
    db_url: &str,
    stripe: &str,
    s: &RunSettings,
) -> anyhow::Result<BinaryRun> {
    let mut cmd = Command::new(bin);
    cmd.arg("run")
        .env_remove("PUSHGATEWAY_URL")
        .env_remove("RUST_LOG")
        .env_remove("RECONCILER_JOB")
        .env("DATABASE_URL", db_url)
        .env("STRIPE_API_KEY", API_KEY)
        .env("STRIPE_API_BASE", stripe)
        .env_remove("RECONCILER_BATCH_SIZE")
        .env_remove("RECONCILER_BATCHES_PER_RUN")
        .envs((s.batch_size > 0).then(|| ("RECONCILER_BATCH_SIZE", s.batch_size.to_string())))
        .env(
            "RECONCILER_BATCHES_PER_RUN",
            // 0: `auto`, the binary sizes the run itself (issue 23).
            match s.batches_per_run {
                0 => "auto".to_owned(),
                n => n.to_string(),
            },
        )
        .env("RECONCILER_RATE_LIMIT_RPS", s.rate_limit_rps.to_string())
        .env("RECONCILER_MAX_IN_FLIGHT", s.max_in_flight.to_string())
        .env("RECONCILER_LOG_FORMAT", "json")
        .env("RECONCILER_GRACE_SECONDS", "0")
        .envs(s.extra_env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().context("starting stripe-reconciler run")?;
    let pid = child.id();
    let mut stdout = child.stdout.take().context("stdout")?;
    let stderr = child.stderr.take().context("stderr")?;
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    // A thread waits for the exit (exact wall time) while this task polls the
    // high-water mark of the resident set every 20 ms.
    let exited = Arc::new(AtomicBool::new(false));
    let waiter = {
        let exited = Arc::clone(&exited);
        std::thread::spawn(move || {
            let status = child.wait();
            let wall = started.elapsed();
            exited.store(true, Ordering::SeqCst);
            (status, wall)
        })
    };
    let mut peak_rss_kib = 0;
    let mut ticks = 0;
    let watch = CpuWatch::start();
    while !exited.load(Ordering::SeqCst) {
        if let Some(kib) = vm_hwm_kib(pid) {
            peak_rss_kib = peak_rss_kib.max(kib);
        }
        if let Some(t) = cpu_ticks(&pid.to_string()) {
            ticks = ticks.max(t);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, wall) = waiter.join().expect("waiter thread");
    let (standin_cpu_seconds, machine_busy) = watch.stop();
    let exit = status.context("waiting for stripe-reconciler run")?;
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();

    let mut batch_seconds = Vec::new();
    let mut batches = 0;
    let mut rows_logged = 0;
    for line in &stderr {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let is_batch = |m: &Value| m.as_str().is_some_and(|m| m.starts_with("batch done"));
        if is_batch(&v["message"]) || is_batch(&v["fields"]["message"]) {
            let f = if v["rows"].is_null() {
                &v["fields"]
            } else {
                &v
            };
            batches += 1;
            let rows = f["rows"].as_u64().unwrap_or(0);
            rows_logged += rows;
            if rows > 0 {
                batch_seconds.push(f["seconds"].as_f64().unwrap_or(f64::NAN));
            }
        }
    }
    let rows = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v["rows_scanned"].as_u64())
        .unwrap_or(rows_logged);
    let stripe_requests = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| {
            let r = v.get("stripe_requests")?;
            Some((r["retrieve"].as_u64()?, r["list"].as_u64()?))
        })
        .unwrap_or_default();
    if let Ok(dir) = std::env::var("BENCH_LOG_DIR") {
        let n = LOG_SEQ.fetch_add(1, Ordering::Relaxed);
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(format!("{dir}/run{n}.log"), stderr.join("\n"));
    }
    let stderr_tail = stderr
        .iter()
        .rev()
        .take(5)
        .rev()
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    Ok(BinaryRun {
        wall,
        exit,
        rows,
        batches,
        batch_seconds,
        peak_rss_kib,
        cpu_seconds: ticks as f64 / 100.0,
        standin_cpu_seconds,
        machine_busy,
        stderr_tail,
        stripe_requests,
    })
}

/// Nearest-rank percentile.
fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

fn median(values: &[f64]) -> f64 {
    percentile(values, 50.0)
}

// ---------------------------------------------------------------------------
// The design note's algorithm (shared/seed), ported faithfully
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum SeedVerdict {
    InSync,
    InFlight,
    Repairable,
    NeedsReview,
    Unverifiable,
}

struct SeedDecision {
    verdict: SeedVerdict,
    kind: Option<String>,
    repair_command: Option<&'static str>,
}

impl SeedDecision {
    fn plain(verdict: SeedVerdict) -> Self {
        SeedDecision {
            verdict,
            kind: None,
            repair_command: None,
        }
    }
    fn with(verdict: SeedVerdict, kind: &str, command: Option<&'static str>) -> Self {
        SeedDecision {
            verdict,
            kind: Some(kind.to_owned()),
            repair_command: command,
        }
    }
}

/// The seed's `classify`, as written there.
fn seed_classify(local: &str, external: &str) -> SeedDecision {
    const EXTERNAL_IN_FLIGHT: [&str; 4] = [
        "processing",
        "requires_action",
        "requires_confirmation",
        "requires_capture",
    ];
    if local == "pending" && EXTERNAL_IN_FLIGHT.contains(&external) {
        return SeedDecision::plain(SeedVerdict::InFlight);
    }
    match (local, external) {
        ("paid", "succeeded") | ("failed", "canceled") | ("pending", "requires_payment_method") => {
            SeedDecision::plain(SeedVerdict::InSync)
        }
        ("pending", "succeeded") => SeedDecision::with(
            SeedVerdict::Repairable,
            "missed_success",
            Some("ApplyPaymentSucceeded"),
        ),
        ("pending", "canceled") => SeedDecision::with(
            SeedVerdict::Repairable,
            "missed_cancel",
            Some("ApplyPaymentCanceled"),
        ),
        ("paid", _) => SeedDecision::with(
            SeedVerdict::NeedsReview,
            "paid_locally_not_externally",
            None,
        ),
        _ => SeedDecision::with(
            SeedVerdict::NeedsReview,
            &format!("unexpected:{local}->{external}"),
            None,
        ),
    }
}

enum GatewayOutcome {
    Status(String),
    NotFound,
    Unavailable,
}

/// The seed's `PaymentGateway.payment_intent_status`: one blocking read (here
/// awaited before the next one starts) with a keep-alive HTTP client, like the
/// Stripe SDK's session.
async fn seed_gateway_status(http: &reqwest::Client, base: &str, pi: &str) -> GatewayOutcome {
    let response = match http
        .get(format!("{base}/v1/payment_intents/{pi}"))
        .bearer_auth(API_KEY)
        .header("Stripe-Version", "2024-06-20")
        .send()
        .await
    {
        Ok(r) => r,
        Err(_) => return GatewayOutcome::Unavailable,
    };
    match response.status().as_u16() {
        200 => match response.json::<Value>().await {
            Ok(v) => match v["status"].as_str() {
                Some(s) => GatewayOutcome::Status(s.to_owned()),
                None => GatewayOutcome::Unavailable,
            },
            Err(_) => GatewayOutcome::Unavailable,
        },
        404 => GatewayOutcome::NotFound,
        _ => GatewayOutcome::Unavailable,
    }
}

#[derive(Default)]
struct SeedBatchReport {
    scanned: u64,
    counts: BTreeMap<SeedVerdict, u64>,
    wrapped: bool,
}

/// The seed's `run_batch`, statement for statement: phase 1 in one short
/// transaction, phase 2 one Stripe read at a time, phase 3 one UPDATE per
/// verified row, one INSERT per finding, one outbox INSERT per new repairable
/// finding, then the cursor compare-and-set.
async fn seed_run_batch(
    conn: &mut PgConnection,
    http: &reqwest::Client,
    base: &str,
    job: &str,
    batch: i64,
    grace: Duration,
) -> anyhow::Result<SeedBatchReport> {
    let mut report = SeedBatchReport::default();

    // 1) cursor and rows, in a short transaction
    let mut tx = conn.begin().await?;
    sqlx::query("INSERT INTO reconciliation_cursor (job) VALUES ($1) ON CONFLICT DO NOTHING")
        .bind(job)
        .execute(&mut *tx)
        .await?;
    let cursor_id: i64 =
        sqlx::query_scalar("SELECT last_id FROM reconciliation_cursor WHERE job = $1")
            .bind(job)
            .fetch_one(&mut *tx)
            .await?;
    let rows: Vec<(i64, String, String, bool)> = sqlx::query_as(
        "SELECT id, stripe_payment_intent_id, status,
                updated_at > now() - make_interval(secs => $1) AS recently_changed
           FROM payments
          WHERE id > $2
          ORDER BY id
          LIMIT $3",
    )
    .bind(grace.as_secs_f64())
    .bind(cursor_id)
    .bind(batch)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;

    if rows.is_empty() {
        let mut tx = conn.begin().await?;
        let done = sqlx::query(
            "UPDATE reconciliation_cursor
                SET last_id = 0, last_cycle_completed_at = now(), cycle_started_at = now()
              WHERE job = $1 AND last_id = $2",
        )
        .bind(job)
        .bind(cursor_id)
        .execute(&mut *tx)
        .await?;
        ensure!(done.rows_affected() == 1, "ConcurrentRun({job})");
        tx.commit().await?;
        report.wrapped = true;
        return Ok(report);
    }

    // 2) Stripe, outside any transaction, one read at a time
    let mut results: Vec<(i64, String, SeedDecision, Option<String>)> = Vec::new();
    for (payment_id, pi_id, local_status, recently_changed) in &rows {
        if *recently_changed {
            results.push((
                *payment_id,
                local_status.clone(),
                SeedDecision::plain(SeedVerdict::InFlight),
                None,
            ));
            continue;
        }
        // limiter: None (the binary's rate limit is effectively off in this scenario)
        match seed_gateway_status(http, base, pi_id).await {
            GatewayOutcome::Unavailable => results.push((
                *payment_id,
                local_status.clone(),
                SeedDecision::plain(SeedVerdict::Unverifiable),
                None,
            )),
            GatewayOutcome::NotFound => results.push((
                *payment_id,
                local_status.clone(),
                SeedDecision::with(SeedVerdict::NeedsReview, "missing_externally", None),
                None,
            )),
            GatewayOutcome::Status(external) => {
                let decision = seed_classify(local_status, &external);
                results.push((*payment_id, local_status.clone(), decision, Some(external)));
            }
        }
    }

    // 3) findings, repair commands and the cursor, in one transaction
    let mut tx = conn.begin().await?;
    for (payment_id, local_status, decision, observed) in &results {
        *report.counts.entry(decision.verdict).or_default() += 1;
        if let Some(observed) = observed {
            sqlx::query(
                "UPDATE payments SET observed_external_status = $1, last_reconciled_at = now()
                  WHERE id = $2",
            )
            .bind(observed)
            .bind(payment_id)
            .execute(&mut *tx)
            .await?;
        }
        let Some(kind) = &decision.kind else {
            continue;
        };
        let finding: Option<i64> = sqlx::query_scalar(
            "INSERT INTO reconciliation_findings (payment_id, kind, local_status, external_status)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (payment_id, kind) WHERE resolved_at IS NULL DO NOTHING
             RETURNING id",
        )
        .bind(payment_id)
        .bind(kind)
        .bind(local_status)
        .bind(observed)
        .fetch_optional(&mut *tx)
        .await?;
        if let (Some(finding_id), Some(command)) = (finding, decision.repair_command) {
            sqlx::query(
                "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
                 VALUES ('Payment', $1, $2, $3)",
            )
            .bind(payment_id.to_string())
            .bind(command)
            .bind(serde_json::json!({
                "payment_id": payment_id,
                "finding_id": finding_id,
                "expected_local_status": local_status,
            }))
            .execute(&mut *tx)
            .await?;
        }
    }
    let last_id = rows.last().map_or(cursor_id, |r| r.0);
    let done = sqlx::query(
        "UPDATE reconciliation_cursor SET last_id = $1 WHERE job = $2 AND last_id = $3",
    )
    .bind(last_id)
    .bind(job)
    .bind(cursor_id)
    .execute(&mut *tx)
    .await?;
    ensure!(done.rows_affected() == 1, "ConcurrentRun({job})");
    tx.commit().await?;
    report.scanned = rows.len() as u64;
    Ok(report)
}

struct SeedRun {
    wall: Duration,
    rows: u64,
    batches: u64,
    counts: BTreeMap<SeedVerdict, u64>,
}

/// Calls the port's `run_batch` until the cursor wraps (or `max_rows` rows
/// were scanned), on one connection, like the seed's psycopg connection.
async fn seed_run(
    db_url: &str,
    stripe: &str,
    batch: i64,
    max_rows: u64,
) -> anyhow::Result<SeedRun> {
    let started = Instant::now();
    let mut conn = PgConnection::connect(db_url).await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let mut run = SeedRun {
        wall: Duration::ZERO,
        rows: 0,
        batches: 0,
        counts: BTreeMap::new(),
    };
    while run.rows < max_rows {
        let r = seed_run_batch(&mut conn, &http, stripe, JOB, batch, Duration::ZERO).await?;
        run.batches += 1;
        run.rows += r.scanned;
        for (v, n) in r.counts {
            *run.counts.entry(v).or_default() += n;
        }
        if r.wrapped {
            break;
        }
    }
    conn.close().await?;
    run.wall = started.elapsed();
    Ok(run)
}

// ---------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------

/// One line of the results table.
struct Line {
    scenario: String,
    measure: String,
    value: String,
    goal: String,
    verdict: String,
}

fn pass(ok: bool) -> String {
    if ok { "PASS" } else { "FAIL" }.to_owned()
}

fn line(scenario: &str, measure: &str, value: String, goal: &str, verdict: String) -> Line {
    Line {
        scenario: scenario.into(),
        measure: measure.into(),
        value,
        goal: goal.into(),
        verdict,
    }
}

fn say(msg: &str) {
    eprintln!("\x1b[1m==> {msg}\x1b[0m");
}

fn check_exit(run: &BinaryRun) -> anyhow::Result<()> {
    ensure!(
        run.exit.success(),
        "stripe-reconciler run exited with {}:\n{}",
        run.exit,
        run.stderr_tail
    );
    Ok(())
}

async fn scenario_1(args: &Args, dbs: &mut Databases, out: &mut Vec<Line>) -> anyhow::Result<()> {
    const LATENCY: Duration = Duration::from_millis(200);
    const RPS: u32 = 25;
    let rows = env_rows("BENCH_S1_ROWS", 2_000)?;
    // Batches of 1,000: each batch boundary idles the limiter for one latency
    // (the batch's last reads finish before the next batch reads its rows).
    let settings = RunSettings {
        batch_size: 1_000,
        batches_per_run: u32::try_from(rows.div_ceil(1_000)).unwrap_or(2),
        rate_limit_rps: RPS,
        max_in_flight: 8,
        extra_env: retrieve_mode(),
    };
    say(&format!(
        "scenario 1: latency 200 ms, {RPS} reads/s, {} in flight, {rows} rows in {} batches of {}",
        settings.max_in_flight, settings.batches_per_run, settings.batch_size
    ));
    let url = dbs.fresh(&format!("{DB_PREFIX}_s1"), None).await?;
    migrate(&args.bin, &url)?;
    seed(&url, rows, false).await?;
    let stripe = StripeStandin::start(LATENCY).await?;
    let run = run_binary(&args.bin, &url, &stripe.uri(), &settings).await?;
    let arrivals = stripe.take_arrivals();
    check_exit(&run)?;
    let wall = run.wall.as_secs_f64();
    let rows_per_s = run.rows as f64 / wall;
    let window = max_in_window(&arrivals, Duration::from_secs(1));
    let in_flight = max_in_window(&arrivals, LATENCY);
    let span = match (arrivals.first(), arrivals.last()) {
        (Some(a), Some(b)) => (*b - *a).as_secs_f64(),
        _ => 0.0,
    };
    let gaps: Vec<f64> = arrivals
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1000.0)
        .collect();
    eprintln!(
        "    {} rows, {} requests in {wall:.2} s (first to last request {span:.2} s); gaps between arrivals min {:.2} / p50 {:.2} / p90 {:.2} / p99 {:.2} / max {:.2} ms",
        run.rows,
        arrivals.len(),
        min_gap(&arrivals).unwrap_or_default().as_secs_f64() * 1000.0,
        median(&gaps),
        percentile(&gaps, 90.0),
        percentile(&gaps, 99.0),
        percentile(&gaps, 100.0),
    );
    let s = "1 (200 ms, 25/s)";
    out.push(line(
        s,
        "rows/s (rows scanned / wall time of the run)",
        format!("{rows_per_s:.2} ({} rows in {wall:.2} s)", run.rows),
        ">= 23.75",
        pass(rows_per_s >= 23.75 && run.rows == rows),
    ));
    let over = arrivals
        .iter()
        .enumerate()
        .filter(|(i, t)| {
            arrivals
                .get(i + RPS as usize)
                .is_some_and(|u| *u - **t < Duration::from_secs(1))
        })
        .count();
    let span = min_span(&arrivals, RPS as usize + 1).map_or_else(
        || "n/a".to_owned(),
        |d| format!("{:.1} ms", d.as_secs_f64() * 1000.0),
    );
    out.push(line(
        s,
        "max requests in any 1-s window",
        format!(
            "{window} (shortest span of {} consecutive arrivals: {span}; {over} windows over {RPS})",
            RPS + 1
        ),
        "<= 25",
        pass(window <= 25),
    ));
    out.push(line(
        s,
        "Stripe requests/s",
        format!("{:.2}", arrivals.len() as f64 / wall),
        "",
        String::new(),
    ));
    out.push(line(
        s,
        "peak requests in flight",
        format!("{in_flight} (max {})", settings.max_in_flight),
        "",
        String::new(),
    ));
    out.push(batch_line(s, &run));
    out.push(line(
        s,
        "peak RSS",
        format!("{:.1} MiB", run.peak_rss_kib as f64 / 1024.0),
        "",
        String::new(),
    ));
    Ok(())
}

fn batch_line(s: &str, run: &BinaryRun) -> Line {
    line(
        s,
        "batch time p50 / p99",
        format!(
            "{:.3} s / {:.3} s ({} batches with rows, {} in all)",
            median(&run.batch_seconds),
            percentile(&run.batch_seconds, 99.0),
            run.batch_seconds.len(),
            run.batches
        ),
        "",
        String::new(),
    )
}

/// Scenario 2 (and its latency variant 2b): the binary beside the design
/// note's algorithm on identical copies of one database and the same stand-in.
async fn scenario_2(
    args: &Args,
    dbs: &mut Databases,
    out: &mut Vec<Line>,
    with_rss: bool,
    latency: Duration,
) -> anyhow::Result<()> {
    let variant = !latency.is_zero();
    let rows = if variant {
        env_rows("BENCH_S2B_ROWS", 2_000)?
    } else {
        env_rows("BENCH_S2_ROWS", 100_000)?
    };
    let baseline_rows = if variant {
        rows
    } else {
        env_rows("BENCH_BASELINE_ROWS", rows)?
    };
    let tag = if variant { "s2b" } else { "s2" };
    let settings = RunSettings {
        batch_size: 1_000,
        batches_per_run: u32::try_from(rows / 1_000 + 1).unwrap_or(101),
        rate_limit_rps: u32::try_from(env_rows("BENCH_S2_RPS", 10_000)?)?,
        max_in_flight: u32::try_from(env_rows("BENCH_S2_IN_FLIGHT", 32)?)?,
        extra_env: retrieve_mode(),
    };
    say(&format!(
        "scenario {}: latency {latency:?}, rate limit {} /s, {} in flight, {rows} rows, batches of {} x {}",
        if variant { "2b" } else { "2" },
        settings.rate_limit_rps,
        settings.max_in_flight,
        settings.batch_size,
        settings.batches_per_run
    ));
    let name = format!("{DB_PREFIX}_{tag}");
    let url = dbs.fresh(&name, None).await?;
    migrate(&args.bin, &url)?;
    let seeded = seed(&url, rows, false).await?;
    eprintln!("    seeded {rows} rows in {:.1} s", seeded.as_secs_f64());
    // An identical fresh copy for the design note's algorithm.
    let copy_url = dbs
        .fresh(&format!("{DB_PREFIX}_s2_seed"), Some(&name))
        .await?;

    let stripe = StripeStandin::start(Duration::ZERO).await?;
    let run = run_binary(&args.bin, &url, &stripe.uri(), &settings).await?;
    let arrivals = stripe.take_arrivals();
    check_exit(&run)?;
    let wall = run.wall.as_secs_f64();
    let rows_per_s = run.rows as f64 / wall;
    eprintln!(
        "    binary: {} rows, {} requests in {wall:.2} s; CPU: binary {:.2} s, stand-in {:.2} s, machine busy {:.0}%",
        run.rows,
        arrivals.len(),
        run.cpu_seconds,
        run.standin_cpu_seconds,
        run.machine_busy * 100.0
    );

    say(&format!(
        "scenario {}: the design note's run_batch (sequential), batches of 1000, on a copy{}",
        if variant { "2b" } else { "2" },
        if baseline_rows < rows {
            format!(", first {baseline_rows} rows")
        } else {
            String::new()
        }
    ));
    let seed_stripe = StripeStandin::start(latency).await?;
    let watch = CpuWatch::start();
    let port = seed_run(&copy_url, &seed_stripe.uri(), 1_000, baseline_rows).await?;
    let (port_cpu, port_busy) = watch.stop();
    let port_arrivals = seed_stripe.take_arrivals();
    let port_wall = port.wall.as_secs_f64();
    let port_rows_per_s = port.rows as f64 / port_wall;
    eprintln!(
        "    port: {} rows, {} requests, {} batches in {port_wall:.2} s; verdicts {:?}; CPU: port + stand-in {port_cpu:.2} s, machine busy {:.0}%",
        port.rows,
        port_arrivals.len(),
        port.batches,
        port.counts,
        port_busy * 100.0
    );
    let binary_work = findings_by_kind(&url).await?;
    let port_work = findings_by_kind(&copy_url).await?;
    eprintln!("    binary wrote {binary_work:?}");
    eprintln!("    port wrote   {port_work:?}");
    if baseline_rows >= rows && binary_work != port_work {
        eprintln!("    WARNING: the two runs wrote different results");
    }

    let label = if variant {
        format!(
            "2b (extra: {} ms latency, {rows} rows)",
            latency.as_millis()
        )
    } else {
        "2 (no latency, limit off)".to_owned()
    };
    let s = label.as_str();
    out.push(line(
        s,
        "rows/s, stripe-reconciler run",
        format!("{rows_per_s:.0} ({} rows in {wall:.2} s)", run.rows),
        "",
        String::new(),
    ));
    out.push(line(
        s,
        "rows/s, design note's run_batch (port)",
        format!(
            "{port_rows_per_s:.0} ({} rows in {port_wall:.2} s)",
            port.rows
        ),
        "",
        String::new(),
    ));
    let ratio = rows_per_s / port_rows_per_s;
    out.push(line(
        s,
        "ratio binary / design note",
        format!("{ratio:.1}x"),
        if variant { "(informational)" } else { ">= 10x" },
        if variant {
            String::new()
        } else {
            pass(ratio >= 10.0)
        },
    ));
    if variant {
        return Ok(());
    }
    out.push(line(
        s,
        "Stripe requests/s (binary)",
        format!("{:.0}", arrivals.len() as f64 / wall),
        "",
        String::new(),
    ));
    out.push(line(
        s,
        "max requests in any 1-s window (binary)",
        max_in_window(&arrivals, Duration::from_secs(1)).to_string(),
        "",
        String::new(),
    ));
    out.push(batch_line(s, &run));
    let rss_mib = run.peak_rss_kib as f64 / 1024.0;
    out.push(line(
        s,
        "peak RSS (binary)",
        format!("{rss_mib:.1} MiB"),
        "",
        String::new(),
    ));
    if with_rss {
        out.push(line(
            "4 (memory, batch 1,000)",
            "peak RSS of the scenario-2 run (VmHWM)",
            format!("{rss_mib:.1} MiB"),
            "< 64 MiB",
            pass(rss_mib < 64.0),
        ));
    }
    Ok(())
}

/// A separate batch-1,000 run for scenario 4 when scenario 2 is not run.
async fn scenario_4_alone(
    args: &Args,
    dbs: &mut Databases,
    out: &mut Vec<Line>,
) -> anyhow::Result<()> {
    let rows = env_rows("BENCH_S2_ROWS", 100_000)?;
    say(&format!(
        "scenario 4: peak RSS of a run over {rows} rows in batches of 1000"
    ));
    let url = dbs.fresh(&format!("{DB_PREFIX}_s4"), None).await?;
    migrate(&args.bin, &url)?;
    seed(&url, rows, false).await?;
    let stripe = StripeStandin::start(Duration::ZERO).await?;
    let settings = RunSettings {
        batch_size: 1_000,
        batches_per_run: u32::try_from(rows / 1_000 + 1).unwrap_or(101),
        rate_limit_rps: 10_000,
        max_in_flight: 32,
        extra_env: retrieve_mode(),
    };
    let run = run_binary(&args.bin, &url, &stripe.uri(), &settings).await?;
    check_exit(&run)?;
    let rss_mib = run.peak_rss_kib as f64 / 1024.0;
    out.push(line(
        "4 (memory, batch 1,000)",
        "peak RSS (VmHWM)",
        format!("{rss_mib:.1} MiB"),
        "< 64 MiB",
        pass(rss_mib < 64.0),
    ));
    Ok(())
}

fn plan_nodes(plan: &Value, out: &mut Vec<String>) {
    if let Some(node) = plan["Node Type"].as_str() {
        let mut name = node.to_owned();
        if let Some(index) = plan["Index Name"].as_str() {
            name.push_str(&format!(" using {index}"));
        } else if let Some(rel) = plan["Relation Name"].as_str() {
            name.push_str(&format!(" on {rel}"));
        }
        out.push(name);
    }
    if let Some(children) = plan["Plans"].as_array() {
        for c in children {
            plan_nodes(c, out);
        }
    }
}

async fn explain(
    conn: &mut PgConnection,
    sql: &str,
    runs: usize,
) -> anyhow::Result<(Vec<f64>, Vec<String>)> {
    let mut times = Vec::new();
    let mut nodes = Vec::new();
    // One unmeasured warm-up run, then `runs` measured ones.
    for i in 0..=runs {
        let v: Value = sqlx::query_scalar(&format!("EXPLAIN (ANALYZE, FORMAT JSON) {sql}"))
            .fetch_one(&mut *conn)
            .await
            .with_context(|| format!("EXPLAIN {sql}"))?;
        let top = &v[0];
        if i > 0 {
            times.push(top["Execution Time"].as_f64().unwrap_or(f64::NAN));
        }
        nodes.clear();
        plan_nodes(&top["Plan"], &mut nodes);
    }
    Ok((times, nodes))
}

async fn scenario_3(args: &Args, dbs: &mut Databases, out: &mut Vec<Line>) -> anyhow::Result<()> {
    const RUNS: usize = 9;
    let rows = env_rows("BENCH_S3_ROWS", 1_000_000)?;
    say(&format!(
        "scenario 3: batch read and lag query on {rows} rows (EXPLAIN ANALYZE, median of {RUNS})"
    ));
    let url = dbs.fresh(&format!("{DB_PREFIX}_s3"), None).await?;
    migrate(&args.bin, &url)?;
    let seeded = seed(&url, rows, true).await?;
    eprintln!(
        "    seeded {rows} rows and analyzed in {:.1} s",
        seeded.as_secs_f64()
    );
    let mut conn = PgConnection::connect(&url).await?;
    let middle = rows / 2;
    // The lag reads the highest seen id first (one primary-key lookup), then
    // binds it; here it is inlined, which plans the same.
    let head = payment_state::highest_seen(&mut conn).await?;
    let queries = [
        (
            "batch read (cursor in the middle, LIMIT 200)",
            format!(
                "SELECT id, stripe_payment_intent_id, status, updated_at > now() - interval '600 seconds'
                   FROM payments WHERE id > {middle} ORDER BY id LIMIT 200"
            ),
        ),
        (
            "lag query",
            format!("SELECT now() - {}", stats::lag_since(&head.to_string())),
        ),
    ];
    let s = format!("3 ({rows} rows)");
    for (what, sql) in &queries {
        let (times, nodes) = explain(&mut conn, sql, RUNS).await?;
        let seq = nodes.iter().any(|n| n.starts_with("Seq Scan"));
        let indexed = nodes
            .iter()
            .any(|n| n.starts_with("Index Scan") || n.starts_with("Index Only Scan"));
        let med = median(&times);
        let max = times.iter().copied().fold(f64::NAN, f64::max);
        eprintln!("    {what}: {times:.3?} ms; plan {nodes:?}");
        out.push(line(
            &s,
            &format!("{what}: execution time, median (max)"),
            format!("{med:.3} ms ({max:.3} ms)"),
            "< 10 ms",
            pass(med < 10.0),
        ));
        out.push(line(
            &s,
            &format!("{what}: plan"),
            nodes.join(" > "),
            "Index (Only) Scan, no Seq Scan",
            pass(indexed && !seq),
        ));
    }
    conn.close().await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Issue 12: list reads and overlapping batches
// ---------------------------------------------------------------------------

/// A Stripe account for the list benchmark: the PaymentIntent `pi_<g>` of
/// every seeded row `g`, `succeeded`, created in the second of its row's
/// `created_at` give or take two seconds (rows are one second apart), and
/// `foreign` PaymentIntents of other applications per row in the same second.
/// Serves `GET /v1/payment_intents/{id}` and the list endpoint (newest first,
/// `created[gte]`/`created[lte]`, `limit`, `starting_after`, Stripe's list
/// shape), after `latency`, and records every arrival.
struct ListAccount {
    /// `created` of row 1's second (Unix seconds).
    first: i64,
    rows: u64,
    foreign: u64,
    /// Every listed PaymentIntent as `(created, key)`, newest first; key
    /// `g * (foreign + 1) + k`, k = 0 for the row's own PaymentIntent.
    order: Vec<(i64, u64)>,
    /// The fixture with `"__BENCH_ID__"` and `-4242` for the id and `created`.
    template: String,
    latency: Duration,
    arrivals: Arc<Mutex<Vec<Instant>>>,
    lists: AtomicU64,
}

impl ListAccount {
    /// -2..=2 seconds, pseudo-random (a multiplicative hash, so batch
    /// boundaries do not line up with a pattern).
    fn jitter(g: u64) -> i64 {
        ((g.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % 5) as i64 - 2
    }

    fn created(&self, key: u64) -> i64 {
        let (g, k) = (key / (self.foreign + 1), key % (self.foreign + 1));
        let second = self.first + g as i64 - 1;
        if k == 0 {
            second + Self::jitter(g)
        } else {
            second
        }
    }

    fn id(&self, key: u64) -> String {
        let (g, k) = (key / (self.foreign + 1), key % (self.foreign + 1));
        if k == 0 {
            format!("pi_{g}")
        } else {
            format!("pi_x{g}x{k}")
        }
    }

    fn key(&self, id: &str) -> Option<u64> {
        let rest = id.strip_prefix("pi_")?;
        match rest.strip_prefix('x') {
            None => Some(rest.parse::<u64>().ok()? * (self.foreign + 1)),
            Some(foreign) => {
                let (g, k) = foreign.split_once('x')?;
                Some(g.parse::<u64>().ok()? * (self.foreign + 1) + k.parse::<u64>().ok()?)
            }
        }
    }

    fn object(&self, key: u64) -> String {
        let id = serde_json::to_string(&self.id(key)).unwrap_or_default();
        self.template.replacen("\"__BENCH_ID__\"", &id, 1).replacen(
            "-4242",
            &self.created(key).to_string(),
            1,
        )
    }

    fn list(&self, request: &Request) -> String {
        self.lists.fetch_add(1, Ordering::Relaxed);
        let (mut gte, mut lte, mut limit, mut after) = (i64::MIN, i64::MAX, 10usize, None);
        for (k, v) in request.url.query_pairs() {
            match k.as_ref() {
                "created[gte]" => gte = v.parse().unwrap_or(gte),
                "created[lte]" => lte = v.parse().unwrap_or(lte),
                "limit" => limit = v.parse::<usize>().unwrap_or(10).clamp(1, 100),
                "starting_after" => after = self.key(&v),
                _ => {}
            }
        }
        // Newest first: the first entry with created <= lte (or after the cursor).
        let from = match after {
            Some(key) => {
                let probe = (self.created(key), key);
                self.order
                    .partition_point(|e| (e.0, e.1) > probe)
                    .saturating_add(1)
            }
            None => self.order.partition_point(|e| e.0 > lte),
        };
        let mut data = Vec::with_capacity(limit);
        let mut has_more = false;
        for &(created, key) in self.order.iter().skip(from) {
            if created > lte {
                continue;
            }
            if created < gte {
                break;
            }
            if data.len() == limit {
                has_more = true;
                break;
            }
            data.push(self.object(key));
        }
        format!(
            "{{\"object\":\"list\",\"url\":\"/v1/payment_intents\",\"has_more\":{has_more},\"data\":[{}]}}",
            data.join(",")
        )
    }
}

impl Respond for ListAccount {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        self.arrivals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Instant::now());
        let path = request.url.path().trim_end_matches('/');
        let (status, body) = if path == "/v1/payment_intents" {
            (200, self.list(request))
        } else {
            match path.rsplit('/').next().and_then(|id| self.key(id)) {
                Some(key) if key / (self.foreign + 1) <= self.rows => (200, self.object(key)),
                _ => (
                    404,
                    r#"{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such payment_intent"}}"#
                        .to_owned(),
                ),
            }
        };
        let template = ResponseTemplate::new(status)
            .insert_header("Request-Id", "req_bench_list")
            .set_body_raw(body, "application/json");
        if self.latency.is_zero() {
            template
        } else {
            template.set_delay(self.latency)
        }
    }
}

struct ListStandin {
    server: MockServer,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl ListStandin {
    /// Serves the account of the `rows` seeded in `url`.
    async fn start(url: &str, rows: u64, foreign: u64, latency: Duration) -> anyhow::Result<Self> {
        let mut conn = PgConnection::connect(url).await?;
        let first: i64 = sqlx::query_scalar(
            "SELECT floor(extract(epoch FROM created_at))::bigint FROM payments ORDER BY id LIMIT 1",
        )
        .fetch_one(&mut conn)
        .await
        .context("row 1's created_at")?;
        conn.close().await?;
        const ID: &str = "__BENCH_ID__";
        let mut pi: Value = serde_json::from_str(FIXTURE).context("the fixture")?;
        pi["id"] = Value::from(ID);
        pi["status"] = Value::from("succeeded");
        pi["created"] = Value::from(-4242);
        let template = serde_json::to_string(&pi)?;
        ensure!(
            template.contains("-4242") && template.contains(ID),
            "fixture template"
        );
        let mut account = ListAccount {
            first,
            rows,
            foreign,
            order: Vec::new(),
            template,
            latency,
            arrivals: Arc::new(Mutex::new(Vec::with_capacity(200_000))),
            lists: AtomicU64::new(0),
        };
        let mut order = Vec::with_capacity((rows * (foreign + 1)) as usize);
        for g in 1..=rows {
            for k in 0..=foreign {
                let key = g * (foreign + 1) + k;
                order.push((account.created(key), key));
            }
        }
        order.sort_unstable_by(|a, b| b.cmp(a));
        account.order = order;
        let arrivals = Arc::clone(&account.arrivals);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a port")?;
        let server = MockServer::builder()
            .listener(listener)
            .disable_request_recording()
            .start()
            .await;
        Mock::given(method("GET"))
            .and(path_regex("^/v1/payment_intents(/[^/]+)?/?$"))
            .respond_with(account)
            .mount(&server)
            .await;
        Ok(ListStandin { server, arrivals })
    }

    fn uri(&self) -> String {
        self.server.uri()
    }

    fn take_arrivals(&self) -> Vec<Instant> {
        let mut a = std::mem::take(&mut *self.arrivals.lock().unwrap_or_else(|p| p.into_inner()));
        a.sort_unstable();
        a
    }
}

fn list_mode(batch: u32, max_pages: u32) -> Vec<(&'static str, String)> {
    vec![
        ("RECONCILER_READ_MODE", "list".to_owned()),
        ("RECONCILER_LIST_MAX_PAGES", max_pages.to_string()),
        ("RECONCILER_BATCH_SIZE", batch.to_string()),
    ]
}

/// Requests per row of a run: from the binary's own `stripe_requests`.
fn per_row(run: &BinaryRun) -> f64 {
    (run.stripe_requests.0 + run.stripe_requests.1) as f64 / run.rows.max(1) as f64
}

/// Issue 23, side by side on one table (two cursors, `RECONCILER_JOB`): the
/// chart's defaults before (batches of 200, 10 per run, 10 pages) and after
/// (`auto`, list batches of 1,900, pages `auto`, the target of 86,400 s) at
/// 100 ms latency and 10 requests/s, one run each with the chart's run
/// deadline (480 s); the 10M-row projection from the measured pace.
async fn scenario_auto(
    args: &Args,
    dbs: &mut Databases,
    out: &mut Vec<Line>,
) -> anyhow::Result<()> {
    const LATENCY: Duration = Duration::from_millis(100);
    const RPS: u32 = 10;
    const INTERVAL: f64 = 600.0;
    const DEADLINE: f64 = 480.0;
    let rows = env_rows("BENCH_A_ROWS", 1_000_000)?;
    let target = env_rows("BENCH_A_TARGET", 86_400)?;
    say(&format!(
        "issue 23: {rows} rows, latency 100 ms, {RPS}/s, chart defaults before and after, target {target} s"
    ));
    let url = dbs.fresh(&format!("{DB_PREFIX}_auto"), None).await?;
    migrate(&args.bin, &url)?;
    seed(&url, rows, false).await?;
    {
        let mut conn = PgConnection::connect(&url).await?;
        sqlx::query("ANALYZE payments").execute(&mut conn).await?;
        conn.close().await?;
    }
    let stripe = ListStandin::start(&url, rows, 0, LATENCY).await?;
    let common = |job: &str| {
        vec![
            ("RECONCILER_JOB", job.to_owned()),
            ("RECONCILER_READ_MODE", "list".to_owned()),
            ("RECONCILER_RUN_DEADLINE_SECONDS", "480".to_owned()),
            ("RECONCILER_TARGET_CYCLE_SECONDS", target.to_string()),
            ("RECONCILER_SCHEDULE_INTERVAL_SECONDS", "600".to_owned()),
        ]
    };
    let mut before_env = common("before");
    before_env.push(("RECONCILER_LIST_MAX_PAGES", "10".to_owned()));
    let variants = [
        (
            "before (200 x 10, 10 pages)",
            RunSettings {
                batch_size: 200,
                batches_per_run: 10,
                rate_limit_rps: RPS,
                max_in_flight: 8,
                extra_env: before_env,
            },
        ),
        (
            "after (auto, defaults)",
            RunSettings {
                batch_size: 0,
                batches_per_run: 0,
                rate_limit_rps: RPS,
                max_in_flight: 8,
                extra_env: common("after"),
            },
        ),
    ];
    for (label, settings) in variants {
        let run = run_binary(&args.bin, &url, &stripe.uri(), &settings).await?;
        let arrivals = stripe.take_arrivals();
        check_exit(&run)?;
        let wall = run.wall.as_secs_f64();
        let requests = arrivals.len() as f64;
        let pace = run.rows as f64 / wall;
        let cycle = rows as f64 / (run.rows.max(1) as f64 / INTERVAL);
        eprintln!(
            "    {label}: {} rows, {requests} requests in {wall:.1} s",
            run.rows
        );
        let s = format!("A {label}");
        out.push(line(
            &s,
            "rows per run",
            run.rows.to_string(),
            "",
            String::new(),
        ));
        out.push(line(
            &s,
            "cycle time at one run per 600 s",
            format!("{:.1} h", cycle / 3600.0),
            &format!("<= {target} s"),
            pass(cycle <= target as f64),
        ));
        out.push(line(
            &s,
            "Stripe requests per row",
            format!(
                "{:.4} ({:.1} rows per request)",
                per_row(&run),
                run.rows as f64 / requests.max(1.0)
            ),
            "",
            String::new(),
        ));
        let busy = requests / wall / f64::from(RPS);
        out.push(line(
            &s,
            "share of the rate budget used (over the run's wall time)",
            format!(
                "{:.1}% ({:.2} requests/s, {pace:.0} rows/s, run {wall:.1} s)",
                100.0 * busy,
                requests / wall
            ),
            ">= 90%",
            pass(busy >= 0.9),
        ));
        // The 10M-row projection with the pace this run measured.
        let plan = stripe_reconciler::capacity::plan(stripe_reconciler::capacity::PlanInput {
            rows_ahead: 10_000_000.0,
            new_rows_per_second: 0.0,
            cycle_elapsed_seconds: 0.0,
            target_cycle_seconds: target as f64,
            schedule_interval_seconds: INTERVAL,
            run_seconds: DEADLINE,
            pace: stripe_reconciler::capacity::Pace {
                rows_per_second: pace,
                measured: true,
            },
            rate_rows_per_second: f64::from(RPS) * 95.0,
            batch_size: if settings.batch_size == 0 {
                1_900
            } else {
                settings.batch_size
            },
        });
        if settings.batches_per_run == 0 {
            out.push(line(
                &s,
                "10M rows: planned rows per run, run time, cycle",
                format!(
                    "{:.0} rows, {:.0} s, {}",
                    plan.rows_per_run_planned,
                    plan.rows_per_run_planned / pace,
                    plan.expected_cycle_seconds
                        .map_or("never".to_owned(), |c| format!("{:.1} h", c / 3600.0))
                ),
                "cycle <= 24 h",
                pass(
                    plan.shortfall.is_none()
                        && plan.expected_cycle_seconds.is_some_and(|c| c <= 86_400.0),
                ),
            ));
        } else {
            let c = 10_000_000.0 / (run.rows.max(1) as f64 / INTERVAL);
            out.push(line(
                &s,
                "10M rows: cycle",
                format!("{:.1} days", c / 86_400.0),
                "",
                String::new(),
            ));
        }
    }
    Ok(())
}

/// The issue-12 figures, side by side in one run:
/// L1 list mode at 200 ms / 25 per second; L3 retrieve mode, batch 200, same
/// latency and limit; L2 list mode without latency beside the design note's
/// algorithm; L4 the projection for 10M rows; L5 an account where 90% of the
/// PaymentIntents belong to other applications.
async fn scenarios_list(
    args: &Args,
    dbs: &mut Databases,
    out: &mut Vec<Line>,
) -> anyhow::Result<()> {
    const LATENCY: Duration = Duration::from_millis(200);
    const RPS: u32 = 25;
    let rows = env_rows("BENCH_L1_ROWS", 100_000)?;
    let batch = u32::try_from(env_rows("BENCH_L1_BATCH", 1_900)?)?;
    let pages = u32::try_from(env_rows("BENCH_L1_MAX_PAGES", 20)?)?;

    // L1: list mode, 200 ms, 25/s.
    say(&format!(
        "L1: list mode, latency 200 ms, {RPS}/s, {rows} rows, batches of {batch}, at most {pages} pages per batch"
    ));
    let name = format!("{DB_PREFIX}_l1");
    let url = dbs.fresh(&name, None).await?;
    migrate(&args.bin, &url)?;
    seed(&url, rows, false).await?;
    let copy = dbs
        .fresh(&format!("{DB_PREFIX}_l1_copy"), Some(&name))
        .await?;
    let stripe = ListStandin::start(&url, rows, 0, LATENCY).await?;
    let settings = RunSettings {
        batch_size: batch,
        batches_per_run: u32::try_from(rows / u64::from(batch) + 2).unwrap_or(1000),
        rate_limit_rps: RPS,
        max_in_flight: 8,
        extra_env: list_mode(batch, pages),
    };
    let run = run_binary(&args.bin, &url, &stripe.uri(), &settings).await?;
    let arrivals = stripe.take_arrivals();
    check_exit(&run)?;
    let wall = run.wall.as_secs_f64();
    let l1_rows_per_s = run.rows as f64 / wall;
    let requests = arrivals.len() as f64;
    let verified = findings_by_kind(&url)
        .await?
        .get("verified")
        .copied()
        .unwrap_or(0);
    eprintln!(
        "    {} rows ({verified} verified), {} list + {} retrieve requests in {wall:.1} s; peak RSS {:.1} MiB",
        run.rows,
        run.stripe_requests.1,
        run.stripe_requests.0,
        run.peak_rss_kib as f64 / 1024.0
    );
    let s = "L1 (list, 200 ms, 25/s)";
    out.push(line(
        s,
        "rows/s",
        format!(
            "{l1_rows_per_s:.0} ({} rows in {wall:.1} s, batches of {batch}, {pages} pages max)",
            run.rows
        ),
        ">= 2000",
        pass(l1_rows_per_s >= 2000.0 && run.rows == rows),
    ));
    let per_verified = requests / verified.max(1) as f64;
    out.push(line(
        s,
        "Stripe requests per verified row",
        format!(
            "{per_verified:.4} ({} list + {} retrieve for {verified} rows; {:.1} rows per request)",
            run.stripe_requests.1,
            run.stripe_requests.0,
            verified as f64 / requests.max(1.0)
        ),
        "<= 0.02",
        pass(per_verified <= 0.02),
    ));
    let window = max_in_window(&arrivals, Duration::from_secs(1));
    out.push(line(
        s,
        "max requests in any 1-s window",
        window.to_string(),
        "<= 25",
        pass(window <= 25),
    ));
    out.push(line(
        s,
        "share of the rate budget used",
        format!(
            "{:.1}% ({:.2} requests/s)",
            100.0 * requests / wall / f64::from(RPS),
            requests / wall
        ),
        "",
        String::new(),
    ));
    out.push(line(
        s,
        "peak RSS",
        format!("{:.1} MiB", run.peak_rss_kib as f64 / 1024.0),
        "",
        String::new(),
    ));

    // L3: retrieve mode, batch 200, same latency and limit, on a copy.
    let l3_rows = env_rows("BENCH_L3_ROWS", 3_000)?.min(rows);
    say(&format!(
        "L3: retrieve mode, latency 200 ms, {RPS}/s, batches of 200, first {l3_rows} rows of a copy"
    ));
    let settings = RunSettings {
        batch_size: 200,
        batches_per_run: u32::try_from(l3_rows / 200).unwrap_or(15).max(1),
        rate_limit_rps: RPS,
        max_in_flight: 8,
        extra_env: retrieve_mode(),
    };
    let run = run_binary(&args.bin, &copy, &stripe.uri(), &settings).await?;
    let arrivals = stripe.take_arrivals();
    check_exit(&run)?;
    let wall = run.wall.as_secs_f64();
    // The request rate from the first to the last request, batch boundaries
    // included: (n - 1) intervals between n arrivals.
    let span = match (arrivals.first(), arrivals.last()) {
        (Some(a), Some(b)) => (*b - *a).as_secs_f64(),
        _ => wall,
    };
    let gaps: Vec<f64> = arrivals
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1000.0)
        .collect();
    eprintln!(
        "    gaps between arrivals: p50 {:.2} / p90 {:.2} / p99 {:.2} / max {:.2} ms; sum of gaps over 45 ms: {:.0} ms",
        median(&gaps),
        percentile(&gaps, 90.0),
        percentile(&gaps, 99.0),
        percentile(&gaps, 100.0),
        gaps.iter().filter(|g| **g > 45.0).map(|g| g - 41.2).sum::<f64>()
    );
    let big: Vec<String> = gaps
        .iter()
        .enumerate()
        .filter(|(_, g)| **g > 60.0)
        .map(|(i, g)| format!("after request {}: {g:.0} ms", i + 1))
        .collect();
    eprintln!("    gaps over 60 ms: {}", big.join(", "));
    let s3 = "L3 (retrieve, batch 200, 200 ms, 25/s)";
    let share = arrivals.len().saturating_sub(1) as f64 / span / f64::from(RPS);
    out.push(line(
        s3,
        "share of the rate budget used ((requests - 1) / first-to-last request / 25)",
        format!(
            "{:.1}% ({} requests in {span:.2} s, {} batches; {} rows in {wall:.1} s of run)",
            share * 100.0,
            arrivals.len(),
            run.batches,
            run.rows
        ),
        ">= 97%",
        pass(share >= 0.97),
    ));
    out.push(line(
        s3,
        "share of the rate budget over the whole run (incl. start-up and summary)",
        format!(
            "{:.1}%",
            100.0 * arrivals.len() as f64 / wall / f64::from(RPS)
        ),
        "",
        String::new(),
    ));
    let window = max_in_window(&arrivals, Duration::from_secs(1));
    out.push(line(
        s3,
        "max requests in any 1-s window",
        window.to_string(),
        "<= 25",
        pass(window <= 25),
    ));
    drop(stripe);

    // L4: the projection.
    let cycle_hours = 10_000_000.0 / l1_rows_per_s / 3600.0;
    out.push(line(
        "L4 (projection)",
        "cycle time of 10M rows at 25 requests/s (10M / L1 rows/s)",
        format!(
            "{cycle_hours:.2} h (retrieve mode at 25/s: {:.1} h)",
            10_000_000.0 / 25.0 / 3600.0
        ),
        "< 2 h",
        pass(cycle_hours < 2.0),
    ));

    // L2: zero latency, DB-bound, list mode beside the design note's algorithm.
    let l2_rows = env_rows("BENCH_L2_ROWS", 100_000)?;
    say(&format!(
        "L2: list mode, no latency, limit off, {l2_rows} rows in batches of 1000, beside the design note's run_batch"
    ));
    let name = format!("{DB_PREFIX}_l2");
    let url = dbs.fresh(&name, None).await?;
    migrate(&args.bin, &url)?;
    seed(&url, l2_rows, false).await?;
    let copy = dbs
        .fresh(&format!("{DB_PREFIX}_l2_copy"), Some(&name))
        .await?;
    let stripe = ListStandin::start(&url, l2_rows, 0, Duration::ZERO).await?;
    let settings = RunSettings {
        batch_size: 1_000,
        batches_per_run: u32::try_from(l2_rows / 1_000 + 2).unwrap_or(102),
        rate_limit_rps: 10_000,
        max_in_flight: 32,
        extra_env: list_mode(1_000, 12),
    };
    let run = run_binary(&args.bin, &url, &stripe.uri(), &settings).await?;
    check_exit(&run)?;
    let wall = run.wall.as_secs_f64();
    let l2_rows_per_s = run.rows as f64 / wall;
    eprintln!(
        "    binary: {} rows in {wall:.2} s, {:.4} requests per row; CPU binary {:.1} s, machine busy {:.0}%",
        run.rows,
        per_row(&run),
        run.cpu_seconds,
        run.machine_busy * 100.0
    );
    let watch = CpuWatch::start();
    let port = seed_run(&copy, &stripe.uri(), 1_000, l2_rows).await?;
    let (port_cpu, _) = watch.stop();
    let port_rows_per_s = port.rows as f64 / port.wall.as_secs_f64();
    eprintln!(
        "    port: {} rows in {:.2} s (CPU port + stand-in {port_cpu:.1} s)",
        port.rows,
        port.wall.as_secs_f64()
    );
    let binary_work = findings_by_kind(&url).await?;
    let port_work = findings_by_kind(&copy).await?;
    if binary_work != port_work {
        eprintln!(
            "    WARNING: the two runs wrote different results: {binary_work:?} vs {port_work:?}"
        );
    }
    let s2 = "L2 (list, no latency, batch 1,000)";
    out.push(line(
        s2,
        "rows/s, stripe-reconciler run (list mode)",
        format!(
            "{l2_rows_per_s:.0} ({} rows in {wall:.2} s; {:.4} requests per row)",
            run.rows,
            per_row(&run)
        ),
        "",
        String::new(),
    ));
    out.push(line(
        s2,
        "rows/s, design note's run_batch (port)",
        format!(
            "{port_rows_per_s:.0} ({} rows in {:.2} s)",
            port.rows,
            port.wall.as_secs_f64()
        ),
        "",
        String::new(),
    ));
    let ratio = l2_rows_per_s / port_rows_per_s;
    out.push(line(
        s2,
        "ratio list mode / design note",
        format!("{ratio:.1}x"),
        ">= 10x",
        pass(ratio >= 10.0),
    ));
    out.push(batch_line(s2, &run));
    let rss = run.peak_rss_kib as f64 / 1024.0;
    out.push(line(
        s2,
        "peak RSS (batch 1,000)",
        format!("{rss:.1} MiB"),
        "< 64 MiB",
        pass(rss < 64.0),
    ));
    drop(stripe);

    // L5: 90% of each window's PaymentIntents belong to other applications.
    let l5_rows = env_rows("BENCH_L5_ROWS", 20_000)?;
    say(&format!(
        "L5: list mode, 9 foreign PaymentIntents per row, {l5_rows} rows in batches of 1000, default page cap (10)"
    ));
    let url = dbs.fresh(&format!("{DB_PREFIX}_l5"), None).await?;
    migrate(&args.bin, &url)?;
    seed(&url, l5_rows, false).await?;
    let stripe = ListStandin::start(&url, l5_rows, 9, Duration::ZERO).await?;
    let settings = RunSettings {
        batch_size: 1_000,
        batches_per_run: u32::try_from(l5_rows / 1_000 + 2).unwrap_or(22),
        rate_limit_rps: 10_000,
        max_in_flight: 32,
        extra_env: list_mode(1_000, 10),
    };
    let run = run_binary(&args.bin, &url, &stripe.uri(), &settings).await?;
    check_exit(&run)?;
    let cap = 1.0 + 10.0 / 1000.0;
    out.push(line(
        "L5 (90% foreign PaymentIntents)",
        "Stripe requests per row",
        format!(
            "{:.4} ({} list + {} retrieve for {} rows)",
            per_row(&run),
            run.stripe_requests.1,
            run.stripe_requests.0,
            run.rows
        ),
        "<= 1.01 (1.0 + 10 pages / 1,000 rows)",
        pass(per_row(&run) <= cap && run.rows == l5_rows),
    ));
    Ok(())
}

fn print_table(lines: &[Line]) {
    println!("| scenario | measure | value | goal | met |");
    println!("|---|---|---|---|---|");
    for l in lines {
        println!(
            "| {} | {} | {} | {} | {} |",
            l.scenario, l.measure, l.value, l.goal, l.verdict
        );
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let started = Instant::now();
    let mut dbs = Databases {
        admin_url: args.admin_url.clone(),
        created: Vec::new(),
    };
    {
        let mut admin = dbs.admin().await?;
        let version: String = sqlx::query_scalar("SHOW server_version")
            .fetch_one(&mut admin)
            .await?;
        eprintln!("PostgreSQL {version}; binary {}", args.bin.display());
    }
    let mut lines = Vec::new();
    let mut result = Ok(());
    for n in [1, 2, 3] {
        if !args.only.contains(&n) {
            continue;
        }
        let r = match n {
            1 => scenario_1(&args, &mut dbs, &mut lines).await,
            2 => {
                let r = scenario_2(
                    &args,
                    &mut dbs,
                    &mut lines,
                    args.only.contains(&4),
                    Duration::ZERO,
                )
                .await;
                if r.is_ok() && std::env::var("BENCH_SKIP_2B").is_err() {
                    scenario_2(
                        &args,
                        &mut dbs,
                        &mut lines,
                        false,
                        Duration::from_millis(10),
                    )
                    .await
                } else {
                    r
                }
            }
            _ => scenario_3(&args, &mut dbs, &mut lines).await,
        };
        if let Err(e) = r {
            eprintln!("scenario {n} failed: {e:#}");
            result = Err(e);
        }
    }
    if args.only.contains(&12) {
        if let Err(e) = scenarios_list(&args, &mut dbs, &mut lines).await {
            eprintln!("issue-12 scenarios failed: {e:#}");
            result = Err(e);
        }
    }
    if args.only.contains(&23) {
        if let Err(e) = scenario_auto(&args, &mut dbs, &mut lines).await {
            eprintln!("issue-23 scenario failed: {e:#}");
            result = Err(e);
        }
    }
    if args.only.contains(&4) && !args.only.contains(&2) {
        if let Err(e) = scenario_4_alone(&args, &mut dbs, &mut lines).await {
            eprintln!("scenario 4 failed: {e:#}");
            result = Err(e);
        }
    }
    if !args.keep {
        dbs.drop_all().await?;
    }
    println!();
    print_table(&lines);
    println!();
    println!(
        "benchmark time (without the build): {:.0} s",
        started.elapsed().as_secs_f64()
    );
    result
}
