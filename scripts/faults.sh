#!/usr/bin/env bash
# The whole fault suite in one command: SIGTERM, killed database connections,
# Stripe down / wrong account / rejected key / wrong URL / garbage bodies, a
# second run at once, a dead or refusing Pushgateway, a transaction pooler
# (PgBouncer) in front of PostgreSQL, hostile PaymentIntent
# ids, out-of-range settings, secrets in output, least privilege. Every test
# runs on a real PostgreSQL; Stripe is wiremock; the Pushgateway is real.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_postgres
ensure_pushgateway
ensure_pgbouncer
export DATABASE_URL=${DATABASE_URL:-$(default_admin_url)}
# Modules of the one integration binary (tests/it/), and the tests of the
# "never stalls, never deadlocks, never lies" guards that live by subject.
cargo test --no-fail-fast --test it -- \
  faults:: faults_batch:: gateway:: gateway_batch:: locks:: least_privilege:: \
  ops:: ops_cli:: migrate:: pgbouncer:: stops:: events_binary:: writer:: \
  cursor::a_row_stripe_never_answers cursor::a_payment_committed_after \
  review::the_review_queue_follows money_charges::a_404_never_clears \
  repair::a_stuck_repair_command repair::a_pending_repair_waits \
  metrics::a_dead_or_refusing_pushgateway
cargo test --no-fail-fast --lib -- config:: stripe::
