#!/usr/bin/env bash
# Runs every test: formatting, the house rules (import loops, function and
# file lengths), lints, unit and integration tests on a real
# PostgreSQL (each #[sqlx::test] gets a fresh database), doctests, and the
# chart, alert and Dockerfile checks (not the image build: that is
# scripts/image.sh), then the demo in a short form (DEMO_ROWS=2000: the same
# binary paths, the same checks of its totals, so a broken demo fails the
# tests). Starts what it needs (PostgreSQL; installs the
# Pushgateway and PgBouncer the tests start per test); never skips: a missing
# check script fails the run. The cargo test step runs under a timeout
# (RECONCILER_TEST_TIMEOUT seconds, default 1500) so a hung test fails CI
# instead of holding it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

command -v cargo >/dev/null || die "cargo is not installed (https://rustup.rs)"
command -v python3 >/dev/null || die "python3 is required by the test scripts"
command -v timeout >/dev/null || die "timeout (coreutils) is required to bound the test run"
command -v curl >/dev/null || die "curl is required by the demo the tests run (apt-get install curl)"
checks=(scripts/check-alerts.sh scripts/check-chart.sh scripts/check-dockerfile.sh)
for check in "${checks[@]}"; do
  [ -f "$check" ] || die "$check is missing: the chart and alert checks are part of the suite"
done
ensure_postgres
ensure_pushgateway
ensure_pgbouncer
export DATABASE_URL=${DATABASE_URL:-$(default_admin_url)}
limit=${RECONCILER_TEST_TIMEOUT:-1500}

say "cargo fmt --check"
cargo fmt --all -- --check
# House rules (docs/layout.md): no import loop, no function over 60 lines, no
# non-test file over 500 lines; clippy's argument limit is clippy.toml's.
say "python3 scripts/import-loops.py src"
loops=$(python3 scripts/import-loops.py src) || { printf '%s\n' "$loops"; die "import loops in src/ (docs/layout.md, House rules)"; }
printf '%s\n' "$loops" | tail -n 1
say "python3 scripts/long-functions.py src 60 500"
python3 scripts/long-functions.py src 60 500 || die "functions over 60 lines or files over 500 lines in src/ (docs/layout.md, House rules)"
say "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
# Built first, outside the timeout: the limit is for running the tests.
cargo test --workspace --all-targets --no-run --quiet
say "cargo test (PostgreSQL at ${DATABASE_URL%%@*}@..., at most ${limit}s)"
status=0
timeout --kill-after=30 "$limit" cargo test --workspace --all-targets --no-fail-fast || status=$?
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  die "cargo test did not finish within ${limit}s (RECONCILER_TEST_TIMEOUT): a test hangs; rerun with --nocapture to see which"
fi
[ "$status" -eq 0 ] || die "cargo test failed (exit $status)"
say "cargo test --doc"
doc_out=$(timeout --kill-after=30 300 cargo test --workspace --doc 2>&1) || { printf '%s\n' "$doc_out"; die "cargo test --doc failed or timed out"; }
printf '%s\n' "$doc_out" | tail -n 3
# A doctest run that compiled nothing proves nothing.
grep -Eq 'test result: ok\. [1-9][0-9]* passed' <<<"$doc_out" \
  || die "cargo test --doc ran no doctest (the canonical writer's webhook example must compile)"

for check in "${checks[@]}"; do
  say "$check"
  bash "$check"
done
# The demo (scripts/demo.sh, then scripts/demo-events.sh) on 2,000 rows: it
# checks its own totals (findings per kind against the injected drift,
# Checkout Session rows, Connect, repairs verified by a second scan, the
# events job) and exits non-zero when one differs.
say "DEMO_ROWS=2000 bash scripts/demo.sh (the demo, short)"
demo_log=$(mktemp)
if ! DEMO_ROWS=2000 bash scripts/demo.sh >"$demo_log" 2>&1; then
  tail -n 40 "$demo_log"
  die "the demo failed (full output: $demo_log)"
fi
grep -q 'findings match the injected drift exactly' "$demo_log" \
  || { tail -n 40 "$demo_log"; die "the demo did not check its findings against the injected drift"; }
tail -n 3 "$demo_log"
rm -f "$demo_log"
say "all tests passed"
