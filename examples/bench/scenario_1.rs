//! Scenario 1: latency 200 ms, 25 reads/s, 2,000 rows in batches of 200.

use super::binary::*;
use super::common::*;
use super::standin::*;

pub(crate) async fn scenario_1(
    args: &Args,
    dbs: &mut Databases,
    out: &mut Vec<Line>,
) -> anyhow::Result<()> {
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
    migrate_seed_table(&args.bin, &url).await?;
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

pub(crate) fn batch_line(s: &str, run: &BinaryRun) -> Line {
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
