//! Scenario 3: the batch read and the lag query on 1,000,000 rows (EXPLAIN ANALYZE).

use super::binary::median;
use super::common::*;

pub(crate) fn plan_nodes(plan: &Value, out: &mut Vec<String>) {
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

pub(crate) async fn explain(
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

pub(crate) async fn scenario_3(
    args: &Args,
    dbs: &mut Databases,
    out: &mut Vec<Line>,
) -> anyhow::Result<()> {
    const RUNS: usize = 9;
    let rows = env_rows("BENCH_S3_ROWS", 1_000_000)?;
    say(&format!(
        "scenario 3: batch read and lag query on {rows} rows (EXPLAIN ANALYZE, median of {RUNS})"
    ));
    let url = dbs.fresh(&format!("{DB_PREFIX}_s3"), None).await?;
    migrate_seed_table(&args.bin, &url).await?;
    let seeded = seed(&url, rows, true).await?;
    eprintln!(
        "    seeded {rows} rows and analyzed in {:.1} s",
        seeded.as_secs_f64()
    );
    let mut conn = PgConnection::connect(&url).await?;
    let middle = rows / 2;
    // The lag reads the highest seen id first (one primary-key lookup), then
    // binds it; here it is inlined, which plans the same.
    let key = stripe_reconciler::key::KeyType::default();
    let head = payment_state::highest_seen(&mut conn, &key)
        .await?
        .map_or_else(|| i64::MIN.to_string(), |h| h.key.to_string());
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
            format!(
                "SELECT now() - {}",
                stats::lag_since(&key, (1, 2), true, &Default::default())
                    .replace("$1", &format!("'{head}'"))
                    .replace("$2", "NULL")
            ),
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
