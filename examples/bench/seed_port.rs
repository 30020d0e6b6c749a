//! The design note's algorithm (shared/seed), ported faithfully: scenario 2's baseline.

use super::common::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum SeedVerdict {
    InSync,
    InFlight,
    Repairable,
    NeedsReview,
    Unverifiable,
}

pub(crate) struct SeedDecision {
    pub(crate) verdict: SeedVerdict,
    pub(crate) kind: Option<String>,
    pub(crate) repair_command: Option<&'static str>,
}

impl SeedDecision {
    pub(crate) fn plain(verdict: SeedVerdict) -> Self {
        SeedDecision {
            verdict,
            kind: None,
            repair_command: None,
        }
    }
    pub(crate) fn with(verdict: SeedVerdict, kind: &str, command: Option<&'static str>) -> Self {
        SeedDecision {
            verdict,
            kind: Some(kind.to_owned()),
            repair_command: command,
        }
    }
}

/// The seed's `classify`, as written there.
pub(crate) fn seed_classify(local: &str, external: &str) -> SeedDecision {
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

pub(crate) enum GatewayOutcome {
    Status(String),
    NotFound,
    Unavailable,
}

/// The seed's `PaymentGateway.payment_intent_status`: one blocking read (here
/// awaited before the next one starts) with a keep-alive HTTP client, like the
/// Stripe SDK's session.
pub(crate) async fn seed_gateway_status(
    http: &reqwest::Client,
    base: &str,
    pi: &str,
) -> GatewayOutcome {
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
pub(crate) struct SeedBatchReport {
    pub(crate) scanned: u64,
    pub(crate) counts: BTreeMap<SeedVerdict, u64>,
    pub(crate) wrapped: bool,
}

/// The seed's `run_batch`, statement for statement: phase 1 in one short
/// transaction, phase 2 one Stripe read at a time, phase 3 one UPDATE per
/// verified row, one INSERT per finding, one outbox INSERT per new repairable
/// finding, then the cursor compare-and-set.
pub(crate) async fn seed_run_batch(
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

pub(crate) struct SeedRun {
    pub(crate) wall: Duration,
    pub(crate) rows: u64,
    pub(crate) batches: u64,
    pub(crate) counts: BTreeMap<SeedVerdict, u64>,
}

/// Calls the port's `run_batch` until the cursor wraps (or `max_rows` rows
/// were scanned), on one connection, like the seed's psycopg connection.
pub(crate) async fn seed_run(
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
