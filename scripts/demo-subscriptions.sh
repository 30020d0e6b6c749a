#!/usr/bin/env bash
# Subscriptions end to end (docs/subscriptions.md): the application's
# subscriptions table, seeded by the Stripe stand-in in step with its
# subscriptions but for a known mix of drift, then the real binary:
#   1. `run --object subscriptions` (list mode, status=all) finds every
#      injected drift, checked against what the stand-in says it injected;
#   2. a missed customer.subscription.deleted (access still open) is repaired
#      by `repair`: the row ends access as Stripe did;
#   3. a paid-but-blocked customer (a missed invoice.paid) is restored;
#   4. `events` catches, within one run, a cancellation whose webhook never
#      arrived and a paying subscription no row names
#      (subscription_missing_locally).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

SUBS=${DEMO_SUBSCRIPTIONS:-5000}
DB=${DEMO_SUBSCRIPTIONS_DATABASE:-stripe_reconciler_demo_subscriptions}
GRACE=3

command -v cargo >/dev/null || die "cargo is not installed (https://rustup.rs)"
ensure_postgres
# Only this script's settings: the main demo's payments columns do not apply.
for v in $(env | sed -n 's/^\(RECONCILER_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done

demo_database "$DB"
bin=target/debug/stripe-reconciler
export RECONCILER_LOG_FORMAT=pretty
create_demo_payments "$DATABASE_URL"

mkdir -p .demo
port=$(free_port)
say "seeding $SUBS subscriptions (table subscriptions) and starting the Stripe stand-in on 127.0.0.1:$port"
# `--seed 0`: no payments (this demo is about subscriptions), and Stripe's
# PaymentIntents sized to match, so the stand-in starts at once.
target/debug/examples/stripe_standin --listen "127.0.0.1:$port" --seed 0 --subscriptions "$SUBS" \
  --seed-subscriptions --api-key sk_test_standin >.demo/subscriptions-expected.json 2>.demo/subscriptions-standin.log &
standin=$!
trap 'kill $standin 2>/dev/null || true' EXIT
wait_for_port "$port" 60 || { cat .demo/subscriptions-standin.log >&2; die "the stand-in did not start"; }
# The stand-in prints its expectation once the table is seeded.
for _ in $(seq 1 600); do grep -q '"subscriptions"' .demo/subscriptions-expected.json && break; sleep 0.1; done

export STRIPE_API_KEY=sk_test_standin STRIPE_API_BASE="http://127.0.0.1:$port"
export RECONCILER_RATE_LIMIT_RPS=2000 RECONCILER_MAX_IN_FLIGHT=32 RECONCILER_GRACE_SECONDS=$GRACE
export RECONCILER_BATCH_SIZE=1000 RECONCILER_BATCHES_PER_RUN=100
export RECONCILER_SUBSCRIPTIONS_TABLE=subscriptions \
  RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN=current_period_end \
  RECONCILER_SUBSCRIPTION_ENDS_AT_COLUMN=ends_at \
  RECONCILER_SUBSCRIPTION_PRICE_COLUMN=stripe_price

say "stripe-reconciler migrate (checks the subscriptions table, adds its lookup index CONCURRENTLY)"
"$bin" migrate | grep -i subscri || true

say "stripe-reconciler run --object subscriptions"
"$bin" run --object subscriptions

found=$(psql "$DATABASE_URL" -Atc "SELECT coalesce(json_object_agg(kind, n), '{}') FROM (
  SELECT kind, count(*) AS n FROM reconciliation_findings WHERE resolved_at IS NULL GROUP BY kind) k")
python3 - "$found" <<'PY' || die "the subscriptions scan did not find exactly the injected drift"
import json, sys
lines = open(".demo/subscriptions-expected.json").read().splitlines()
expected = next(json.loads(l) for l in lines if '"subscriptions"' in l)["expected_findings"]
found = json.loads(sys.argv[1])
print("findings per kind:", json.dumps(found, sort_keys=True))
sys.exit(0 if found == expected else 1)
PY

row() { psql "$DATABASE_URL" -Atc "SELECT status || ', ends_at ' || coalesce(ends_at::text, 'NULL') FROM subscriptions WHERE stripe_subscription_id = '$1'"; }
cancel=$(psql "$DATABASE_URL" -Atc "SELECT stripe_subscription_id FROM reconciliation_findings WHERE kind = 'subscription_missed_cancel' ORDER BY id LIMIT 1")
blocked=$(psql "$DATABASE_URL" -Atc "SELECT stripe_subscription_id FROM reconciliation_findings WHERE kind = 'subscription_paid_but_blocked' ORDER BY id LIMIT 1")
say "a missed customer.subscription.deleted: $cancel is '$(row "$cancel")' here, canceled at Stripe"
say "a missed invoice.paid: $blocked is '$(row "$blocked")' here, active at Stripe"
say "stripe-reconciler repair (one compare-and-set per row, only the configured columns)"
"$bin" repair
say "after repair: $cancel is '$(row "$cancel")'; $blocked is '$(row "$blocked")'"
[ "$(row "$cancel" | cut -d, -f1)" = canceled ] || die "the missed cancel was not repaired"
[ "$(row "$blocked" | cut -d, -f1)" = active ] || die "the blocked customer was not restored"

# The events feed: a cancellation whose webhook never arrives, and a
# customer paying for a subscription no row names.
gone=sub_standin$(printf '%07d' 3)
post() { curl -fsS -X POST -H "Authorization: Bearer $STRIPE_API_KEY" "$STRIPE_API_BASE/standin/subscriptions/$1" >/dev/null; }
post "$gone/canceled"
post sub_demoNoRow/active
say "Stripe canceled $gone (no webhook) and bills sub_demoNoRow, which no row names; after the ${GRACE}s grace window:"
sleep $((GRACE + 1))
"$bin" events
events_found=$(psql "$DATABASE_URL" -Atc "SELECT string_agg(coalesce(stripe_subscription_id, '?') || ' ' || kind, '; ' ORDER BY id)
  FROM reconciliation_findings WHERE resolved_at IS NULL AND stripe_subscription_id IN ('$gone', 'sub_demoNoRow')")
say "found by one events run: $events_found"
case "$events_found" in
  *"$gone subscription_missed_cancel"*"sub_demoNoRow subscription_missing_locally"*) ;;
  *) die "the events feed did not find the missed cancel and the subscription no row names" ;;
esac
"$bin" findings list --open --kind subscription_missing_locally
standin_guard .demo/subscriptions-standin.log
say "subscriptions demo: OK"
