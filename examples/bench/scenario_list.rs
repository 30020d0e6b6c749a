//! The list-mode scenarios (`--only 12`) and the `auto` plan (`--only 23`).

use super::binary::*;
use super::common::*;
use super::scenario_1::batch_line;
use super::seed_port::seed_run;
use super::standin::max_in_window;

/// A Stripe account for the list benchmark: the PaymentIntent `pi_<g>` of
/// every seeded row `g`, `succeeded`, created in the second of its row's
/// `created_at` give or take two seconds (rows are one second apart), and
/// `foreign` PaymentIntents of other applications per row in the same second.
/// Serves `GET /v1/payment_intents/{id}` and the list endpoint (newest first,
/// `created[gte]`/`created[lte]`, `limit`, `starting_after`, Stripe's list
/// shape), after `latency`, and records every arrival.
pub(crate) struct ListAccount {
    /// `created` of row 1's second (Unix seconds).
    pub(crate) first: i64,
    pub(crate) rows: u64,
    pub(crate) foreign: u64,
    /// Every listed PaymentIntent as `(created, key)`, newest first; key
    /// `g * (foreign + 1) + k`, k = 0 for the row's own PaymentIntent.
    pub(crate) order: Vec<(i64, u64)>,
    /// The fixture with `"__BENCH_ID__"` and `-4242` for the id and `created`.
    pub(crate) template: String,
    pub(crate) latency: Duration,
    pub(crate) arrivals: Arc<Mutex<Vec<Instant>>>,
    pub(crate) lists: AtomicU64,
    /// Rows Stripe does not know and rows whose reads fail ([`Faults`]).
    pub(crate) faults: Faults,
}

/// Rows of the seed the stand-in answers badly (scenario 31's
/// `BENCH_K_FAULTS=1`): `unknown` rows (`g % 50 == 7`, 2 %) are in no list and
/// retrieving them is Stripe's 404; `failing` rows (`g % 200 == 13`, 0.5 %)
/// are in no list and retrieving them is a 500 with `Stripe-Should-Retry:
/// false` (one attempt: the read fails without the 0.5 s + 1 s of backoff
/// that would make a DB-bound run wait for Stripe).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Faults {
    pub(crate) on: bool,
}

impl Faults {
    pub(crate) fn unknown(self, g: u64) -> bool {
        self.on && g % 50 == 7
    }

    pub(crate) fn failing(self, g: u64) -> bool {
        self.on && g % 200 == 13
    }
}

