#!/usr/bin/env bash
# Builds the container image from the repository's Dockerfile on a host with
# no image registry, then checks it: docs/deployment.md#building-the-image-without-a-registry.
#
#   bash scripts/image.sh            # build (when needed) and check
#   bash scripts/image.sh --build    # build only
#   bash scripts/image.sh --check    # check the image already built
#   bash scripts/image.sh --fresh    # forget every cached base, layer and crate first (a cold build)
#
# Needs root and Debian's package registry (it installs buildah, mmdebstrap
# and what the check needs with apt-get). The base images are made from
# Debian packages with mmdebstrap and kept in a private container store
# (IMAGE_STATE_DIR, default ~/.cache/stripe-reconciler-image, storage driver
# vfs, a registries.conf that names no registry); `buildah bud --isolation
# chroot` builds the Dockerfile with RUST_IMAGE and RUNTIME_IMAGE pointed at
# them. The check runs the image's entrypoint as its user with `buildah run
# --isolation chroot` and with `podman run` (runc, the chart's container
# settings) against a local PostgreSQL (ADMIN_DATABASE_URL, as
# scripts/lib.sh) and the Stripe stand-in, beside the same binary copied out
# of the image and run on the host, and compares them (host network).
# Not part of scripts/test.sh: a cold build takes about 25 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }

build=1 check=1 fresh=0
for arg in "$@"; do
  case "$arg" in
    --build) check=0 ;;
    --check) build=0 ;;
    --fresh) fresh=1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $arg" ;;
  esac
done

STATE=${IMAGE_STATE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/stripe-reconciler-image}
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
IMAGE=${IMAGE_NAME:-localhost/stripe-reconciler}:$VERSION
SUITE=bookworm
BUILDER_BASE=localhost/stripe-reconciler-builder-base:$SUITE
RUNTIME_BASE=localhost/stripe-reconciler-runtime-base:$SUITE
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# The builder's compiler: bookworm's rustc is 1.63, below Cargo.toml's
# rust-version; rustc-web/cargo-web (bookworm-security) are Debian's current
# Rust, packaged for bookworm.
BUILDER_PACKAGES=ca-certificates,rustc-web,cargo-web
# What gcr.io/distroless/cc-debian12 holds that the binary (glibc, libgcc_s)
# or an operator (CA bundle, time zones, /etc/services) needs. mmdebstrap also
# fetches their dependencies (debconf, mawk, openssl, libssl3); only these are
# unpacked into the root.
RUNTIME_PACKAGES=(base-files netbase tzdata ca-certificates libc6 libgcc-s1 gcc-12-base)
# The runtime's non-root user: distroless's `nonroot`, the Dockerfile's USER
# and the chart's podSecurityContext.runAsUser/runAsGroup.
NONROOT_UID=65532

[ -n "$VERSION" ] || die "no version in Cargo.toml"
[ "$(id -u)" = 0 ] || die "scripts/image.sh runs as root (it installs Debian packages, and buildah's chroot isolation without a user namespace needs root); see docs/deployment.md"
command -v apt-get >/dev/null || die "apt-get is not available: scripts/image.sh needs Debian's package registry"

