#!/usr/bin/env bash
# The main job end to end on a local default: a local PostgreSQL, a fresh
# database, the migrations, 10,000 payments with a known mix of drift in the
# database and in a local Stripe stand-in, then the real binary. Prints the
# run summary and the findings per kind, and checks them against the drift
# that was injected.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ROWS=${DEMO_ROWS:-10000}
DB=${DEMO_DATABASE:-stripe_reconciler_demo}
# DEMO_KEY=uuid: the same demo on a table keyed by random uuids (issue 31,
# docs/keys.md), with an index on created_at so each cycle walks it in
# (created_at, id) order.
KEY=${DEMO_KEY:-bigint}
case "$KEY" in
  bigint) ID_COLUMN="bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY"; KEY_INDEX="" ;;
  uuid) ID_COLUMN="uuid PRIMARY KEY DEFAULT gen_random_uuid()"
        KEY_INDEX="CREATE INDEX payments_created_at ON payments (created_at);" ;;
  *) die "DEMO_KEY must be bigint or uuid" ;;
esac
command -v cargo >/dev/null || die "cargo is not installed (https://rustup.rs)"
command -v python3 >/dev/null || die "python3 is required by the demo"
ensure_postgres

demo_database "$DB"
bin=target/debug/stripe-reconciler
export RECONCILER_LOG_FORMAT=pretty

# The application's own payments table, as many real ones are: amount and
# currency columns, no UNIQUE constraint on the PaymentIntent id, and (a
# Connect platform) the connected account of direct charges. Checkout: a row
# is created with its session id (cs_...) and gets its PaymentIntent id from
# the checkout.session.completed webhook (NULL until then).
CONNECTED=acct_1DemoConnected
say "an application's payments table keyed by $KEY (amount_cents, currency, stripe_account, stripe_checkout_session_id, no UNIQUE on stripe_payment_intent_id)"
create_demo_payments "$DATABASE_URL" "$ID_COLUMN" "$KEY_INDEX"

mkdir -p .demo
port=$(free_port)
say "seeding $ROWS payments (every tenth on connected account $CONNECTED) and 5 Checkout Session rows, and starting the Stripe stand-in on 127.0.0.1:$port"
target/debug/examples/stripe_standin --listen "127.0.0.1:$port" --seed "$ROWS" \
  --connect-account "$CONNECTED" --api-key sk_test_standin >.demo/expected.json 2>.demo/standin.log &
standin=$!
trap 'kill $standin 2>/dev/null || true' EXIT
wait_for_port "$port" 60 || { cat .demo/standin.log >&2; die "the stand-in did not start"; }

say "stripe-reconciler migrate (reports the duplicate PaymentIntent ids it finds)"
"$bin" migrate

# A local Pushgateway, when Debian's prometheus-pushgateway is installed (or
# installable: the demo runs as root), receives the run's figures. Its own,
# on a free port, persistence off: it shows this demo's figures only.
if command -v prometheus-pushgateway >/dev/null || [ "$(id -u)" = 0 ]; then
  start_pushgateway .demo/pushgateway.log
  trap 'kill $standin $PUSHGATEWAY_PID 2>/dev/null || true' EXIT
  export PUSHGATEWAY_URL
  say "Pushgateway on $PUSHGATEWAY_URL"
else
  say "prometheus-pushgateway is not installed: metrics are not pushed (apt-get install prometheus-pushgateway)"
fi

# The stand-in is local, so the demo lifts Stripe's rate limit; batches of
# 1,000 and enough of them to walk the whole table and then wrap.
export STRIPE_API_KEY=sk_test_standin STRIPE_API_BASE="http://127.0.0.1:$port"
export RECONCILER_BATCH_SIZE=1000 RECONCILER_BATCHES_PER_RUN=$((ROWS / 1000 + 1))
export RECONCILER_RATE_LIMIT_RPS=2000 RECONCILER_MAX_IN_FLIGHT=32
# Compare amounts and currencies; call a checkout abandoned after 30 days.
export RECONCILER_AMOUNT_COLUMN=amount_cents RECONCILER_CURRENCY_COLUMN=currency
export RECONCILER_ABANDONED_AFTER_SECONDS=2592000
# Connect: the stand-in serves the connected account's PaymentIntents only to
# reads with its Stripe-Account header (404 without, like Stripe).
export RECONCILER_ACCOUNT_COLUMN=stripe_account
# Checkout Sessions (docs/checkout-sessions.md): a row without a PaymentIntent
# id is judged by the session in this column.
export RECONCILER_CHECKOUT_SESSION_COLUMN=stripe_checkout_session_id
# Notifications (docs/review.md): a local receiver stands in for Slack's
# incoming webhook; each run posts the new money findings to it once.
notify_port=$(free_port)
: >.demo/notifications.jsonl
python3 scripts/notify-receiver.py "$notify_port" .demo/notifications.jsonl 2>.demo/receiver.log &
receiver=$!
trap 'kill $standin $receiver ${PUSHGATEWAY_PID:-} 2>/dev/null || true' EXIT
wait_for_port "$notify_port" 10 || die "the notification receiver did not start"
export RECONCILER_NOTIFY_URL="http://127.0.0.1:$notify_port/services/demo-hook" RECONCILER_NOTIFY_FORMAT=slack
say "notifications of new money findings go to a local receiver on 127.0.0.1:$notify_port"
say "stripe-reconciler run"
start=$(date +%s)
"$bin" run 2>.demo/run.log || { tail -n 20 .demo/run.log >&2; die "the run failed"; }
say "run took $(( $(date +%s) - start )) s (batch log lines: .demo/run.log)"