impl ListAccount {
    /// -2..=2 seconds, pseudo-random (a multiplicative hash, so batch
    /// boundaries do not line up with a pattern).
    pub(crate) fn jitter(g: u64) -> i64 {
        ((g.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % 5) as i64 - 2
    }

    pub(crate) fn created(&self, key: u64) -> i64 {
        let (g, k) = (key / (self.foreign + 1), key % (self.foreign + 1));
        let second = self.first + g as i64 - 1;
        if k == 0 {
            second + Self::jitter(g)
        } else {
            second
        }
    }

    pub(crate) fn id(&self, key: u64) -> String {
        let (g, k) = (key / (self.foreign + 1), key % (self.foreign + 1));
        if k == 0 {
            format!("pi_{g}")
        } else {
            format!("pi_x{g}x{k}")
        }
    }

    pub(crate) fn key(&self, id: &str) -> Option<u64> {
        let rest = id.strip_prefix("pi_")?;
        match rest.strip_prefix('x') {
            None => Some(rest.parse::<u64>().ok()? * (self.foreign + 1)),
            Some(foreign) => {
                let (g, k) = foreign.split_once('x')?;
                Some(g.parse::<u64>().ok()? * (self.foreign + 1) + k.parse::<u64>().ok()?)
            }
        }
    }

    pub(crate) fn object(&self, key: u64) -> String {
        let id = serde_json::to_string(&self.id(key)).unwrap_or_default();
        self.template.replacen("\"__BENCH_ID__\"", &id, 1).replacen(
            "-4242",
            &self.created(key).to_string(),
            1,
        )
    }

    pub(crate) fn list(&self, request: &Request) -> String {
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
        let mut should_retry = None;
        let (status, body) = if path == "/v1/payment_intents" {
            (200, self.list(request))
        } else {
            let g = |key: u64| key / (self.foreign + 1);
            match path.rsplit('/').next().and_then(|id| self.key(id)) {
                Some(key) if self.faults.failing(g(key)) => {
                    should_retry = Some("false");
                    (
                        500,
                        r#"{"error":{"type":"api_error","message":"bench: this read fails"}}"#
                            .to_owned(),
                    )
                }
                Some(key) if g(key) <= self.rows && !self.faults.unknown(g(key)) => {
                    (200, self.object(key))
                }
                _ => (
                    404,
                    r#"{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such payment_intent"}}"#
                        .to_owned(),
                ),
            }
        };
        let mut template = ResponseTemplate::new(status)
            .insert_header("Request-Id", "req_bench_list")
            .set_body_raw(body, "application/json");
        if let Some(v) = should_retry {
            template = template.insert_header("Stripe-Should-Retry", v);
        }
        if self.latency.is_zero() {
            template
        } else {
            template.set_delay(self.latency)
        }
    }
}

pub(crate) struct ListStandin {
    pub(crate) server: MockServer,
    pub(crate) arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl ListStandin {
    /// Serves the account of the `rows` seeded in `url`.
    pub(crate) async fn start(
        url: &str,
        rows: u64,
        foreign: u64,
        latency: Duration,
    ) -> anyhow::Result<Self> {
        Self::start_with(url, rows, foreign, latency, Faults::default()).await
    }

    /// [`Self::start`] with rows Stripe does not know and rows whose reads fail.
    pub(crate) async fn start_with(
        url: &str,
        rows: u64,
        foreign: u64,
        latency: Duration,
        faults: Faults,
    ) -> anyhow::Result<Self> {
        let mut conn = PgConnection::connect(url).await?;
        let first: i64 = sqlx::query_scalar(
            "SELECT floor(extract(epoch FROM created_at))::bigint FROM payments ORDER BY created_at, id LIMIT 1",
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
        // A succeeded PaymentIntent without its charge is unverifiable
        // (refunds and disputes cannot be checked): give it one, in full.
        if pi["latest_charge"].is_null() || pi["latest_charge"].is_string() {
            pi["latest_charge"] = serde_json::json!({
                "id": "ch_bench", "object": "charge", "amount": pi["amount"].clone(),
                "amount_refunded": 0, "refunded": false, "disputed": false,
                "currency": pi["currency"].clone()});
        }
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
            faults,
        };
        let mut order = Vec::with_capacity((rows * (foreign + 1)) as usize);
        for g in (1..=rows).filter(|&g| !faults.unknown(g) && !faults.failing(g)) {
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

    pub(crate) fn uri(&self) -> String {
        self.server.uri()
    }

    pub(crate) fn take_arrivals(&self) -> Vec<Instant> {
        let mut a = std::mem::take(&mut *self.arrivals.lock().unwrap_or_else(|p| p.into_inner()));
        a.sort_unstable();
        a
    }
}

pub(crate) fn list_mode(batch: u32, max_pages: u32) -> Vec<(&'static str, String)> {
    vec![
        ("RECONCILER_READ_MODE", "list".to_owned()),
        ("RECONCILER_LIST_MAX_PAGES", max_pages.to_string()),
        ("RECONCILER_BATCH_SIZE", batch.to_string()),
    ]
}

/// Requests per row of a run: from the binary's own `stripe_requests`.
pub(crate) fn per_row(run: &BinaryRun) -> f64 {
    (run.stripe_requests.0 + run.stripe_requests.1) as f64 / run.rows.max(1) as f64
}

/// Scenario 23, side by side on one table (two cursors, `RECONCILER_JOB`): the
/// chart's defaults before (batches of 200, 10 per run, 10 pages) and after
/// (`auto`, list batches of 1,900, pages `auto`, the target of 86,400 s) at
/// 100 ms latency and 10 requests/s, one run each with the chart's run
/// deadline (480 s); the 10M-row projection from the measured pace.
pub(crate) async fn scenario_auto(
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
    migrate_seed_table(&args.bin, &url).await?;
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
pub(crate) async fn scenarios_list(
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
    migrate_seed_table(&args.bin, &url).await?;
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
    migrate_seed_table(&args.bin, &url).await?;
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
    migrate_seed_table(&args.bin, &url).await?;
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