# A command on PATH, or an existing absolute path.
have() { case "$1" in /*) [ -e "$1" ] ;; *) command -v "$1" >/dev/null ;; esac; }

# Installs the Debian packages named ("TEST:package", TEST a command or a
# path that the package provides) whose TEST fails.
ensure_packages() {
  local missing=() pair
  for pair in "$@"; do
    have "${pair%%:*}" || missing+=("${pair#*:}")
  done
  [ "${#missing[@]}" = 0 ] && return 0
  say "installing ${missing[*]} from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  for pair in "$@"; do
    have "${pair%%:*}" || die "${pair#*:} did not install ${pair%%:*}"
  done
}

# buildah with the private store and configuration (see setup_containers).
bb() { TMPDIR="$STATE/tmp" buildah "$@"; }

# A private configuration: the store (vfs: works on any file system, in a
# container too, needs no fuse-overlayfs), a registries.conf that names no
# registry (a short name fails at once instead of trying docker.io), and a
# signature policy that accepts local images. Nothing under /etc/containers
# is read for these or changed. TMPDIR keeps buildah's RUN --mount=type=cache
# directories (cargo's registry and target dir) under $STATE as well.
setup_containers() {
  mkdir -p "$STATE/tmp" "$STATE/storage" "$STATE/run"
  cat >"$STATE/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$STATE/storage"
runroot = "$STATE/run"
EOF
  cat >"$STATE/registries.conf" <<'EOF'
# No image registry is reachable here: nothing is searched, nothing pulled.
unqualified-search-registries = []
short-name-mode = "enforcing"
EOF
  printf '{"default": [{"type": "insecureAcceptAnything"}]}\n' >"$STATE/policy.json"
  export CONTAINERS_STORAGE_CONF="$STATE/storage.conf"
  export CONTAINERS_REGISTRIES_CONF="$STATE/registries.conf"
  POLICY=(--signature-policy "$STATE/policy.json")
  # Rootful buildah needs no /etc/subuid or /etc/subgid (those map a
  # rootless user's namespace); chroot isolation needs no OCI runtime.
}

image_exists() { bb images --quiet "$1" >/dev/null 2>&1 && [ -n "$(bb images --quiet "$1" 2>/dev/null)" ]; }

mirrors() {
  printf '%s\n' "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
    "deb $SECURITY_MIRROR $SUITE-security main"
}

# Imports root file system tarball $2 as image $1 (buildah config flags follow).
import_root() {
  local name=$1 root=$2 ctr; shift 2
  ctr=$(bb from "${POLICY[@]}" scratch)
  bb add "$ctr" "$root" / >/dev/null
  bb config "$@" "$ctr"
  bb commit --quiet --identity-label=false "${POLICY[@]}" --rm "$ctr" "$name" >/dev/null
}

# The host's local CA certificates (Debian's place for them,
# /usr/local/share/ca-certificates) are trusted by the builder too: where
# crates.io is reached through a TLS-intercepting proxy, cargo in the builder
# must trust what cargo on the host trusts. Build time only: the runtime
# image gets Debian's bundle alone. Run by mmdebstrap as a hook on root $1.
trust_local_cas() {
  local dir=/usr/local/share/ca-certificates
  if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
    mkdir -p "$1$dir" && cp -r "$dir"/. "$1$dir"/ && chroot "$1" update-ca-certificates >/dev/null
  fi
}

# The builder stage's base, in place of rust:1-slim-bookworm: Debian
# bookworm (minbase) with rustc-web, cargo-web (they bring gcc, libc6-dev and
# binutils for `strip` and `nm`) and ca-certificates (cargo fetches crates
# over TLS). CARGO_HOME is the official image's, so the Dockerfile's cache
# mounts (/usr/local/cargo/registry, /usr/local/cargo/git) hold the crates.
make_builder_base() {
  local tar="$STATE/tmp/builder-root.tar" mirror_args=()
  mapfile -t mirror_args < <(mirrors)
  say "making $BUILDER_BASE with mmdebstrap ($SUITE minbase + $BUILDER_PACKAGES)"
  mmdebstrap --quiet --variant=minbase --include="$BUILDER_PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook="$(declare -f trust_local_cas); trust_local_cas \"\$1\"" \
    "$SUITE" "$tar" "${mirror_args[@]}" </dev/null
  import_root "$BUILDER_BASE" "$tar" \
    --created-by "mmdebstrap --variant=minbase --include=$BUILDER_PACKAGES $SUITE (scripts/image.sh)" \
    --env CARGO_HOME=/usr/local/cargo \
    --env PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --workingdir / --cmd /bin/bash
  rm -f "$tar"
  local ctr; ctr=$(bb from --quiet --pull=never "${POLICY[@]}" "$BUILDER_BASE")
  bb run --isolation chroot "$ctr" -- sh -c 'echo "  builder: $(rustc --version), $(cargo --version)"'
  bb rm "$ctr" >/dev/null
}

# The runtime stage's base, in place of gcr.io/distroless/cc-debian12:nonroot,
# made the way distroless makes it: the packages' files unpacked (no
# maintainer script runs, so no shell, no dpkg, no apt in the image), the CA
# bundle that update-ca-certificates would write, passwd/group with root,
# nobody and nonroot (65532), /home/nonroot, /tmp, and one control file per
# package in /var/lib/dpkg/status.d/ (what image scanners read).
make_runtime_base() {
  local stage="$STATE/tmp/runtime-debs" root="$STATE/tmp/runtime-root" mirror_args=() pkg deb
  mapfile -t mirror_args < <(mirrors)
  say "making $RUNTIME_BASE from Debian packages (${RUNTIME_PACKAGES[*]})"
  rm -rf "$stage" "$root"
  local include; include=$(IFS=,; echo "${RUNTIME_PACKAGES[*]}")
  mmdebstrap --quiet --variant=extract --include="$include" --skip=cleanup/apt/cache \
    "$SUITE" "$stage" "${mirror_args[@]}" </dev/null
  mkdir -p "$root"/usr/{bin,sbin,lib,lib64} "$root/var/lib/dpkg/status.d"
  for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done
  for pkg in "${RUNTIME_PACKAGES[@]}"; do
    deb=$(find "$stage/var/cache/apt/archives" -maxdepth 1 -name "${pkg}_*.deb")
    [ "$(wc -l <<<"$deb")" = 1 ] && [ -f "$deb" ] || die "mmdebstrap did not fetch exactly one $pkg"
    dpkg-deb --fsys-tarfile "$deb" \
      | tar -x -C "$root" --keep-directory-symlink --no-same-owner \
          --exclude='./usr/share/doc/*/changelog*' --exclude='./usr/share/doc/*/NEWS*' \
          --exclude='./usr/share/doc/*/README*' --exclude='./usr/share/man' \
          --exclude='./usr/share/lintian' --exclude='./usr/share/locale'
    dpkg-deb --field "$deb" >"$root/var/lib/dpkg/status.d/$pkg"
  done
  # update-ca-certificates' bundle: every certificate ca-certificates
  # ships, in /etc/ca-certificates.conf's order.
  mkdir -p "$root/etc/ssl/certs"
  (cd "$root/usr/share/ca-certificates" && find . -name '*.crt' | LC_ALL=C sort \
     | while read -r crt; do sed -e '$a\' "$crt"; done) >"$root/etc/ssl/certs/ca-certificates.crt"
  [ "$(grep -c 'BEGIN CERTIFICATE' "$root/etc/ssl/certs/ca-certificates.crt")" -gt 100 ] \
    || die "the CA bundle has too few certificates"
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
    "nonroot:x:$NONROOT_UID:$NONROOT_UID:nonroot:/home/nonroot:/sbin/nologin" >"$root/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' "nonroot:x:$NONROOT_UID:" >"$root/etc/group"
  printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' 'networks: files' \
    'protocols: files' 'services: files' >"$root/etc/nsswitch.conf"
  install -d -m 0700 "$root/root"
  install -d -m 0700 -o "$NONROOT_UID" -g "$NONROOT_UID" "$root/home/nonroot"
  install -d -m 1777 "$root/tmp"
  # As a tarball: `buildah add` keeps the owners an archive records (a
  # directory would be copied as root's, /home/nonroot included).
  tar --numeric-owner -C "$root" -cf "$stage.tar" .
  import_root "$RUNTIME_BASE" "$stage.tar" \
    --created-by "mmdebstrap --variant=extract --include=$include $SUITE, unpacked (scripts/image.sh)" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --user "$NONROOT_UID:$NONROOT_UID" --workingdir /home/nonroot
  rm -rf "$stage" "$stage.tar" "$root"
}

build_image() {
  if [ "$fresh" = 1 ]; then
    say "--fresh: removing $STATE (bases, layers, cargo caches)"
    bb rm --all >/dev/null 2>&1 || true
    rm -rf "$STATE"
    setup_containers
  fi
  local t0 t1
  t0=$(date +%s)
  image_exists "$BUILDER_BASE" || make_builder_base
  image_exists "$RUNTIME_BASE" || make_runtime_base
  t1=$(date +%s)
  say "buildah bud --isolation chroot (RUST_IMAGE=$BUILDER_BASE, RUNTIME_IMAGE=$RUNTIME_BASE)"
  local revision created
  revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  # No --layers: buildah 1.28 reuses a cached LABEL step whose build
  # arguments changed (a new REVISION or CREATED would keep the old label).
  # A rebuild is cheap anyway: the Dockerfile's cache mounts keep cargo's
  # registry and target dir between builds, so cargo recompiles only what
  # changed. --identity-label=false: no io.buildah.version label, only the
  # Dockerfile's. --pull=never: the bases are local, nothing is fetched.
  bb bud --isolation chroot --pull=never --identity-label=false "${POLICY[@]}" \
    --build-arg RUST_IMAGE="$BUILDER_BASE" --build-arg RUNTIME_IMAGE="$RUNTIME_BASE" \
    --build-arg VERSION="$VERSION" --build-arg REVISION="$revision" \
    --build-arg SOURCE="${IMAGE_SOURCE:-unknown}" --build-arg CREATED="$created" \
    -f Dockerfile -t "$IMAGE" .
  local t2; t2=$(date +%s)
  say "built $IMAGE: bases $((t1 - t0)) s, buildah bud $((t2 - t1)) s"
  # The image this one replaced (now untagged) is dropped; the bases stay.
  bb rmi --prune >/dev/null 2>&1 || true
}

# ---------------------------------------------------------------------------
# The check: the image run as close to the chart as this host allows, on up
# to three sides that must agree:
#   host     the binary copied out of the image, run on the host (the reference)
#   buildah  `buildah run --isolation chroot`: the image's root, entrypoint,
#            user and environment, no capabilities (a non-root user), the
#            default seccomp filter; but no read-only root, no
#            no-new-privileges, no memory limit (chroot isolation sets none)
#   podman   `podman run` (runc) with the chart's container settings:
#            read-only root with a 16 MiB /tmp, every capability dropped,
#            no-new-privileges, the default seccomp profile, the 128 MiB
#            memory limit. Podman's default run is refused on hosts whose
#            open-files hard limit is below the 1048576 it asks for (setrlimit
#            EPERM, crun and runc alike); given rlimits within the host's,
#            runc runs it. crun also refuses a cgroup v1/v2 hybrid host.
#            Skipped, with the reason, where podman run is still refused.

CHECK_ROWS=${IMAGE_CHECK_ROWS:-2000}
CONNECTED=acct_1DemoConnected
# Summary fields that measure time, not what the job did: dropped before the
# sides are compared (each side has its own clock, stand-in and database;
# the plan's expected_cycle_seconds counts the seconds since the cycle began).
VOLATILE_FIELDS=duration_seconds,window_start,covered_until,expected_cycle_seconds
# The chart's container (helm/stripe-reconciler/values.yaml: securityContext,
# resources.limits.memory, the /tmp emptyDir of 16Mi), in podman's words.
PODMAN_CHART=(--read-only --read-only-tmpfs=false --tmpfs /tmp:rw,size=16m,mode=1777
  --cap-drop ALL --security-opt no-new-privileges --memory 128m)

# What the entrypoint's process is given: ids, capabilities, no-new-privs,
# seccomp mode, whether / is writable, its memory limit. Static, so it runs
# in the image whatever its libc; bind-mounted read-only for one run, never
# part of the image.
PROBE_C='#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
int main(void) {
  gid_t groups[64]; int n = getgroups(64, groups);
  printf("uid=%d euid=%d gid=%d egid=%d supplementary_groups=%d", (int)getuid(), (int)geteuid(),
         (int)getgid(), (int)getegid(), n);
  FILE *f = fopen("/proc/self/status", "r"); char line[256];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "CapEff:", 7) || !strncmp(line, "NoNewPrivs:", 11) || !strncmp(line, "Seccomp:", 8)) {
      line[strcspn(line, "\n")] = 0; printf(" %s", line);
    }
  int fd = open("/probe-write-test", O_CREAT | O_WRONLY, 0600);
  printf(" writes_to_root_fs=%s", fd >= 0 ? "yes" : "no");
  if (fd >= 0) { close(fd); unlink("/probe-write-test"); }
  const char *limits[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
  char value[64] = "unreadable";
  for (int i = 0; i < 2; i++) {
    FILE *m = fopen(limits[i], "r");
    if (m && fgets(value, sizeof value, m)) { value[strcspn(value, "\n")] = 0; fclose(m); break; }
  }
  printf(" memory_limit=%s\n", value);
  return 0;
}'

