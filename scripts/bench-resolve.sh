#!/usr/bin/env bash
# The review file benchmark (docs/review.md, "Speed"): N open findings
# (default 100,000) exported with `findings list --csv`, then resolved with
# `findings resolve --file`, `--dry-run` first; prints the wall time of each.
# Uses ADMIN_DATABASE_URL's server (a database of its own, dropped first);
# BIN=path runs another build of the binary (e.g. an earlier release).
set -euo pipefail
n=${1:-100000}
cd "$(dirname "$0")/.."
bin=${BIN:-target/debug/stripe-reconciler}
[ -n "${BIN:-}" ] || cargo build --quiet --bin stripe-reconciler
. scripts/lib.sh
admin=$(default_admin_url)
DB=stripe_reconciler_bench_resolve
psql "$admin" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null
psql "$admin" -qc "CREATE DATABASE $DB" >/dev/null
export DATABASE_URL; DATABASE_URL=$(url_with_db "$admin" "$DB")
psql "$DATABASE_URL" -q <<'SQL'
CREATE TABLE payments (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, order_id text NOT NULL,
    stripe_payment_intent_id text NOT NULL, status text NOT NULL,
    version bigint NOT NULL DEFAULT 0, created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
SQL
"$bin" migrate >/dev/null 2>&1
psql "$DATABASE_URL" -q -v n="$n" <<'SQL'
INSERT INTO payments (order_id, stripe_payment_intent_id, status)
SELECT 'order-' || g, 'pi_Bench' || g, 'paid' FROM generate_series(1, :n) g;
INSERT INTO reconciliation_findings (payment_id, kind, local_status)
SELECT id, 'missing_externally', 'paid' FROM payments;
VACUUM ANALYZE;
SQL
file=$(mktemp --suffix=.csv)
trap 'rm -f "$file"' EXIT
"$bin" findings list --open --csv --limit "$n" |
    python3 -c 'import csv, sys
r = csv.reader(sys.stdin); w = csv.writer(sys.stdout)
h = next(r); w.writerow(h); i = h.index("note")
for row in r: row[i] = "checked with the bank"; w.writerow(row)' >"$file"
echo "lines: $(wc -l <"$file")"
s=$(date +%s.%N)
"$bin" findings resolve --file "$file" --by bench --dry-run | tail -n 1
echo "dry run: $(python3 -c "import time; print(round(time.time() - $s, 2))") s"
s=$(date +%s.%N)
"$bin" findings resolve --file "$file" --by bench
echo "resolve: $(python3 -c "import time; print(round(time.time() - $s, 2))") s"
psql "$DATABASE_URL" -Atc "SELECT count(*) || ' resolved' FROM reconciliation_findings WHERE resolution = 'manual'"