say "the notification that arrived at the receiver (Slack format, first lines)"
[ -s .demo/notifications.jsonl ] || die "no notification arrived at the receiver"
python3 -c 'import json, sys
msg = json.loads(open(sys.argv[1]).readline())["text"].splitlines()
print("\n".join(msg[:6]))
print("  ... (%d lines)" % len(msg))' .demo/notifications.jsonl
say "findings per kind (reconciliation_findings, open)"
psql "$DATABASE_URL" -c "SELECT kind, count(*) AS findings FROM reconciliation_findings
                          WHERE resolved_at IS NULL GROUP BY kind ORDER BY kind"
psql "$DATABASE_URL" -c "SELECT event_type AS repair_command, count(*) AS commands FROM outbox
                          WHERE processed_at IS NULL GROUP BY 1 ORDER BY 1"

actual=$(psql "$DATABASE_URL" -Atc "SELECT kind || ' ' || count(*) FROM reconciliation_findings
                                    WHERE resolved_at IS NULL GROUP BY kind ORDER BY kind")
expected=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))["expected_findings"]
print("\n".join(f"{k} {v}" for k, v in sorted(d.items())))' .demo/expected.json)
if [ "$actual" = "$expected" ]; then
  say "findings match the injected drift exactly"
else
  printf 'expected:\n%s\nactual:\n%s\n' "$expected" "$actual" >&2
  die "findings do not match the injected drift"
fi

say "Checkout Session rows (no PaymentIntent id yet): a missed checkout.session.completed, on the platform and on $CONNECTED, an async (SEPA) session complete but unpaid, an expired and an open session"
session_rows="SELECT p.order_id, p.stripe_checkout_session_id AS checkout_session,
                     coalesce(p.stripe_payment_intent_id, '-') AS payment_intent, p.status AS local,
                     coalesce(s.observed_external_status, '-') AS stripe,
                     coalesce((SELECT string_agg(f.kind, ',') FROM reconciliation_findings f
                                WHERE f.payment_id = p.id AND f.resolved_at IS NULL), '-') AS finding
                FROM payments p LEFT JOIN reconciliation_payment_state s ON s.payment_id = p.id
               WHERE p.stripe_checkout_session_id IS NOT NULL ORDER BY p.created_at"