CHECK_PIDS=() CHECK_CTR="" CHECK_DBS=() CHECK_DIR="" SIDES=()
cleanup_check() {
  local status=$?
  [ "${#CHECK_PIDS[@]}" = 0 ] || kill "${CHECK_PIDS[@]}" 2>/dev/null || true
  [ "${#CHECK_PIDS[@]}" = 0 ] || wait "${CHECK_PIDS[@]}" 2>/dev/null || true
  [ -z "$CHECK_CTR" ] || bb rm "$CHECK_CTR" >/dev/null 2>&1 || true
  local db admin; admin=$(default_admin_url)
  for db in "${CHECK_DBS[@]}"; do
    PGOPTIONS='-c client_min_messages=warning' psql "$admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  done
  if [ "$status" = 0 ]; then
    rm -rf "$CHECK_DIR"
  elif [ -n "$CHECK_DIR" ]; then
    printf 'the check failed; its outputs are in %s\n' "$CHECK_DIR" >&2
  fi
}

# Prints the image's OCI configuration (config, rootfs, history) as JSON.
image_oci() { bb inspect --type image "$IMAGE" | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["OCIv1"]))'; }

json_get() { python3 -c 'import json, sys; v = json.loads(sys.argv[1])
for k in sys.argv[2:]: v = v[k] if isinstance(v, dict) else v[int(k)]
print(v if isinstance(v, str) else json.dumps(v))' "$@"; }

# podman on the private store, with runc and rlimits the host grants: its
# open-files hard limit, and 4096 processes (the job is one process; seen
# here: runc may set nproc up to 32768, not the 96369 of the host's limit).
pm() {
  TMPDIR="$STATE/tmp" podman --runtime "$(command -v runc)" --events-backend none \
    --root "$STATE/storage" --runroot "$STATE/run" --storage-driver vfs "$@"
}
nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] || [ "$nofile" -gt 1048576 ] && nofile=1048576
PODMAN_LIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit nproc=4096:4096)

