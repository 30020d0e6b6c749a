#!/usr/bin/env bash
# The events feed benchmark (BENCHMARKS.md, "Events feed"): 10,000 events in
# the window over a 1M-row table, against the local stand-in; a cold run (rows
# never confirmed since their events) and a warm one (the same window again).
#
# `bash scripts/bench-events.sh drain [EVENTS] [RPS]` instead drains a burst
# (default 20,000 events at 10 requests/s) the way the chart's events CronJob
# would: runs with RECONCILER_RUN_DEADLINE_SECONDS=180 and a SIGTERM at 240 s
# (activeDeadlineSeconds), one after another, until a run ends with the
# window covered; it prints each run's pages, slices, retrieves, wall time and
# lag, and the totals.
set -euo pipefail
mode=${1:-cold-warm}
events=${2:-10000}
rps=${3:-2000}
if [ "$mode" = drain ]; then events=${2:-20000}; rps=${3:-10}; fi
cd "$(dirname "$0")/.."
mkdir -p .demo
cargo build --quiet --bin stripe-reconciler --example stripe_standin
. scripts/lib.sh
admin=$(default_admin_url)
DB=stripe_reconciler_bench_events
psql "$admin" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null
psql "$admin" -qc "CREATE DATABASE $DB" >/dev/null
export DATABASE_URL; DATABASE_URL=$(url_with_db "$admin" "$DB")
psql "$DATABASE_URL" -q <<'SQL'
CREATE TABLE payments (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, order_id text NOT NULL,
    stripe_payment_intent_id text NOT NULL, status text NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
    version bigint NOT NULL DEFAULT 0, created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
SQL
port=$(free_port)
s=$(date +%s)
target/debug/examples/stripe_standin --listen "127.0.0.1:$port" --seed 1000000 --events "$events" --api-key sk_test_standin >.demo/bench-events-expected.json 2>.demo/bench-events-standin.log &
standin=$!
trap 'kill $standin 2>/dev/null || true' EXIT
wait_for_port "$port" 600
echo "seeded in $(( $(date +%s) - s )) s"
target/debug/stripe-reconciler migrate >/dev/null 2>&1
psql "$DATABASE_URL" -qc "VACUUM ANALYZE payments"
export STRIPE_API_KEY=sk_test_standin STRIPE_API_BASE="http://127.0.0.1:$port" RECONCILER_LOG_FORMAT=json
export RECONCILER_RATE_LIMIT_RPS=$rps RECONCILER_MAX_IN_FLIGHT=32 RECONCILER_GRACE_SECONDS=0
echo "rows: $(psql "$DATABASE_URL" -Atc 'SELECT count(*) FROM payments')"
if [ "$mode" = drain ]; then
    export RECONCILER_RUN_DEADLINE_SECONDS=180
    echo "== drain: $events events at $rps requests/s, deadline 180 s, SIGTERM at 240 s"
    rm -f .demo/bench-drain-*; s=$(date +%s); runs=0
    while :; do
        runs=$((runs + 1))
        timeout --signal=TERM 240 target/debug/stripe-reconciler events \
            >".demo/bench-drain-$runs.json" 2>".demo/bench-drain-$runs.log" || true
        # A run that printed no summary (a crash, a full disk) is a failed
        # benchmark, never "drained": jq reads an empty file as no input.
        [ -s ".demo/bench-drain-$runs.json" ] || { tail -n 20 ".demo/bench-drain-$runs.log" >&2; die "run $runs printed no summary"; }
        jq -c --argjson run "$runs" '{run: $run, outcome, pages, slices, events_read, payment_intents_retrieved, retries_read, payment_intents_held, retries_expired, findings_created, truncated, deadline_reached, covered_until, duration_seconds}' ".demo/bench-drain-$runs.json"
        if jq -e '.outcome == "completed" and (.truncated | not) and (.deadline_reached | not)' ".demo/bench-drain-$runs.json" >/dev/null; then break; fi
        [ "$runs" -lt 100 ] || { echo "not drained after 100 runs" >&2; exit 1; }
    done
    echo "drained in $runs runs, $(( $(date +%s) - s )) s of run time (the CronJob adds its schedule's gaps between runs)"
    jq -s '{pages: (map(.pages) | add), slices: (map(.slices) | add), retrieves: (map(.payment_intents_retrieved) | add), findings: (map(.findings_created) | add), seconds: (map(.duration_seconds) | add)}' .demo/bench-drain-*.json
    exit 0
fi
echo "== cold: rows never confirmed since the events"
/usr/bin/time -f "wall %e s, max rss %M KiB" target/debug/stripe-reconciler events 2>.demo/bench-events-cold.log | tee .demo/bench-events-cold.json
tail -1 .demo/bench-events-cold.log
echo "== warm: same window again, every row confirmed after its event"
psql "$DATABASE_URL" -qc "UPDATE reconciliation_events_position SET covered_until = NULL"
/usr/bin/time -f "wall %e s, max rss %M KiB" target/debug/stripe-reconciler events 2>.demo/bench-events-warm.log | tee .demo/bench-events-warm.json
tail -1 .demo/bench-events-warm.log
echo "== DB: the lookup of 10,000 PaymentIntent ids"
psql "$DATABASE_URL" -Atc "EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON) SELECT p.id FROM payments p WHERE p.stripe_payment_intent_id = ANY(ARRAY(SELECT 'pi_' || i FROM generate_series(1, 10000) i)::text[])" | tail -3
