//! Running the real binary as a subprocess: its settings, peak RSS, CPU and batch times.

use super::common::*;

pub(crate) struct RunSettings {
    /// 0: unset (the binary's default for the read mode).
    pub(crate) batch_size: u32,
    /// 0: `auto`.
    pub(crate) batches_per_run: u32,
    pub(crate) rate_limit_rps: u32,
    pub(crate) max_in_flight: u32,
    /// More variables (RECONCILER_READ_MODE, RECONCILER_LIST_MAX_PAGES, ...).
    pub(crate) extra_env: Vec<(&'static str, String)>,
}

/// The issue-6 scenarios measure one request per row: retrieve mode (their
/// stand-in serves only `GET /v1/payment_intents/{id}`).
pub(crate) fn retrieve_mode() -> Vec<(&'static str, String)> {
    vec![("RECONCILER_READ_MODE", "retrieve".to_owned())]
}

pub(crate) struct BinaryRun {
    pub(crate) wall: Duration,
    pub(crate) exit: std::process::ExitStatus,
    pub(crate) rows: u64,
    pub(crate) batches: usize,
    /// Seconds of each batch that read rows (the wrap batch is left out).
    pub(crate) batch_seconds: Vec<f64>,
    pub(crate) peak_rss_kib: u64,
    /// CPU seconds of the binary (last sample before it exited).
    pub(crate) cpu_seconds: f64,
    /// CPU seconds of this process (the stand-in) during the run.
    pub(crate) standin_cpu_seconds: f64,
    /// Busy share of all CPUs during the run.
    pub(crate) machine_busy: f64,
    pub(crate) stderr_tail: String,
    /// `stripe_requests` of the run summary: (retrieve, list).
    pub(crate) stripe_requests: (u64, u64),
}

pub(crate) static LOG_SEQ: AtomicU64 = AtomicU64::new(0);

/// utime + stime of a process, in clock ticks (USER_HZ, 100 on Linux).
pub(crate) fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces: fields count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// (busy, total) jiffies of all CPUs from /proc/stat.
pub(crate) fn machine_ticks() -> Option<(u64, u64)> {
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
pub(crate) struct CpuWatch {
    pub(crate) own: u64,
    pub(crate) machine: (u64, u64),
}

impl CpuWatch {
    pub(crate) fn start() -> Self {
        CpuWatch {
            own: cpu_ticks("self").unwrap_or(0),
            machine: machine_ticks().unwrap_or((0, 0)),
        }
    }
    /// (CPU seconds of this process since start, busy share of all CPUs).
    pub(crate) fn stop(&self) -> (f64, f64) {
        let own = cpu_ticks("self").unwrap_or(0).saturating_sub(self.own) as f64 / 100.0;
        let (b, t) = machine_ticks().unwrap_or((0, 0));
        let share = (b - self.machine.0) as f64 / ((t - self.machine.1).max(1)) as f64;
        (own, share)
    }
}

pub(crate) fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

pub(crate) async fn run_binary(
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
            // 0: `auto`, the binary sizes the run itself (docs/operations.md,
            // "Sizing (`auto`)").
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
    let (status, wall) = waiter
        .join()
        .map_err(|_| anyhow::anyhow!("the thread waiting for stripe-reconciler panicked"))?;
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
pub(crate) fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

pub(crate) fn median(values: &[f64]) -> f64 {
    percentile(values, 50.0)
}