# Starts side $1's Stripe stand-in on a fresh database seeded with
# CHECK_ROWS payments (the demo's table and drift), and its Pushgateway.
# Sets SIDE_ENV (the job's environment), SIDE_URL and SIDE_PUSHGATEWAY.
prepare_side() {
  local side=$1 db="stripe_reconciler_image_check_$1" admin url port
  admin=$(default_admin_url)
  PGOPTIONS='-c client_min_messages=warning' psql "$admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
  psql "$admin" -qc "CREATE DATABASE $db" >/dev/null
  CHECK_DBS+=("$db")
  url=$(url_with_db "$admin" "$db")
  create_demo_payments "$url"
  port=$(free_port)
  DATABASE_URL=$url target/debug/examples/stripe_standin --listen "127.0.0.1:$port" --seed "$CHECK_ROWS" \
    --events 200 --connect-account "$CONNECTED" --api-key sk_test_standin \
    >"$CHECK_DIR/$side.expected.json" 2>"$CHECK_DIR/$side.standin.log" &
  CHECK_PIDS+=($!)
  wait_for_port "$port" 120 || { cat "$CHECK_DIR/$side.standin.log" >&2; die "the stand-in did not start"; }
  start_pushgateway "$CHECK_DIR/$side.pushgateway.log"
  CHECK_PIDS+=("$PUSHGATEWAY_PID")
  # The demo's settings (scripts/demo.sh): a local stand-in, so no rate
  # limit to speak of; amounts, Connect and Checkout Sessions compared.
  SIDE_ENV=(DATABASE_URL="$url" STRIPE_API_KEY=sk_test_standin STRIPE_API_BASE="http://127.0.0.1:$port"
    PUSHGATEWAY_URL="$PUSHGATEWAY_URL" RECONCILER_LOG_FORMAT=json
    RECONCILER_BATCH_SIZE=1000 RECONCILER_BATCHES_PER_RUN=$((CHECK_ROWS / 1000 + 1))
    RECONCILER_RATE_LIMIT_RPS=2000 RECONCILER_MAX_IN_FLIGHT=32
    RECONCILER_AMOUNT_COLUMN=amount_cents RECONCILER_CURRENCY_COLUMN=currency
    RECONCILER_ABANDONED_AFTER_SECONDS=2592000 RECONCILER_ACCOUNT_COLUMN=stripe_account
    RECONCILER_CHECKOUT_SESSION_COLUMN=stripe_checkout_session_id)
  SIDE_PUSHGATEWAY=$PUSHGATEWAY_URL SIDE_URL=$url
}

