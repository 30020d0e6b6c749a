# Shared shell helpers for scripts/*.sh. Source it; do not run it.
# shellcheck shell=bash

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# The stand-in's guard (examples/stripe_standin.rs, UNASKED_LIST_FAILURE):
# fails the demo when the stand-in's stderr log $1 shows a list page it
# failed that the demo did not arrange (rows would have fallen back to
# retrieves unseen), as the tests' fake fails a test.
standin_guard() {
  if grep -q "stand-in guard: a list page failed that the demo did not arrange" "$1"; then
    grep "stand-in guard" "$1" >&2
    die "the Stripe stand-in answered list pages the demo did not make fail (see $1)"
  fi
}

# The admin connection used to create databases. Override with ADMIN_DATABASE_URL.
default_admin_url() {
  echo "${ADMIN_DATABASE_URL:-postgres://$(id -un)@127.0.0.1:5432/postgres}"
}

# Makes sure a PostgreSQL answers at the admin URL. On a machine without one,
# starts the installed cluster, or installs Debian's postgresql (needs root),
# and lets local TCP connections in without a password (a dev/CI machine only).
ensure_postgres() {
  local url; url=$(default_admin_url)
  command -v psql >/dev/null || install_postgres
  if psql "$url" -Atqc 'SELECT 1' >/dev/null 2>&1; then return 0; fi
  case "$url" in
    *@127.0.0.1:5432/*|*@localhost:5432/*) ;;
    *) die "cannot connect to ADMIN_DATABASE_URL; start that server or unset ADMIN_DATABASE_URL" ;;
  esac
  say "no PostgreSQL answers on 127.0.0.1:5432; starting a local one"
  [ -d /etc/postgresql ] && [ -n "$(ls /etc/postgresql 2>/dev/null)" ] || install_postgres
  local version; version=$(ls /etc/postgresql | sort -V | tail -n 1)
  if [ "$(id -u)" = 0 ] && ! grep -q 'stripe-reconciler' "/etc/postgresql/$version/main/pg_hba.conf"; then
    sed -i '1i host all all 127.0.0.1/32 trust # stripe-reconciler dev/CI' "/etc/postgresql/$version/main/pg_hba.conf"
  fi
  pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null \
    || pg_ctlcluster "$version" main start \
    || die "could not start PostgreSQL $version"
  for _ in $(seq 1 30); do
    pg_isready -q -h 127.0.0.1 -p 5432 && break
    sleep 1
  done
  pg_isready -q -h 127.0.0.1 -p 5432 || die "PostgreSQL did not come up on 127.0.0.1:5432"
  local role; role=$(id -un)
  if ! psql "$url" -Atqc 'SELECT 1' >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || die "PostgreSQL is up but role $role cannot connect; create it (createuser -s $role)"
    su postgres -c "psql -Atqc \"SELECT 1 FROM pg_roles WHERE rolname = '$role'\"" | grep -q 1 \
      || su postgres -c "createuser --superuser $role"
  fi
  psql "$url" -Atqc 'SELECT 1' >/dev/null || die "cannot connect to PostgreSQL at $url"
}

install_postgres() {
  [ "$(id -u)" = 0 ] || die "PostgreSQL is not installed; install it (apt-get install postgresql) or set ADMIN_DATABASE_URL"
  command -v apt-get >/dev/null || die "PostgreSQL is not installed and apt-get is not available"
  say "installing PostgreSQL from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql postgresql-client >/dev/null
}

# Prints the URL of database $2 on the server of URL $1.
url_with_db() {
  python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$1" "$2"
}

# Builds the binary and the Stripe stand-in, drops and recreates database $1
# on the local server, and exports DATABASE_URL for it (the demos' start).
demo_database() {
  say "building stripe-reconciler and the Stripe stand-in"
  cargo build --quiet --bin stripe-reconciler --example stripe_standin
  say "fresh database $1"
  local admin; admin=$(default_admin_url)
  psql "$admin" -qc "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null
  psql "$admin" -qc "CREATE DATABASE $1" >/dev/null
  DATABASE_URL=$(url_with_db "$admin" "$1")
  export DATABASE_URL
}

# Creates the demo application's payments table in database URL $1, keyed by
# the column definition $2 (default: a bigint identity), followed by the
# extra SQL $3 (e.g. an index): amount and currency columns, no UNIQUE
# constraint on the PaymentIntent id, the connected account of direct
# charges, and a Checkout Session column. Used by the demo and the image
# check, so both run against the same table.
create_demo_payments() {
  local url=$1 id_column=${2:-bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY} extra=${3:-}
  psql "$url" -q <<SQL
CREATE TABLE payments (
    id                       $id_column,
    order_id                 text        NOT NULL,
    stripe_payment_intent_id text,
    stripe_checkout_session_id text,
    status                   text        NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
    version                  bigint      NOT NULL DEFAULT 0,
    amount_cents             bigint,
    currency                 text,
    stripe_account           text,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now()
);
$extra
SQL
}

# A free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits up to $2 seconds for 127.0.0.1:$1 to accept connections.
wait_for_port() {
  local port=$1 seconds=${2:-30}
  for _ in $(seq 1 $((seconds * 10))); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# Installs Debian's prometheus-pushgateway (the real binary the metrics tests
# start, one per test, on a free port) without leaving a service running.
ensure_pushgateway() {
  command -v prometheus-pushgateway >/dev/null && return 0
  [ "$(id -u)" = 0 ] || die "prometheus-pushgateway is not installed; install it (apt-get install prometheus-pushgateway)"
  command -v apt-get >/dev/null || die "prometheus-pushgateway is not installed and apt-get is not available"
  say "installing prometheus-pushgateway from Debian's packages"
  local policy=/usr/sbin/policy-rc.d created=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"; created=1
  fi
  apt-cache policy prometheus-pushgateway 2>/dev/null | grep -q 'Candidate: [0-9]' || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus-pushgateway >/dev/null
  [ "$created" = 1 ] && rm -f "$policy"
  command -v prometheus-pushgateway >/dev/null || die "prometheus-pushgateway did not install"
}

# Starts a private Pushgateway on a free port, in the background, with
# persistence off: Debian's binary otherwise loads (and writes)
# /var/lib/prometheus/pushgateway.data, the groups every earlier demo or other
# tool on the machine pushed. Sets PUSHGATEWAY_PID and PUSHGATEWAY_URL; logs
# go to $1 (default /dev/null). The caller kills $PUSHGATEWAY_PID.
start_pushgateway() {
  local log=${1:-/dev/null} port
  ensure_pushgateway
  port=$(free_port)
  prometheus-pushgateway --web.listen-address="127.0.0.1:$port" --persistence.file= \
    >"$log" 2>&1 &
  PUSHGATEWAY_PID=$!
  PUSHGATEWAY_URL="http://127.0.0.1:$port"
  wait_for_port "$port" 30 || die "the Pushgateway did not start (log: $log)"
}

# Installs Debian's pgbouncer (the real pooler the tests in tests/it/pgbouncer.rs
# start, one private instance per test on a free port, in transaction pooling
# mode with a temporary ini and auth file) without leaving a service running.
# Exports PGBOUNCER_BIN for the tests.
ensure_pgbouncer() {
  local bin
  bin=$(command -v pgbouncer 2>/dev/null || true)
  [ -n "$bin" ] || { [ -x /usr/sbin/pgbouncer ] && bin=/usr/sbin/pgbouncer; }
  if [ -z "$bin" ]; then
    [ "$(id -u)" = 0 ] || die "pgbouncer is not installed; install it (apt-get install pgbouncer)"
    command -v apt-get >/dev/null || die "pgbouncer is not installed and apt-get is not available"
    say "installing pgbouncer from Debian's packages"
    local policy=/usr/sbin/policy-rc.d created=0
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"; created=1
    fi
    apt-cache policy pgbouncer 2>/dev/null | grep -q 'Candidate: [0-9]' || apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null
    [ "$created" = 1 ] && rm -f "$policy"
    # The package's own service (if its init script ran anyway): stop it by
    # its pid file, never by name, so nobody else's pgbouncer is touched.
    if [ -s /var/run/postgresql/pgbouncer.pid ]; then
      kill "$(cat /var/run/postgresql/pgbouncer.pid)" 2>/dev/null || true
    fi
    bin=$(command -v pgbouncer 2>/dev/null || echo /usr/sbin/pgbouncer)
    [ -x "$bin" ] || die "pgbouncer did not install"
  fi
  export PGBOUNCER_BIN=$bin
}
