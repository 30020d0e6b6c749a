//! What every scenario shares: the command line, the databases, the seed,
//! the findings, and the result table's lines.

pub(crate) use std::collections::BTreeMap;

use super::binary::BinaryRun;

pub(crate) use std::io::{BufRead, BufReader, Read};
pub(crate) use std::path::PathBuf;
pub(crate) use std::process::{Command, Stdio};
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
pub(crate) use std::sync::{Arc, Mutex};
pub(crate) use std::time::{Duration, Instant};

pub(crate) use anyhow::{bail, ensure, Context};
pub(crate) use serde_json::Value;
pub(crate) use sqlx::postgres::PgConnection;
pub(crate) use sqlx::{Connection, Row};
pub(crate) use stripe_reconciler::store::{payment_state, stats};
pub(crate) use wiremock::matchers::{method, path_regex};
pub(crate) use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub(crate) const FIXTURE: &str = include_str!("../../tests/fixtures/payment_intent.json");
pub(crate) const API_KEY: &str = "sk_test_bench";
pub(crate) const DB_PREFIX: &str = "stripe_reconciler_bench";
/// The design note's default job name (also the binary's default).
pub(crate) const JOB: &str = "payments-vs-stripe";

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

pub(crate) struct Args {
    pub(crate) bin: PathBuf,
    pub(crate) admin_url: String,
    pub(crate) only: Vec<u32>,
    pub(crate) keep: bool,
}

pub(crate) fn parse_args() -> anyhow::Result<Args> {
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
pub(crate) fn default_bin() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.join("stripe-reconciler")))
        .unwrap_or_else(|| PathBuf::from("target/release/stripe-reconciler"))
}

pub(crate) fn env_rows(var: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(var) {
        Ok(v) => v.trim().parse().with_context(|| format!("{var}={v:?}")),
        Err(_) => Ok(default),
    }
}

// ---------------------------------------------------------------------------
// Databases
// ---------------------------------------------------------------------------

pub(crate) struct Databases {
    pub(crate) admin_url: String,
    pub(crate) created: Vec<String>,
}

impl Databases {
    pub(crate) fn url(&self, name: &str) -> anyhow::Result<String> {
        let mut url = url::Url::parse(&self.admin_url).context("--admin-url is not a URL")?;
        url.set_path(&format!("/{name}"));
        Ok(url.to_string())
    }

    pub(crate) async fn admin(&self) -> anyhow::Result<PgConnection> {
        PgConnection::connect(&self.admin_url)
            .await
            .context("connecting to the admin database")
    }

    /// Drops and creates `name` (from `template` when given); returns its URL.
    pub(crate) async fn fresh(
        &mut self,
        name: &str,
        template: Option<&str>,
    ) -> anyhow::Result<String> {
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

    pub(crate) async fn drop_all(&self) -> anyhow::Result<()> {
        let mut admin = self.admin().await?;
        for name in &self.created {
            sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut admin)
                .await?;
        }
        Ok(())
    }
}

/// The application's `payments` as the seed (and `scripts/lib.sh`'s demo)
/// has it, with the two columns [`seed`] still fills, then `migrate`:
/// `migrate` checks `payments` first and creates nothing without it.
pub(crate) async fn migrate_seed_table(bin: &PathBuf, url: &str) -> anyhow::Result<()> {
    let mut conn = PgConnection::connect(url).await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS payments (
             id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
             order_id text NOT NULL,
             stripe_payment_intent_id text UNIQUE,
             status text NOT NULL,
             version bigint NOT NULL DEFAULT 0,
             created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now(),
             observed_external_status text,
             last_reconciled_at timestamptz)",
    )
    .execute(&mut conn)
    .await
    .context("creating the application's payments")?;
    conn.close().await?;
    migrate(bin, url)
}

pub(crate) fn migrate(bin: &PathBuf, url: &str) -> anyhow::Result<()> {
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
pub(crate) async fn seed(url: &str, rows: u64, half_reconciled: bool) -> anyhow::Result<Duration> {
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
pub(crate) async fn findings_by_kind(url: &str) -> anyhow::Result<BTreeMap<String, i64>> {
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

/// One line of the results table.
pub(crate) struct Line {
    pub(crate) scenario: String,
    pub(crate) measure: String,
    pub(crate) value: String,
    pub(crate) goal: String,
    pub(crate) verdict: String,
}

pub(crate) fn pass(ok: bool) -> String {
    if ok { "PASS" } else { "FAIL" }.to_owned()
}

pub(crate) fn line(
    scenario: &str,
    measure: &str,
    value: String,
    goal: &str,
    verdict: String,
) -> Line {
    Line {
        scenario: scenario.into(),
        measure: measure.into(),
        value,
        goal: goal.into(),
        verdict,
    }
}

pub(crate) fn say(msg: &str) {
    eprintln!("\x1b[1m==> {msg}\x1b[0m");
}

pub(crate) fn check_exit(run: &BinaryRun) -> anyhow::Result<()> {
    ensure!(
        run.exit.success(),
        "stripe-reconciler run exited with {}:\n{}",
        run.exit,
        run.stderr_tail
    );
    Ok(())
}
