#!/usr/bin/env bash
# What the events feed's own statements cost per slice (BENCHMARKS.md, "Issue
# 40 — events feed"): a slice of 100 events asks which were already handled
# (reconciliation_events_seen) and which PaymentIntents are already held
# (reconciliation_events_retry), remembers the new ones and forgets those no
# overlap reaches. Measured on a busy feed's remembered hour (100 events a
# second for 3,660 s: 366,000 rows) beside 1,500 held PaymentIntents, 200
# slices in a row, three times; prints milliseconds per slice.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cargo build --quiet --bin stripe-reconciler
admin=$(default_admin_url)
DB=stripe_reconciler_bench_events_seen
psql "$admin" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null
psql "$admin" -qc "CREATE DATABASE $DB" >/dev/null
export DATABASE_URL; DATABASE_URL=$(url_with_db "$admin" "$DB")
create_demo_payments "$DATABASE_URL"
target/debug/stripe-reconciler migrate >/dev/null 2>&1
psql "$DATABASE_URL" -q <<'SQL'
INSERT INTO reconciliation_events_seen (job, event_id, event_created)
SELECT 'busy-events', 'evt_busy' || i, now() - interval '3660 seconds' + make_interval(secs => i / 100.0)
  FROM generate_series(1, 366000) i;
INSERT INTO reconciliation_events_retry (job, stripe_payment_intent_id, event_id, event_type, event_created, reason)
SELECT 'busy-events', 'pi_busyheld' || i, 'evt_h' || i, 'payment_intent.succeeded', now(), 'stripe_unanswered'
  FROM generate_series(1, 1500) i;
VACUUM ANALYZE reconciliation_events_seen;
VACUUM ANALYZE reconciliation_events_retry;
SQL
for round in 1 2 3; do
    # Each slice: 50 events new, 50 re-read in the overlap (already seen).
    psql "$DATABASE_URL" -q <<SQL 2>&1 | sed -n 's/.*NOTICE: *//p'
DO \$\$
DECLARE t0 timestamptz; n int := 200; k int; ids text[]; pis text[]; c timestamptz[]; x int; cutoff timestamptz;
BEGIN
  t0 := clock_timestamp();
  FOR k IN 1..n LOOP
    ids := ARRAY(SELECT 'evt_new$round' || '_' || k || '_' || j FROM generate_series(1, 50) j)
        || ARRAY(SELECT 'evt_busy' || (366000 - k * 100 + j) FROM generate_series(1, 50) j);
    pis := ARRAY(SELECT 'pi_busy' || (k * 100 + j) FROM generate_series(1, 100) j);
    c := ARRAY(SELECT clock_timestamp() FROM generate_series(1, 100) j);
    SELECT count(*) INTO x FROM reconciliation_events_seen
     WHERE job = 'busy-events' AND event_id = ANY(ids);
    SELECT count(*) INTO x FROM reconciliation_events_retry
     WHERE job = 'busy-events' AND stripe_payment_intent_id = ANY(pis);
    INSERT INTO reconciliation_events_seen (job, event_id, event_created)
      SELECT 'busy-events', v.id, v.created FROM unnest(ids, c) AS v(id, created)
      ON CONFLICT (job, event_id) DO NOTHING;
    -- A value, as the job binds it (a volatile expression would scan the table).
    cutoff := clock_timestamp() - make_interval(secs => 3660);
    DELETE FROM reconciliation_events_seen
     WHERE job = 'busy-events' AND event_created < cutoff;
  END LOOP;
  RAISE NOTICE 'round $round: % ms per slice of 100 events (% events/s of these statements alone)',
    round((extract(epoch FROM clock_timestamp() - t0) * 1000 / n)::numeric, 2),
    round(100 * n / extract(epoch FROM clock_timestamp() - t0));
END \$\$;
SQL
done
echo "remembered rows after: $(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM reconciliation_events_seen")"
