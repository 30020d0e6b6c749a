#!/usr/bin/env bash
# The benchmark of issue 6 (BENCHMARKS.md): builds the release binary and
# examples/bench/ (one file per scenario), makes sure a local PostgreSQL answers, then runs the four
# scenarios against the real binary and an in-process Stripe stand-in. Each
# scenario creates its own database (stripe_reconciler_bench_*), dropped at the
# end. Prints a Markdown results table on stdout; progress goes to stderr.
#
#   scripts/bench.sh [--only 1,2,3,4,12,23,31] [--keep]
#
# Issue 31, list mode on bigint, random-uuid and text keys side by side
# (BENCHMARKS.md, "Issue 31"); BENCH_KEY / BENCH_KEY_INDEX choose the tables:
#   BENCH_K_ROWS=200000 BENCH_K_SLOW_ROWS=20000 scripts/bench.sh --only 31
#   BENCH_KEY=uuid BENCH_KEY_INDEX=none BENCH_K_ROWS=50000 BENCH_K_SLOW_ROWS=0 scripts/bench.sh --only 31
#
# Issue 40 (BENCHMARKS.md, "Issue 40"): scenario 2 in list mode beside the
# design note's algorithm (BENCH_S2_MODE=list; retrieve by default), and
# scenario 31 with the rows loaded after `migrate` (BENCH_K_LOAD=after):
#   BENCH_S2_ROWS=20000 BENCH_SKIP_2B=1 scripts/bench.sh --only 2
#   BENCH_S2_MODE=list BENCH_S2_ROWS=20000 BENCH_SKIP_2B=1 scripts/bench.sh --only 2
#   BENCH_KEY=bigint,uuid BENCH_KEY_INDEX=none BENCH_K_LOAD=after BENCH_K_ROWS=200000 BENCH_K_SLOW_ROWS=0 scripts/bench.sh --only 31
#
# Smaller sizes for a quick look: BENCH_S1_ROWS, BENCH_S2_ROWS, BENCH_S3_ROWS,
# BENCH_BASELINE_ROWS. The build goes to $CARGO_TARGET_DIR (default target/).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

command -v cargo >/dev/null || die "cargo is not installed (https://rustup.rs)"
command -v python3 >/dev/null || die "python3 is required (scripts/lib.sh)"
ensure_postgres
admin=$(default_admin_url)
target_dir=${CARGO_TARGET_DIR:-target}

say "building stripe-reconciler and the benchmark (release)"
cargo build --quiet --release --bin stripe-reconciler --example bench

say "machine: $(nproc) CPUs, $(free -m | awk '/^Mem:/ {print $2}') MiB memory, $(rustc --version), load average $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s)
status=0
"$target_dir/release/examples/bench" --bin "$target_dir/release/stripe-reconciler" \
  --admin-url "$admin" "$@" || status=$?
say "benchmark took $(( $(date +%s) - start )) s"
exit "$status"
