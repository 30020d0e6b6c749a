#!/usr/bin/env bash
# Runs every test: formatting, lints, unit and integration tests on a real
# PostgreSQL (each #[sqlx::test] gets a fresh database), and the chart and alert
# checks when their scripts exist. Starts what it needs (PostgreSQL; installs
# the Pushgateway and PgBouncer the tests start per test); never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

command -v cargo >/dev/null || die "cargo is not installed (https://rustup.rs)"
command -v python3 >/dev/null || die "python3 is required by the test scripts"
ensure_postgres
ensure_pushgateway
ensure_pgbouncer
export DATABASE_URL=${DATABASE_URL:-$(default_admin_url)}

say "cargo fmt --check"
cargo fmt --all -- --check
say "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets --quiet -- -D warnings
say "cargo test (PostgreSQL at ${DATABASE_URL%%@*}@...)"
cargo test --all-targets --no-fail-fast
cargo test --doc --quiet

for check in scripts/check-alerts.sh scripts/check-chart.sh; do
  if [ -f "$check" ]; then
    say "$check"
    bash "$check"
  fi
done
say "all tests passed"
