#!/usr/bin/env bash
# Mutation testing of the pure core (docs/testing.md, "Mutants"): installs
# cargo-mutants from crates.io if absent and runs it over the pure rules,
# src/reconcile/ (the package stripe-reconciler-rules), with that library's
# unit tests as the test command (`cargo test --lib`). Only that small
# package is rebuilt for each mutant. Not part of scripts/test.sh. Prints
# caught / missed / timeouts; the missed mutants are in mutants.out/missed.txt.
# Extra arguments go to cargo mutants (e.g. `-f src/reconcile/kind.rs`).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

command -v cargo >/dev/null || die "cargo is not installed (https://rustup.rs)"
if ! cargo mutants --version >/dev/null 2>&1; then
  say "cargo install --locked cargo-mutants"
  cargo install --locked cargo-mutants
fi
say "cargo mutants over src/reconcile/ (cargo test --lib)"
status=0
cargo mutants --package stripe-reconciler-rules --no-shuffle \
  --timeout-multiplier 3 "$@" -- --lib || status=$?
out=mutants.out
count() { local n=0; [ -f "$out/$1" ] && n=$(grep -c . "$out/$1" || true); echo "${n:-0}"; }
say "caught $(count caught.txt), missed $(count missed.txt), timeouts $(count timeout.txt), unviable $(count unviable.txt)"
# cargo mutants exits 2 when mutants were missed, 3 on timeouts.
case "$status" in
  0|2|3) exit "$status" ;;
  *) die "cargo mutants failed (exit $status)" ;;
esac
