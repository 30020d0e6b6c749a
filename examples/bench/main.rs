//! The benchmarks of BENCHMARKS.md. Run them with `scripts/bench.sh` (which builds in
//! release and passes the paths); not part of the production binary.
//!
//! ```text
//! bench --bin PATH/stripe-reconciler [--admin-url postgres://root@127.0.0.1:5432/postgres]
//!       [--only 1,2,3,4,12,23,31] [--keep]
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

//!
//! One file per scenario: `scenario_1`, `scenario_2` (with 2b and 4),
//! `scenario_3`, `scenario_list` (scenarios 12 and 23), `scenario_keys` (scenario 31:
//! bigint, uuid and text keys side by side); what they share is
//! `common`, `standin`, `binary` and `seed_port`.

mod binary;
mod common;
mod scenario_1;
mod scenario_2;
mod scenario_3;
mod scenario_keys;
mod scenario_list;
mod seed_port;
mod standin;

use std::time::{Duration, Instant};

use common::{parse_args, Databases, Line};
use scenario_1::scenario_1;
use scenario_2::{scenario_2, scenario_4_alone};
use scenario_3::scenario_3;
use scenario_keys::scenario_keys;
use scenario_list::{scenario_auto, scenarios_list};

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
    if args.only.contains(&31) {
        if let Err(e) = scenario_keys(&args, &mut dbs, &mut lines).await {
            eprintln!("issue-31 scenario failed: {e:#}");
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
