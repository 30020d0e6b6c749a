#!/usr/bin/env bash
# The subscriptions scan benchmark (BENCHMARKS.md, "Issue 41 — subscriptions"):
# `stripe-reconciler run --object subscriptions` in list mode over a table of
# ROWS subscriptions (default 1,000,000) against the local stand-in's
# generated subscriptions (`--subscriptions ROWS`, examples/standin/subscriptions.rs),
# release build, one run per scenario, each with its own job name (cursor):
#
#   db     no latency, RECONCILER_RATE_LIMIT_RPS=2000: rows/s bound by the
#          database and the binary; list requests per row;
#   paced  200 ms latency, 25 requests/s: rows/s against a Stripe account
#          that knows every row's subscription (goal >= 2,000 rows/s).
#
#   bash scripts/bench-subscriptions.sh [ROWS] [db,paced]
#
# The application's table is generated in SQL (generate_series) in step with
# the stand-in's generated subscriptions (same `--anchor`): ids
# sub_standin0000001…, one a second, the newest an hour before the anchor,
# Stripe's status (every 50th canceled, every 50th from 25 past_due) and
# period, and --seed-subscriptions' drift mix (rows i % 1000 = 500, 251, 777),
# so each run must record exactly 3 findings per 1,000 rows. Extra settings
# pass through the environment (e.g. RECONCILER_BATCH_SIZE,
# RECONCILER_LIST_WINDOW_SLACK_SECONDS); BENCH_JOB_SUFFIX renames the jobs
# to run again on the same table (BENCH_REUSE=1 keeps the table);
# BENCH_BATCHES caps the batches of each run (default: the whole table).
# Writes .demo/bench-subs-<scenario>.{json,log} and prints one line per run.
set -euo pipefail
rows=${1:-1000000}
scenarios=${2:-db,paced}
cd "$(dirname "$0")/.."
. scripts/lib.sh
mkdir -p .demo
target_dir=${CARGO_TARGET_DIR:-target}
say "building stripe-reconciler and the stand-in (release)"
cargo build --quiet --release --bin stripe-reconciler --example stripe_standin
ensure_postgres
admin=$(default_admin_url)
DB=stripe_reconciler_bench_subs
export DATABASE_URL; DATABASE_URL=$(url_with_db "$admin" "$DB")
anchor_file=.demo/bench-subs-anchor
if [ "${BENCH_REUSE:-0}" != 1 ] || [ ! -s "$anchor_file" ]; then
    anchor=$(date +%s)
    echo "$anchor" >"$anchor_file"
    psql "$admin" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null
    psql "$admin" -qc "CREATE DATABASE $DB" >/dev/null
    create_demo_payments "$DATABASE_URL"
    s=$(date +%s)
    # Row i: the stand-in's generated subscription i (generated_status,
    # created anchor - (N - i) - 3600, period end anchor + 30 days, or a day
    # ago with ended_at for the canceled) and seeded_row's drift.
    psql "$DATABASE_URL" -q -v ON_ERROR_STOP=1 -v n="$rows" -v anchor="$anchor" <<'SQL'