# Runs the job on side $1 (host, buildah or podman; see above), step $2,
# with arguments $3...: stdout to $CHECK_DIR/$1.$2.out, stderr to .err, the
# exit code to .code. With ONLY_ENV set (an array of VAR=VALUE), that
# environment replaces SIDE_ENV. The sides in the image run the image's own
# entrypoint as the image's own user (neither is given on the command line).
run_side() {
  local side=$1 step=$2 code=0 env_words=("${SIDE_ENV[@]}") e flags=(); shift 2
  [ -z "${ONLY_ENV+x}" ] || env_words=("${ONLY_ENV[@]}")
  for e in "${env_words[@]}"; do flags+=(--env "$e"); done
  case "$side" in
    host) env -i PATH=/usr/bin:/bin "${env_words[@]}" "$CHECK_DIR/stripe-reconciler" "$@" ;;
    buildah) bb run --isolation chroot --network host "${flags[@]}" "$CHECK_CTR" -- "${ENTRYPOINT[@]}" "$@" ;;
    podman) pm run --rm --pull=never --network host "${PODMAN_LIMITS[@]}" "${PODMAN_CHART[@]}" "${flags[@]}" "$IMAGE" "$@" ;;
  esac >"$CHECK_DIR/$side.$step.out" 2>"$CHECK_DIR/$side.$step.err" </dev/null || code=$?
  echo "$code" >"$CHECK_DIR/$side.$step.code"
}

