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
cargo test --no-fail-fast --test faults --test guards --test gateway --test least_privilege --test cli --test pgbouncer
cargo test --no-fail-fast --test metrics pushgateway
cargo test --no-fail-fast --lib -- config:: stripe::