CREATE TABLE subscriptions (
    id bigserial PRIMARY KEY, stripe_subscription_id text, status text NOT NULL,
    stripe_price text, current_period_end timestamptz, ends_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
INSERT INTO subscriptions (stripe_subscription_id, status, stripe_price, ends_at,
                           current_period_end, created_at, updated_at)
SELECT 'sub_standin' || lpad(i::text, 7, '0'),
       CASE i % 1000 WHEN 500 THEN 'active' WHEN 251 THEN 'canceled' ELSE stripe END,
       CASE i % 1000 WHEN 777 THEN 'price_basic' ELSE 'price_pro' END,
       CASE WHEN stripe = 'canceled' AND i % 1000 NOT IN (500, 251)
            THEN to_timestamp(:anchor - 86400) END,
       to_timestamp(CASE stripe WHEN 'canceled' THEN :anchor - 86400 ELSE :anchor + 30 * 86400 END),
       to_timestamp(:anchor - (:n - i) - 3600),
       to_timestamp(:anchor - 7200)
  FROM generate_series(1, :n) AS i,
       LATERAL (SELECT CASE i % 50 WHEN 0 THEN 'canceled' WHEN 25 THEN 'past_due' ELSE 'active' END) AS g(stripe);
SQL
    say "table of $rows subscriptions in $(( $(date +%s) - s )) s"
fi
anchor=$(cat "$anchor_file")
port=$(free_port)
export STRIPE_API_KEY=sk_test_standin STRIPE_API_BASE="http://127.0.0.1:$port" RECONCILER_LOG_FORMAT=json
export RECONCILER_SUBSCRIPTIONS_TABLE=subscriptions RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN=current_period_end
export RECONCILER_SUBSCRIPTION_ENDS_AT_COLUMN=ends_at RECONCILER_SUBSCRIPTION_PRICE_COLUMN=stripe_price
export RECONCILER_READ_MODE=list RECONCILER_GRACE_SECONDS=0
s=$(date +%s)
"$target_dir/release/stripe-reconciler" migrate >.demo/bench-subs-migrate.log 2>&1 || { tail -n 20 .demo/bench-subs-migrate.log >&2; die "migrate failed"; }
psql "$DATABASE_URL" -qc "VACUUM ANALYZE subscriptions"
say "migrate and VACUUM ANALYZE in $(( $(date +%s) - s )) s"
psql "$DATABASE_URL" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" 2>/dev/null || true
batch=${RECONCILER_BATCH_SIZE:-1900}
export RECONCILER_BATCHES_PER_RUN=${BENCH_BATCHES:-$(( rows / batch + 2 ))}
standin=
trap '[ -z "$standin" ] || kill "$standin" 2>/dev/null || true' EXIT
for scenario in ${scenarios//,/ }; do
    case $scenario in
        db) latency=0 rps=2000 ;;
        paced) latency=200 rps=25 ;;
        *) die "unknown scenario $scenario (db, paced)" ;;
    esac
    "$target_dir/release/examples/stripe_standin" --listen "127.0.0.1:$port" \
        --subscriptions "$rows" --anchor "$anchor" --latency-ms "$latency" \
        >/dev/null 2>".demo/bench-subs-standin-$scenario.log" &
    standin=$!
    wait_for_port "$port" 600
    psql "$DATABASE_URL" -qc "SELECT pg_stat_statements_reset()" >/dev/null 2>&1 || true
    say "$scenario: $rows rows, latency ${latency} ms, $rps requests/s, batches of $batch, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    RECONCILER_JOB="bench-$scenario${BENCH_JOB_SUFFIX:-}" RECONCILER_RATE_LIMIT_RPS=$rps \
        "$target_dir/release/stripe-reconciler" run --object subscriptions \
        >".demo/bench-subs-$scenario.json" 2>".demo/bench-subs-$scenario.log" || true
    [ -s ".demo/bench-subs-$scenario.json" ] || { tail -n 20 ".demo/bench-subs-$scenario.log" >&2; die "$scenario printed no summary"; }
    jq -c --arg scenario "$scenario" --argjson latency "$latency" --argjson rps "$rps" '{scenario: $scenario, latency_ms: $latency, rps: $rps, outcome, rows: .rows_scanned, batches, seconds: .duration_seconds,
        rows_per_second: ((.rows_scanned / .duration_seconds) | floor), requests: .stripe_requests,
        requests_per_row: (((.stripe_requests.list + .stripe_requests.retrieve) / .rows_scanned * 100000 | round) / 100000),
        list_per_row: ((.stripe_requests.list / .rows_scanned * 100000 | round) / 100000),
        list_fallbacks, findings_created, verdicts}' ".demo/bench-subs-$scenario.json"
    psql "$DATABASE_URL" -Atc "SELECT round(total_exec_time)::text || ' ms ' || calls || ' calls: ' || left(regexp_replace(query, '\s+', ' ', 'g'), 110)
                                FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 6" >".demo/bench-subs-$scenario.pgss" 2>/dev/null || true
    kill "$standin"; wait "$standin" 2>/dev/null || true; standin=
done
echo "expected findings: $(( rows / 1000 * 3 )) (rows i % 1000 = 500, 251, 777)"
