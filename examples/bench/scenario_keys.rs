//! Scenario 31 (`--only 31`): list mode on tables keyed by bigint, random uuid v4 and text,
//! side by side, DB-bound (no latency, high limit) and Stripe-bound
//! (200 ms, 25 requests/s).
//!
//! - `BENCH_KEY`: the key types to run, comma-separated (`bigint,uuid,text`,
//!   the default).
//! - `BENCH_KEY_INDEX`: the application's index for the uuid and text tables:
//!   `created_at` (default: `(created_at)`, walked in `(created_at, id)`
//!   order), `created_at_id` (`(created_at, id)`) or `none` (walked by key,
//!   docs/keys.md's fallback). The bigint table never gets one (walked by key).
//! - `BENCH_K_FAULTS=1`: 2 % of the rows unknown to Stripe (404) and 0.5 %
//!   whose reads fail (500), in no list page ([`Faults`]).
//! - `BENCH_K_ROWS` (1,000,000): rows of the DB-bound run; `BENCH_K_SLOW_ROWS`
//!   (1,000,000): rows of the 200 ms / 25 per second run; 0 skips a run.

use super::binary::*;
use super::common::*;
use super::scenario_1::batch_line;
use super::scenario_list::{list_mode, Faults, ListStandin};

/// `payments.id`'s SQL type and the expression that keys row `g`.
fn key_type(name: &str) -> anyhow::Result<(&'static str, &'static str)> {
    Ok(match name {
        "bigint" => ("bigint", "g"),
        "uuid" => ("uuid", "gen_random_uuid()"),
        "text" => ("text", "'pay_' || md5(g::text)"),
        other => bail!("BENCH_KEY: {other:?} is not bigint, uuid or text"),
    })
}

/// Creates the application's own `payments` keyed by `key` and seeds `rows`
/// as `seed` does (one second apart, `pi_<g>`, 1% pending, 0.5% failed),
/// with `index` on the uuid and text tables; ANALYZE; then `migrate` (which
/// registers every existing row, as on an install).
async fn keyed_table(
    args: &Args,
    url: &str,
    key: &str,
    index: &str,
    rows: u64,
) -> anyhow::Result<()> {
    let (sql_type, id) = key_type(key)?;
    // BENCH_K_LOAD=after: rows loaded after `migrate` (never registered).
    let after = std::env::var("BENCH_K_LOAD").is_ok_and(|l| l == "after");
    let mut conn = PgConnection::connect(url).await?;
    sqlx::raw_sql(&format!(
        "CREATE TABLE payments (
             id {sql_type} PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text NOT NULL UNIQUE,
             status text NOT NULL,
             version bigint NOT NULL DEFAULT 0,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now())"
    ))
    .execute(&mut conn)
    .await?;
    if after {
        migrate(&args.bin, url)?;
    }
    sqlx::query(&format!(
        "INSERT INTO payments (id, order_id, stripe_payment_intent_id, status, created_at, updated_at)
         SELECT {id}, 'ord_' || g, 'pi_' || g,
                CASE WHEN g % 100 = 0 THEN 'pending' WHEN g % 200 = 1 THEN 'failed' ELSE 'paid' END,
                now() - interval '2 hours' - ($1 - g) * interval '1 second',
                now() - interval '1 hour'
           FROM generate_series(1::bigint, $1) AS g"
    ))
    .bind(rows as i64)
    .execute(&mut conn)
    .await
    .context("seeding payments")?;
    let create_index = match (key, index) {
        ("bigint", _) | (_, "none") => None,
        (_, "created_at") => Some("CREATE INDEX payments_created_at ON payments (created_at)"),
        (_, "created_at_id") => {
            Some("CREATE INDEX payments_created_at_id ON payments (created_at, id)")
        }
        (_, other) => bail!("BENCH_KEY_INDEX: {other:?} is not created_at, created_at_id or none"),
    };
    if let Some(sql) = create_index {
        sqlx::raw_sql(sql).execute(&mut conn).await?;
    }
    sqlx::raw_sql("ANALYZE payments").execute(&mut conn).await?;
    conn.close().await?;
    if after {
        return Ok(());
    }
    migrate(&args.bin, url)
}

/// One case of the scenario: the key type, the index on `created_at`, the
/// table's rows, and whether Stripe is slow (200 ms, 25/s).
#[derive(Debug, Clone, Copy)]
struct KeyCase<'a> {
    key: &'a str,
    index: &'a str,
    rows: u64,
    slow: bool,
}