# Compares step $1 on every side: exit code $2 on each, and stdout (for
# `run` and `events`: the JSON summary, without VOLATILE_FIELDS) equal to
# the host's.
compare_step() {
  local step=$1 want=$2 side code
  for side in "${SIDES[@]}"; do
    code=$(cat "$CHECK_DIR/$side.$step.code")
    if [ "$code" != "$want" ]; then
      tail -n 5 "$CHECK_DIR/$side.$step.err" >&2
      die "$step on side $side exited $code, expected $want"
    fi
    [ "$side" = host ] && continue
    python3 - "$CHECK_DIR/host.$step.out" "$CHECK_DIR/$side.$step.out" "$VOLATILE_FIELDS" <<'PY' \
      || die "$step: the output on side $side differs from the binary's on the host"
import json, sys
host, image = (open(p).read() for p in sys.argv[1:3])
volatile = set(sys.argv[3].split(","))
def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items() if k not in volatile}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v
def parse(text):
    lines = [l for l in text.splitlines() if l.strip()]
    try:
        return [strip(json.loads(l)) for l in lines]
    except ValueError:
        return text
h, i = parse(host), parse(image)
if h != i:
    print("host:  %s\nimage: %s" % (h, i), file=sys.stderr)
    sys.exit(1)
PY
  done
}

# Metric names side $1's Pushgateway holds from the job, one per line.
pushed_metrics() {
  python3 -c 'import sys, urllib.request
names = set()
for line in urllib.request.urlopen(sys.argv[1] + "/metrics").read().decode().splitlines():
    if line.startswith("stripe_reconciler_"):
        names.add(line.split("{")[0].split(" ")[0])
print("\n".join(sorted(names)))' "$1"
}

# Open findings per kind in database $1, "kind count" per line.
findings_per_kind() {
  psql "$1" -Atc "SELECT kind || ' ' || count(*) FROM reconciliation_findings
                   WHERE resolved_at IS NULL GROUP BY kind ORDER BY kind"
}

