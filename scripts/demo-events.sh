#!/usr/bin/env bash
# The events feed end to end: a table of 10,000 payments whose scan cursor is
# at row 1,000, then a webhook that never arrives for a payment at the end of
# the table, money taken at Stripe for which no payment row exists, and a
# refund and a dispute on two paid orders (they never change a
# PaymentIntent's status; Stripe sends charge.refunded and
# charge.dispute.created). A Connect platform: every tenth row lives on a
# connected account, and a webhook is missed there too (a pending row of the
# account) along with money on the account with no order; those events are
# on the account's own feed, read with its Stripe-Account header. Checkout:
# a row that holds its session id (cs_...) and no PaymentIntent yet, whose
# checkout.session.completed never arrives, and a SEPA session that
# completes unpaid (the application rightly waits: no finding).
# `stripe-reconciler events` finds all six seconds later, long before the
# cursor reaches the rows. Prints the time from each event to its finding.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ROWS=${DEMO_ROWS:-10000}
DB=${DEMO_DATABASE:-stripe_reconciler_demo_events}
GRACE=${DEMO_GRACE_SECONDS:-5}

command -v cargo >/dev/null || die "cargo is not installed (https://rustup.rs)"
ensure_postgres

demo_database "$DB"
bin=target/debug/stripe-reconciler
export RECONCILER_LOG_FORMAT=pretty
# The application's table as in scripts/demo.sh (the seed has shared ids),
# with the connected account of direct charges.
CONNECTED=acct_1DemoConnected
psql "$DATABASE_URL" -q <<'SQL'
CREATE TABLE payments (
    id                       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id                 text        NOT NULL,
    stripe_payment_intent_id text,
    stripe_checkout_session_id text,
    status                   text        NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
    version                  bigint      NOT NULL DEFAULT 0,
    stripe_account           text,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now()
);
SQL

mkdir -p .demo
port=$(free_port)
say "seeding $ROWS payments (every tenth on connected account $CONNECTED); Stripe stand-in on 127.0.0.1:$port"
target/debug/examples/stripe_standin --listen "127.0.0.1:$port" --seed "$ROWS" \
  --connect-account "$CONNECTED" --api-key sk_test_standin >.demo/events-expected.json 2>.demo/events-standin.log &
standin=$!
trap 'kill $standin 2>/dev/null || true' EXIT
wait_for_port "$port" 60 || { cat .demo/events-standin.log >&2; die "the stand-in did not start"; }
"$bin" migrate >/dev/null 2>&1

export STRIPE_API_KEY=sk_test_standin STRIPE_API_BASE="http://127.0.0.1:$port"
export RECONCILER_RATE_LIMIT_RPS=2000 RECONCILER_MAX_IN_FLIGHT=32
# A short grace window, so the demo need not wait 10 minutes: a row (or a
# PaymentIntent without a row) must be this many seconds quiet before a job
# judges it.
export RECONCILER_GRACE_SECONDS=$GRACE
# Connect: reads of a row on the account carry its Stripe-Account header, and
# the events job reads each active account's feed as well as the platform's.
export RECONCILER_ACCOUNT_COLUMN=stripe_account
# Checkout Sessions: a row without a PaymentIntent id is judged by the session
# in this column, and the feed's checkout.session.* events re-read it.
export RECONCILER_CHECKOUT_SESSION_COLUMN=stripe_checkout_session_id

say "stripe-reconciler run: one batch of 1,000 rows (the scan's cursor stops at row 1,000)"
RECONCILER_BATCH_SIZE=1000 RECONCILER_BATCHES_PER_RUN=1 "$bin" run >/dev/null 2>.demo/events-run.log
cursor=$(psql "$DATABASE_URL" -Atc "SELECT last_id FROM reconciliation_cursor WHERE job = 'payments-vs-stripe'")