/// One run of list mode on a fresh `key`-keyed table of `rows` rows.
async fn keyed_run(
    args: &Args,
    dbs: &mut Databases,
    out: &mut Vec<Line>,
    case: KeyCase<'_>,
) -> anyhow::Result<()> {
    let KeyCase {
        key,
        index,
        rows,
        slow,
    } = case;
    let (latency, rps, in_flight) = if slow {
        (Duration::from_millis(200), 25, 8)
    } else {
        (Duration::ZERO, 10_000, 32)
    };
    let case = if slow {
        "200 ms, 25/s"
    } else {
        "no latency, limit off"
    };
    let walk = if key == "bigint" {
        "walk by key".to_owned()
    } else if index == "none" {
        "no index: the reconciler's own ordered copy, (created_at, id) walk".to_owned()
    } else {
        let columns = if index == "created_at_id" {
            "created_at, id"
        } else {
            "created_at"
        };
        format!("index ({columns}), (created_at, id) walk")
    };
    let faults = Faults {
        on: std::env::var("BENCH_K_FAULTS").is_ok_and(|f| f == "1"),
    };
    say(&format!(
        "issue 31: {key} keys, {walk}, {rows} rows, list mode, {case}{}",
        if faults.on {
            ", 2% unknown to Stripe, 0.5% failing reads"
        } else {
            ""
        }
    ));
    let url = dbs
        .fresh(
            &format!("{DB_PREFIX}_k_{key}_{}", if slow { "slow" } else { "fast" }),
            None,
        )
        .await?;
    let seeded = Instant::now();
    keyed_table(args, &url, key, index, rows).await?;
    eprintln!(
        "    seeded and migrated in {:.1} s",
        seeded.elapsed().as_secs_f64()
    );
    let stripe = ListStandin::start_with(&url, rows, 0, latency, faults).await?;
    let settings = RunSettings {
        batch_size: 1_900,
        batches_per_run: u32::try_from(rows / 1_900 + 2).unwrap_or(u32::MAX),
        rate_limit_rps: rps,
        max_in_flight: in_flight,
        extra_env: list_mode(1_900, 20),
    };
    let run = run_binary(&args.bin, &url, &stripe.uri(), &settings).await?;
    check_exit(&run)?;
    let wall = run.wall.as_secs_f64();
    let work = findings_by_kind(&url).await?;
    eprintln!(
        "    {} rows, {} list + {} retrieve in {wall:.1} s; {work:?}",
        run.rows, run.stripe_requests.1, run.stripe_requests.0
    );
    let s = format!("K {key} ({walk}; {case})");
    let lists = run.stripe_requests.1 as f64 / run.rows.max(1) as f64;
    out.push(line(
        &s,
        "rows/s",
        format!(
            "{:.0} ({} rows in {wall:.1} s)",
            run.rows as f64 / wall,
            run.rows
        ),
        "",
        pass(run.rows == rows),
    ));
    out.push(line(
        &s,
        "list requests per row (retrieves per row)",
        format!(
            "{lists:.4} ({:.4}; {} list + {} retrieve)",
            run.stripe_requests.0 as f64 / run.rows.max(1) as f64,
            run.stripe_requests.1,
            run.stripe_requests.0
        ),
        "<= 0.012",
        pass(lists <= 0.012),
    ));
    out.push(batch_line(&s, &run));
    out.push(tenths_line(&s, &run.batch_seconds));
    Ok(())
}

/// The mean batch time of the cycle's last tenth against its first tenth:
/// a batch that costs more as the cursor moves shows here.
fn tenths_line(s: &str, seconds: &[f64]) -> Line {
    let tenth = (seconds.len() / 10).max(1);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let first = mean(&seconds[..tenth.min(seconds.len())]);
    let last = mean(&seconds[seconds.len().saturating_sub(tenth)..]);
    let ratio = last / first.max(f64::EPSILON);
    line(
        s,
        "mean batch time, last tenth / first tenth",
        format!("{ratio:.2}x ({last:.3} s / {first:.3} s)"),
        "<= 1.25x",
        pass(ratio <= 1.25),
    )
}

/// Scenario 31's side-by-side runs (see the module doc for the variables).
pub(crate) async fn scenario_keys(
    args: &Args,
    dbs: &mut Databases,
    out: &mut Vec<Line>,
) -> anyhow::Result<()> {
    let keys = std::env::var("BENCH_KEY").unwrap_or_else(|_| "bigint,uuid,text".to_owned());
    let index = std::env::var("BENCH_KEY_INDEX").unwrap_or_else(|_| "created_at".to_owned());
    let fast = env_rows("BENCH_K_ROWS", 1_000_000)?;
    let slow = env_rows("BENCH_K_SLOW_ROWS", 1_000_000)?;
    for (rows, is_slow) in [(fast, false), (slow, true)] {
        if rows == 0 {
            continue;
        }
        for key in keys.split(',').map(str::trim) {
            let case = KeyCase {
                key,
                index: &index,
                rows,
                slow: is_slow,
            };
            keyed_run(args, dbs, out, case).await?;
        }
    }
    Ok(())
}