check_image() {
  ensure_postgres
  ensure_packages gcc:gcc /usr/lib/x86_64-linux-gnu/libc.a:libc6-dev psql:postgresql-client python3:python3 \
    podman:podman runc:runc
  command -v cargo >/dev/null || die "cargo is needed to build the Stripe stand-in (examples/stripe_standin.rs)"
  rm -rf "$STATE"/tmp/check.*   # a failed check's outputs, kept until the next check
  CHECK_DIR=$(mktemp -d "$STATE/tmp/check.XXXXXX")
  trap cleanup_check EXIT
  local t0; t0=$(date +%s)

  say "the image: $IMAGE"
  local oci user entrypoint labels layers size
  oci=$(image_oci)
  user=$(json_get "$oci" config User)
  entrypoint=$(json_get "$oci" config Entrypoint)
  labels=$(json_get "$oci" config Labels)
  layers=$(json_get "$oci" rootfs diff_ids | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')
  size=$(bb images --format '{{.Size}}' "$IMAGE" | head -n 1)
  printf '  size %s, %s layers, user %s, entrypoint %s\n' "$size" "$layers" "$user" "$entrypoint"
  # What the Dockerfile declares, read from it: the image must carry exactly that.
  local want_user want_entry
  want_user=$(sed -n 's/^USER[[:space:]]\{1,\}//p' Dockerfile | tail -n 1)
  want_entry=$(sed -n 's/^ENTRYPOINT[[:space:]]\{1,\}//p' Dockerfile | tail -n 1)
  [ "$user" = "$want_user" ] || die "the image's user is '$user', the Dockerfile's USER is '$want_user'"
  # What the kubelet checks for runAsNonRoot: a numeric, non-zero user.
  [[ "$user" =~ ^[0-9]+(:[0-9]+)?$ ]] && [ "${user%%:*}" != 0 ] \
    || die "the image's user '$user' is not a numeric non-root UID (runAsNonRoot would refuse it)"
  [ "$(json_get "$want_entry")" = "$entrypoint" ] || die "the image's entrypoint is $entrypoint, the Dockerfile's is $want_entry"
  python3 - "$labels" "$VERSION" <<'PY' || die "the image's labels are not the Dockerfile's"
import json, re, sys
labels, version = json.loads(sys.argv[1]), sys.argv[2]
text = open("Dockerfile").read()
declared = set(re.findall(r'(org\.opencontainers\.image\.[a-z.]+)=', text))
missing = declared - set(labels)
extra = set(labels) - declared
if missing or extra:
    sys.exit(f"labels missing: {sorted(missing)}, not in the Dockerfile: {sorted(extra)}")
if labels["org.opencontainers.image.version"] != version:
    sys.exit(f"org.opencontainers.image.version is {labels['org.opencontainers.image.version']}, Cargo.toml says {version}")
for k in sorted(labels):
    print(f"  {k}={labels[k]}")
PY
  mapfile -t ENTRYPOINT < <(python3 -c 'import json, sys; print("\n".join(json.loads(sys.argv[1])))' "$entrypoint")

  CHECK_CTR=$(bb from --quiet --pull=never "${POLICY[@]}" "$IMAGE")
  local mnt; mnt=$(bb mount "$CHECK_CTR")
  cp "$mnt${ENTRYPOINT[0]}" "$CHECK_DIR/stripe-reconciler"
  local files; files=$(find "$mnt" -xdev \( -type f -o -type l \) | wc -l)
  [ ! -e "$mnt/bin/sh" ] && [ ! -e "$mnt/usr/bin/dpkg" ] && [ ! -e "$mnt/usr/bin/apt-get" ] \
    || die "the runtime image has a shell or a package manager"
  [ ! -e "$mnt/migrations" ] || die "the image carries migrations/ (they are embedded in the binary)"
  printf '  %s files, no shell, no package manager, no migrations/ directory; binary %s bytes, %s\n' \
    "$files" "$(stat -c %s "$CHECK_DIR/stripe-reconciler")" \
    "$(nm "$CHECK_DIR/stripe-reconciler" 2>&1 | head -n 1 | sed 's/^.*: //')"
  bb umount "$CHECK_CTR" >/dev/null

  say "what the entrypoint's process is given (a static probe, bind-mounted read-only for one run)"
  printf '%s\n' "$PROBE_C" | gcc -static -O2 -x c -o "$CHECK_DIR/probe" -
  local ids="uid=${want_user%%:*} euid=${want_user%%:*} gid=${want_user##*:} egid=${want_user##*:} "
  SIDES=(host buildah)
  printf '  buildah run: '
  bb run --isolation chroot --network host -v "$CHECK_DIR/probe:/probe:ro" "$CHECK_CTR" -- /probe \
    >"$CHECK_DIR/buildah.probe" 2>&1 || true
  cat "$CHECK_DIR/buildah.probe"
  grep -q "^$ids" "$CHECK_DIR/buildah.probe" \
    || die "buildah run did not run the probe as the image's user $want_user (its output is above)"
  printf '  podman run:  '
  if pm run --rm --pull=never --network host "${PODMAN_LIMITS[@]}" "${PODMAN_CHART[@]}" \
       -v "$CHECK_DIR/probe:/probe:ro" --entrypoint /probe "$IMAGE" >"$CHECK_DIR/podman.probe" 2>&1; then
    cat "$CHECK_DIR/podman.probe"
    grep -q "^$ids.*CapEff:[[:space:]]*0\{16\} NoNewPrivs:[[:space:]]*1 Seccomp:[[:space:]]*2 writes_to_root_fs=no memory_limit=134217728$" \
      "$CHECK_DIR/podman.probe" || die "podman run did not apply the chart's settings"
    SIDES+=(podman)
  else
    echo "refused here ($(tail -n 1 "$CHECK_DIR/podman.probe")): the podman side is skipped"
  fi
  printf '  podman run with its default rlimits: '
  if pm run --rm --pull=never --network host --entrypoint /stripe-reconciler "$IMAGE" --version >"$CHECK_DIR/podman-default" 2>&1; then
    echo "runs"
  else
    echo "refused ($(tail -n 1 "$CHECK_DIR/podman-default"))"
  fi

  say "building the Stripe stand-in (examples/stripe_standin.rs, as scripts/demo.sh does)"
  cargo build --quiet --example stripe_standin

  local side
  for side in "${SIDES[@]}"; do
    case "$side" in
      host) say "host: the binary copied out of the image, run on the host" ;;
      buildah) say "buildah: buildah run --isolation chroot --network host, the image's entrypoint ${ENTRYPOINT[*]} and user $user" ;;
      podman) say "podman: podman run (runc) --network host ${PODMAN_CHART[*]}, the image's entrypoint and user" ;;
    esac
    prepare_side "$side"
    run_side "$side" help --help
    run_side "$side" usage no-such-command
    ONLY_ENV=(DATABASE_URL="$SIDE_URL")
    run_side "$side" no-stripe-key run
    unset ONLY_ENV
    run_side "$side" migrate migrate
    run_side "$side" run run
    run_side "$side" events events
    printf '%s\n' "$(pushed_metrics "$SIDE_PUSHGATEWAY")" >"$CHECK_DIR/$side.pushed"
    findings_per_kind "$SIDE_URL" >"$CHECK_DIR/$side.findings"
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))["expected_findings"]
print("\n".join(f"{k} {v}" for k, v in sorted(d.items())))' "$CHECK_DIR/$side.expected.json" >"$CHECK_DIR/$side.expected"
  done

  local all="${SIDES[*]}" last=${SIDES[-1]}
  say "the sides compared (${all// /, })"
  compare_step help 0;           echo "  --help: exit 0 on each, the same text ($(wc -l <"$CHECK_DIR/$last.help.out") lines)"
  compare_step usage 2;          echo "  an unknown subcommand: exit 2 on each"
  compare_step no-stripe-key 78; echo "  run without STRIPE_API_KEY: exit 78 on each ($(grep -o 'STRIPE_API_KEY[^"]*' "$CHECK_DIR/$last.no-stripe-key.err" | head -n 1))"
  compare_step migrate 0;        echo "  migrate: exit 0 on each, the same output (the migrations are embedded)"
  compare_step run 0;            echo "  run: exit 0 on each, the same summary: $(head -c 300 "$CHECK_DIR/$last.run.out")..."
  compare_step events 0;         echo "  events: exit 0 on each, the same summary: $(head -c 300 "$CHECK_DIR/$last.events.out")..."
  for side in "${SIDES[@]}"; do
    diff -u "$CHECK_DIR/$side.expected" "$CHECK_DIR/$side.findings" >&2 \
      || die "$side: the open findings are not the drift the stand-in seeded"
    [ -s "$CHECK_DIR/$side.pushed" ] && diff -u "$CHECK_DIR/host.pushed" "$CHECK_DIR/$side.pushed" >&2 \
      || die "the metrics pushed on side $side differ from the host's"
  done
  echo "  findings per kind equal the seeded drift on each: $(paste -sd, "$CHECK_DIR/$last.findings")"
  echo "  each Pushgateway got the same $(wc -l <"$CHECK_DIR/$last.pushed") metric names"
  say "check passed in $(( $(date +%s) - t0 )) s (sides: ${all// /, }): $IMAGE ($size, $layers layers)"
}

setup_containers
ensure_packages buildah:buildah mmdebstrap:mmdebstrap
[ "$build" = 1 ] && build_image
image_exists "$IMAGE" || die "$IMAGE is not built (run scripts/image.sh --build)"
[ "$check" = 1 ] || exit 0
check_image
