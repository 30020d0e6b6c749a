//! Scenario 2 (with 2b and 4): the binary beside the design note's sequential port, and its peak RSS.

use super::binary::*;
use super::common::*;
use super::scenario_1::batch_line;
use super::seed_port::*;
use super::standin::*;

/// Scenario 2 (and its latency variant 2b): the binary beside the design
/// note's algorithm on identical copies of one database and the same stand-in.
pub(crate) async fn scenario_2(
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
    // BENCH_S2_MODE=list: the binary in list mode against the list stand-in
    // (the port, the design note's algorithm, retrieves as it always did).
    let list = !variant && std::env::var("BENCH_S2_MODE").is_ok_and(|m| m == "list");
    let settings = RunSettings {
        batch_size: 1_000,
        batches_per_run: u32::try_from(rows / 1_000 + 1).unwrap_or(101),
        rate_limit_rps: u32::try_from(env_rows("BENCH_S2_RPS", 10_000)?)?,
        max_in_flight: u32::try_from(env_rows("BENCH_S2_IN_FLIGHT", 32)?)?,
        extra_env: if list {
            super::scenario_list::list_mode(1_000, 12)
        } else {
            retrieve_mode()
        },
    };
    say(&format!(
        "scenario {}{}: latency {latency:?}, rate limit {} /s, {} in flight, {rows} rows, batches of {} x {}",
        if variant { "2b" } else { "2" },
        if list { " (list mode)" } else { "" },
        settings.rate_limit_rps,
        settings.max_in_flight,
        settings.batch_size,
        settings.batches_per_run
    ));
    let name = format!("{DB_PREFIX}_{tag}");
    let url = dbs.fresh(&name, None).await?;
    migrate_seed_table(&args.bin, &url).await?;
    let seeded = seed(&url, rows, false).await?;
    eprintln!("    seeded {rows} rows in {:.1} s", seeded.as_secs_f64());
    // An identical fresh copy for the design note's algorithm.
    let copy_url = dbs
        .fresh(&format!("{DB_PREFIX}_s2_seed"), Some(&name))
        .await?;

    let (run, arrivals) = if list {
        let stripe =
            super::scenario_list::ListStandin::start(&url, rows, 0, Duration::ZERO).await?;
        let run = run_binary(&args.bin, &url, &stripe.uri(), &settings).await?;
        (run, stripe.take_arrivals())
    } else {
        let stripe = StripeStandin::start(Duration::ZERO).await?;
        let run = run_binary(&args.bin, &url, &stripe.uri(), &settings).await?;
        (run, stripe.take_arrivals())
    };
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
        format!(
            "2 (no latency, limit off, {} mode)",
            if list { "list" } else { "retrieve" }
        )
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
pub(crate) async fn scenario_4_alone(
    args: &Args,
    dbs: &mut Databases,
    out: &mut Vec<Line>,
) -> anyhow::Result<()> {
    let rows = env_rows("BENCH_S2_ROWS", 100_000)?;
    say(&format!(
        "scenario 4: peak RSS of a run over {rows} rows in batches of 1000"
    ));
    let url = dbs.fresh(&format!("{DB_PREFIX}_s4"), None).await?;
    migrate_seed_table(&args.bin, &url).await?;
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