psql "$DATABASE_URL" -c "$session_rows"
sessions=$(psql "$DATABASE_URL" -Atc "SELECT string_agg(order_id || ' ' || local || ' ' || finding, ',' ORDER BY order_id)
                                      FROM ($session_rows) r")
want="ord_cs_async_unpaid pending -,ord_cs_connected_missed pending missed_success,ord_cs_expired pending missed_cancel,ord_cs_missed_completed pending missed_success,ord_cs_open pending -"
[ "$sessions" = "$want" ] || die "Checkout Session rows: expected '$want', got '$sessions'"
connected_session=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM reconciliation_findings
                                               WHERE checkout_session_id = 'cs_test_DemoConnectedMissed'
                                                 AND stripe_account_id = '$CONNECTED' AND resolved_at IS NULL")
[ "$connected_session" = 1 ] || die "the connected account's missed checkout.session.completed was not recorded on $CONNECTED"
say "the scan caught both missed checkout.session.completed (missed_success) and the expired session (missed_cancel); the async session, complete but unpaid, and the open one are in flight: no finding, no repair to paid"

say "findings on connected account $CONNECTED (read with Stripe-Account: $CONNECTED)"
psql "$DATABASE_URL" -c "SELECT kind, count(*) AS findings FROM reconciliation_findings
                          WHERE resolved_at IS NULL AND stripe_account_id = '$CONNECTED' GROUP BY kind ORDER BY kind"
on_connected=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM reconciliation_findings
                                          WHERE stripe_account_id = '$CONNECTED' AND kind = 'missed_success'")
[ "$on_connected" -gt 0 ] || die "no drift was caught on the connected account"
listed=$("$bin" findings list --kind missed_success --limit 400 --dashboard test)
head -n 1 <<<"$listed"
grep -m1 "$CONNECTED" <<<"$listed" \
  || die "findings list shows no finding of the connected account"
grep -q "dashboard.stripe.com/$CONNECTED/test/payments/" <<<"$listed" \
  || die "findings list links no payment in the connected account's Dashboard"
say "$on_connected missed_success findings caught on the connected account, each linking its payment in the account's Dashboard"

say "findings a person must judge (one of each): money Stripe did not keep, and deadlines"
psql "$DATABASE_URL" -c "SELECT DISTINCT ON (f.kind) f.kind, p.order_id, p.stripe_payment_intent_id AS payment_intent, p.status AS local,
                                f.external_status AS stripe, f.details
                           FROM reconciliation_findings f JOIN payments p ON p.id = f.payment_id
                          WHERE f.resolved_at IS NULL AND f.kind IN ('refunded', 'disputed', 'amount_mismatch',
                                'currency_mismatch', 'duplicate_payment_intent', 'authorization_expiring',
                                'stuck_processing', 'abandoned')
                          ORDER BY f.kind, p.id"

say "stripe-reconciler repair (applies the outbox commands through the canonical writer)"
"$bin" repair 2>>.demo/run.log
touched=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM payments p
                                     JOIN reconciliation_findings f ON f.payment_id = p.id
                                    WHERE f.kind IN ('refunded', 'disputed', 'amount_mismatch', 'currency_mismatch',
                                                     'duplicate_payment_intent')
                                      AND (p.version <> 0 OR EXISTS (SELECT 1 FROM outbox o
                                            WHERE o.event_type = 'PaymentStatusChanged' AND o.aggregate_id = p.id::text))")
[ "$touched" = 0 ] || die "$touched payments with money findings were touched by repairs"
say "the repairs touched none of the refunded, disputed, duplicate or mis-amounted payments"
psql "$DATABASE_URL" -c "SELECT status, count(*) AS payments, sum(version) AS versions FROM payments
                          WHERE id IN (SELECT payment_id FROM reconciliation_findings WHERE resolution = 'repaired')
                          GROUP BY status ORDER BY status"

# The repairs just touched those rows; a grace of 0 s lets the second scan
# verify them now instead of after RECONCILER_GRACE_SECONDS.
say "Checkout Session rows after the repair: a completed session's row is paid and holds its PaymentIntent id; the async one is still pending"
psql "$DATABASE_URL" -c "$session_rows"
after=$(psql "$DATABASE_URL" -Atc "SELECT string_agg(order_id || ' ' || status || ' ' || coalesce(stripe_payment_intent_id, '-'), ',' ORDER BY order_id)
                                   FROM payments WHERE stripe_checkout_session_id IS NOT NULL")
want="ord_cs_async_unpaid pending -,ord_cs_connected_missed paid pi_DemoSessionConnected,ord_cs_expired failed -,ord_cs_missed_completed paid pi_DemoSessionMissed,ord_cs_open pending -"
[ "$after" = "$want" ] || die "Checkout Session rows after repair: expected '$want', got '$after'"

say "stripe-reconciler run (second scan)"
RECONCILER_GRACE_SECONDS=0 "$bin" run 2>>.demo/run.log || die "the second run failed"
verified=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM reconciliation_payment_state s
                                      JOIN reconciliation_findings f ON f.payment_id = s.payment_id AND f.resolution = 'repaired'
                                     WHERE s.last_reconciled_at > f.resolved_at
                                       AND s.observed_external_status IN ('succeeded', 'canceled', 'expired')")
repaired=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM reconciliation_findings WHERE resolution = 'repaired'")
still_open=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM reconciliation_findings WHERE resolved_at IS NULL
                                          AND kind IN ('missed_success', 'missed_cancel')")
[ "$repaired" -gt 0 ] && [ "$verified" = "$repaired" ] && [ "$still_open" = 0 ] \
  || die "after repair: $repaired repaired, $verified verified in sync by the second scan, $still_open repairable findings open"
say "the second scan verified all $repaired repaired payments in sync; no repairable finding is open"

say "stripe-reconciler status"
"$bin" status
if [ -n "${PUSHGATEWAY_URL:-}" ]; then
  say "what Prometheus would scrape from the Pushgateway ($PUSHGATEWAY_URL/metrics)"
  curl -fsS "$PUSHGATEWAY_URL/metrics" | grep '^stripe_reconciler_' | sed 's/,instance=""//; s/instance="",//'
fi

standin_guard .demo/standin.log

# The second job: the events feed catches a missed webhook within one run,
# whatever the table size, and money taken at Stripe with no payment row, on
# the platform and on a connected account (from the account's own feed).
say "stripe-reconciler events (scripts/demo-events.sh)"
env -u RECONCILER_AMOUNT_COLUMN -u RECONCILER_CURRENCY_COLUMN -u RECONCILER_ABANDONED_AFTER_SECONDS -u RECONCILER_ACCOUNT_COLUMN \
  -u RECONCILER_BATCH_SIZE -u RECONCILER_BATCHES_PER_RUN bash scripts/demo-events.sh

# The second reconciled object: the application's subscriptions table
# (docs/subscriptions.md): a missed customer.subscription.deleted found and
# repaired, a paid-but-blocked customer restored, and a subscription no row
# names caught by the events job.
say "subscriptions (scripts/demo-subscriptions.sh)"
bash scripts/demo-subscriptions.sh