say "a new order, pending, at the end of the table; its customer pays"
# -q: no command tag after the id (a `| head` here could cut psql off and
# fail the demo with SIGPIPE under pipefail).
row=$(psql "$DATABASE_URL" -qAtc "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
                                 VALUES ('ord_missed_webhook', 'pi_DemoMissedWebhook', 'pending', now() - interval '1 minute',
                                         now() - interval '1 minute') RETURNING id")
say "Stripe: pi_DemoMissedWebhook succeeded; the webhook never reaches the application (payments.id $row, cursor at $cursor)"
curl -fsS -X POST "$STRIPE_API_BASE/standin/payment_intents/pi_DemoMissedWebhook/succeeded" >.demo/events-missed.json
say "Stripe: pi_DemoNoOrder succeeded, and no payments row points at it (money with no order)"
curl -fsS -X POST "$STRIPE_API_BASE/standin/payment_intents/pi_DemoNoOrder/succeeded" >.demo/events-orphan.json

say "two paid orders at the end of the table; Stripe: one is refunded in full, the other disputed"
paid_rows=$(psql "$DATABASE_URL" -qAtc "INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at)
                                       VALUES ('ord_refunded', 'pi_DemoRefunded', 'paid', now() - interval '1 hour', now() - interval '1 hour'),
                                              ('ord_disputed', 'pi_DemoDisputed', 'paid', now() - interval '1 hour', now() - interval '1 hour')
                                       RETURNING id" | tr '\n' ' ')
read -r refunded_row disputed_row <<<"$paid_rows"
for pi in pi_DemoRefunded pi_DemoDisputed; do
  curl -fsS -X POST "$STRIPE_API_BASE/standin/payment_intents/$pi/succeeded" >/dev/null
done
curl -fsS -X POST "$STRIPE_API_BASE/standin/payment_intents/pi_DemoRefunded/refund" >.demo/events-refund.json
curl -fsS -X POST "$STRIPE_API_BASE/standin/payment_intents/pi_DemoDisputed/dispute" >.demo/events-dispute.json

say "a new order on connected account $CONNECTED, pending; its customer pays"
connected_row=$(psql "$DATABASE_URL" -qAtc "INSERT INTO payments (order_id, stripe_payment_intent_id, status, stripe_account,
                                                                  created_at, updated_at)
                                           VALUES ('ord_connected_missed', 'pi_DemoConnectedMissed', 'pending', '$CONNECTED',
                                                   now() - interval '1 minute', now() - interval '1 minute') RETURNING id")
say "Stripe ($CONNECTED): pi_DemoConnectedMissed succeeded; the webhook never arrives (payments.id $connected_row); the event is on the account's feed only"
curl -fsS -X POST -H "Stripe-Account: $CONNECTED" \
  "$STRIPE_API_BASE/standin/payment_intents/pi_DemoConnectedMissed/succeeded" >.demo/events-connected-missed.json
say "Stripe ($CONNECTED): pi_DemoConnectedNoOrder succeeded, and no payments row points at it"
curl -fsS -X POST -H "Stripe-Account: $CONNECTED" \
  "$STRIPE_API_BASE/standin/payment_intents/pi_DemoConnectedNoOrder/succeeded" >.demo/events-connected-orphan.json
# As at Stripe, the platform's feed does not list the account's events.
platform_feed=$(curl -fsS -H "Authorization: Bearer $STRIPE_API_KEY" "$STRIPE_API_BASE/v1/events?limit=100")
connected_feed=$(curl -fsS -H "Authorization: Bearer $STRIPE_API_KEY" -H "Stripe-Account: $CONNECTED" \
  "$STRIPE_API_BASE/v1/events?limit=100")
! grep -q pi_DemoConnected <<<"$platform_feed" || die "the platform's events feed lists the connected account's events"
grep -q pi_DemoConnectedMissed <<<"$connected_feed" || die "the connected account's events feed lacks its event"

say "a new order paid through Checkout: its row holds the session and no PaymentIntent yet"
session_rows=$(psql "$DATABASE_URL" -qAtc "INSERT INTO payments (order_id, stripe_payment_intent_id, stripe_checkout_session_id, status,
                                                                 created_at, updated_at)
                                          VALUES ('ord_session_missed', NULL, 'cs_test_DemoEventsCompleted', 'pending',
                                                  now() - interval '1 minute', now() - interval '1 minute'),
                                                 ('ord_session_async', NULL, 'cs_test_DemoEventsAsync', 'pending',
                                                  now() - interval '1 minute', now() - interval '1 minute')
                                          RETURNING id" | tr '\n' ' ')
read -r session_row async_row <<<"$session_rows"
curl -fsS -X POST "$STRIPE_API_BASE/standin/checkout/sessions/cs_test_DemoEventsCompleted/complete" >.demo/events-session.json
say "Stripe: cs_test_DemoEventsCompleted completes, paid (pi_DemoEventsCompleted); checkout.session.completed never reaches the application (payments.id $session_row)"
curl -fsS -X POST "$STRIPE_API_BASE/standin/checkout/sessions/cs_test_DemoEventsAsync/complete_unpaid" >/dev/null
say "Stripe: cs_test_DemoEventsAsync completes unpaid (SEPA debit, its PaymentIntent processing); the application waits (payments.id $async_row)"

sleep $((GRACE + 1))
say "stripe-reconciler events"
"$bin" events 2>.demo/events-events.log >.demo/events-summary.txt \
  || { cat .demo/events-summary.txt; tail -n 20 .demo/events-events.log >&2; die "the events run failed"; }
cat .demo/events-summary.txt
grep -q "connected accounts   1 (unreachable, skipped: 0)" .demo/events-summary.txt \
  || die "the events run did not read the connected account's feed"

created() { python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["created"])' "$1"; }
say "from the event at Stripe to its finding"
psql "$DATABASE_URL" -c "SELECT f.kind, coalesce(p.stripe_payment_intent_id, f.stripe_payment_intent_id) AS payment_intent,
                                f.payment_id, coalesce(f.stripe_account_id, 'platform') AS account,
                                to_timestamp(e.created) AS event_created, f.detected_at,
                                round(extract(epoch FROM f.detected_at - to_timestamp(e.created))::numeric, 1) AS seconds_to_finding
                           FROM reconciliation_findings f
                           LEFT JOIN payments p ON p.id = f.payment_id
                           JOIN (VALUES ('pi_DemoMissedWebhook', $(created .demo/events-missed.json)),
                                        ('pi_DemoNoOrder', $(created .demo/events-orphan.json)),
                                        ('pi_DemoRefunded', $(created .demo/events-refund.json)),
                                        ('pi_DemoDisputed', $(created .demo/events-dispute.json)),
                                        ('pi_DemoConnectedMissed', $(created .demo/events-connected-missed.json)),
                                        ('pi_DemoConnectedNoOrder', $(created .demo/events-connected-orphan.json)),
                                        ('pi_DemoEventsCompleted', $(created .demo/events-session.json)))
                                AS e(pi, created) ON e.pi = coalesce(p.stripe_payment_intent_id, f.stripe_payment_intent_id)
                          ORDER BY f.id"
kinds=$(psql "$DATABASE_URL" -Atc "SELECT string_agg(kind, ',' ORDER BY kind) FROM reconciliation_findings
                                   WHERE resolved_at IS NULL AND (payment_id = $row OR stripe_payment_intent_id = 'pi_DemoNoOrder')")
[ "$kinds" = "missed_success,missing_locally" ] || die "expected missed_success and missing_locally, got '$kinds'"
commands=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM outbox WHERE event_type = 'ApplyPaymentSucceeded'
                                        AND payload->>'payment_id' = '$row'")
[ "$commands" = 1 ] || die "expected one ApplyPaymentSucceeded command for payment $row, got $commands"
money=$(psql "$DATABASE_URL" -Atc "SELECT string_agg(kind, ',' ORDER BY payment_id) FROM reconciliation_findings
                                  WHERE resolved_at IS NULL AND payment_id IN ($refunded_row, $disputed_row)")
[ "$money" = "refunded,disputed" ] || die "expected refunded and disputed on payments $refunded_row and $disputed_row, got '$money'"
money_seconds=$(psql "$DATABASE_URL" -Atc "SELECT round(max(extract(epoch FROM f.detected_at) - e.created)::numeric, 1)
                                           FROM reconciliation_findings f
                                           JOIN (VALUES ($refunded_row::bigint, $(created .demo/events-refund.json)),
                                                        ($disputed_row::bigint, $(created .demo/events-dispute.json))) AS e(id, created)
                                             ON e.id = f.payment_id
                                          WHERE f.kind IN ('refunded', 'disputed')")
connected=$(psql "$DATABASE_URL" -Atc "SELECT string_agg(kind || ' ' || coalesce(stripe_account_id, 'platform'), ',' ORDER BY kind)
                                       FROM reconciliation_findings
                                      WHERE resolved_at IS NULL
                                        AND (payment_id = $connected_row OR stripe_payment_intent_id = 'pi_DemoConnectedNoOrder')")
[ "$connected" = "missed_success $CONNECTED,missing_locally $CONNECTED" ] \
  || die "expected missed_success and missing_locally on $CONNECTED, got '$connected'"
connected_commands=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM outbox WHERE event_type = 'ApplyPaymentSucceeded'
                                                  AND payload->>'payment_id' = '$connected_row'
                                                  AND payload->>'stripe_account_id' = '$CONNECTED'")
[ "$connected_commands" = 1 ] \
  || die "expected one ApplyPaymentSucceeded command naming $CONNECTED for payment $connected_row, got $connected_commands"
platform=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM reconciliation_findings WHERE resolved_at IS NULL
                                        AND stripe_account_id IS NULL
                                        AND (payment_id = $row OR stripe_payment_intent_id = 'pi_DemoNoOrder')")
[ "$platform" = 2 ] || die "expected the platform's two findings without an account, got $platform"
connected_seconds=$(psql "$DATABASE_URL" -Atc "SELECT round(max(extract(epoch FROM f.detected_at) - e.created)::numeric, 1)
                                               FROM reconciliation_findings f
                                               JOIN (VALUES ('pi_DemoConnectedMissed', $(created .demo/events-connected-missed.json)),
                                                            ('pi_DemoConnectedNoOrder', $(created .demo/events-connected-orphan.json)))
                                                    AS e(pi, created)
                                                 ON e.pi = coalesce((SELECT stripe_payment_intent_id FROM payments WHERE id = f.payment_id),
                                                                    f.stripe_payment_intent_id)
                                              WHERE f.stripe_account_id = '$CONNECTED' AND f.resolved_at IS NULL")
session=$(psql "$DATABASE_URL" -Atc "SELECT string_agg(kind || ' ' || checkout_session_id || ' ' || coalesce(stripe_payment_intent_id, '-'), ',')
                                     FROM reconciliation_findings WHERE resolved_at IS NULL AND payment_id = $session_row")
[ "$session" = "missed_success cs_test_DemoEventsCompleted pi_DemoEventsCompleted" ] \
  || die "expected missed_success for the missed checkout.session.completed (payments.id $session_row), got '$session'"
session_commands=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM outbox WHERE event_type = 'ApplyPaymentSucceeded'
                                                AND payload->>'payment_id' = '$session_row'")
[ "$session_commands" = 1 ] || die "expected one ApplyPaymentSucceeded command for payment $session_row, got $session_commands"
async_findings=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM reconciliation_findings WHERE payment_id = $async_row")
async_read=$(psql "$DATABASE_URL" -Atc "SELECT observed_external_status FROM reconciliation_payment_state WHERE payment_id = $async_row")
[ "$async_findings" = 0 ] && [ "$async_read" = processing ] \
  || die "the async unpaid session (payments.id $async_row): expected read as processing with no finding, got '$async_read' and $async_findings findings"
say "missed checkout.session.completed (payments.id $session_row) caught by one events run; the async unpaid session was read (PaymentIntent processing) and not booked"
say "connected account $CONNECTED: missed webhook (payments.id $connected_row) and money with no order caught from its own events feed ${connected_seconds}s after they happened at Stripe"
say "refund and dispute caught by one events run ${money_seconds}s after they happened at Stripe (the scan would reach these rows only after the whole table)"
cursor_now=$(psql "$DATABASE_URL" -Atc "SELECT last_id FROM reconciliation_cursor WHERE job = 'payments-vs-stripe'")
say "caught by events while the scan's cursor is at $cursor_now of $row rows: the scan would reach this row $(( (row - cursor_now) / 1000 + 1 )) batches from now"

say "stripe-reconciler repair (the missed success is applied; missing_locally waits for a person)"
"$bin" repair 2>>.demo/events-events.log
psql "$DATABASE_URL" -c "SELECT id, order_id, coalesce(stripe_account, 'platform') AS account, status, version
                                , coalesce(stripe_payment_intent_id, '-') AS payment_intent
                           FROM payments WHERE id IN ($row, $connected_row, $session_row, $async_row) ORDER BY id"
repaired_session=$(psql "$DATABASE_URL" -Atc "SELECT status || ' ' || coalesce(stripe_payment_intent_id, '-') FROM payments
                                              WHERE id IN ($session_row, $async_row) ORDER BY id" | tr '\n' ',')
[ "$repaired_session" = "paid pi_DemoEventsCompleted,pending -," ] \
  || die "after repair: expected the session's row paid with pi_DemoEventsCompleted and the async one pending, got '$repaired_session'"
"$bin" findings list --open --kind missing_locally
standin_guard .demo/events-standin.log
