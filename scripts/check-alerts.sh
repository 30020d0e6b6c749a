#!/usr/bin/env bash
# Checks the alerting and dashboard files:
#   promtool check rules  helm/stripe-reconciler/files/alerts.yaml
#   promtool test rules   monitoring/tests/alerts_test.yaml
#   dashboard.json is valid JSON and has the variables and panels it promises
#   rule hygiene, test coverage and README coverage (see the checks below)
#
# Runs on a fresh Debian/Ubuntu machine as root: installs promtool (package
# `prometheus`) and python3 + PyYAML from apt when missing, without starting
# a Prometheus server. Every check always runs; nothing is skipped. Ends with
# "N passed, M failed" and exits nonzero when M > 0.
#
# Usage: scripts/check-alerts.sh        (from anywhere)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

RULES=helm/stripe-reconciler/files/alerts.yaml
TESTS=monitoring/tests/alerts_test.yaml
DASHBOARD=helm/stripe-reconciler/files/dashboard.json
README=README.md
# Debian's interpreter, so that python3-yaml from apt is the one imported.
PY=/usr/bin/python3

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'check-alerts: %s\n' "$*" >&2; exit 1; }

# --- dependencies ------------------------------------------------------------

APT_UPDATED=0
apt_update_once() {
    if [ "$APT_UPDATED" -eq 0 ]; then
        log "apt-get update"
        apt-get update -q
        APT_UPDATED=1
    fi
}

# True when apt knows an installable version of every package given.
apt_has_candidate() {
    local pkg cand
    for pkg in "$@"; do
        cand="$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')"
        if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then
            return 1
        fi
    done
}

# Pids of running Prometheus servers (not promtool), one per line.
prometheus_pids() {
    local dir pid exe
    for dir in /proc/[0-9]*; do
        pid="${dir#/proc/}"
        exe="$(readlink "$dir/exe" 2>/dev/null || true)"
        case "$exe" in
            */bin/prometheus) echo "$pid" ;;
        esac
    done
}

apt_install() {
    command -v apt-get >/dev/null || die "apt-get not found; install $* by hand"
    [ "$(id -u)" -eq 0 ] || die "installing $* needs root"

    # Refresh the package lists only when they do not know the packages.
    apt_has_candidate "$@" || apt_update_once

    # Keep maintainer scripts from starting services (the prometheus package
    # starts its server where it can). policy-rc.d is Debian's switch for
    # this; leave an existing one alone.
    local policy=/usr/sbin/policy-rc.d created_policy=0 before after pid
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# check-alerts.sh: no service starts during install\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        created_policy=1
    fi
    before="$(prometheus_pids)"

    local status=0
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" || status=$?
    if [ "$status" -ne 0 ] && [ "$APT_UPDATED" -eq 0 ]; then
        # Stale lists (404 on a superseded version): refresh once and retry.
        apt_update_once
        status=0
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" || status=$?
    fi
    if [ "$created_policy" -eq 1 ]; then
        rm -f "$policy"
    fi
    [ "$status" -eq 0 ] || die "apt-get install $* failed (exit $status)"

    # Only promtool is wanted: under systemd keep the packaged server from
    # running now or at the next boot (the package enables it).
    if [[ " $* " == *" prometheus "* ]] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
        systemctl disable --now prometheus.service || true
    fi
    # Stop a server the install started anyway; only processes that were
    # not running before the install.
    after="$(prometheus_pids)"
    for pid in $after; do
        if ! grep -qx "$pid" <<<"$before"; then
            log "stopping the prometheus server (pid $pid) the package install started"
            kill "$pid" 2>/dev/null || true
        fi
    done
    for pid in $after; do
        if ! grep -qx "$pid" <<<"$before"; then
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                [ -d "/proc/$pid" ] || break
                sleep 1
            done
            [ ! -d "/proc/$pid" ] || die "prometheus server pid $pid started by the install is still running"
        fi
    done
}

if ! command -v promtool >/dev/null; then
    log "promtool not found; installing the Debian package prometheus"
    apt_install prometheus
    command -v promtool >/dev/null || die "promtool still missing after installing prometheus"
fi
if [ ! -x "$PY" ] || ! "$PY" -c 'import yaml' 2>/dev/null; then
    log "$PY with PyYAML not found; installing python3 python3-yaml"
    apt_install python3 python3-yaml
    "$PY" -c 'import yaml' || die "$PY cannot import yaml after installing python3-yaml"
fi
log "$(promtool --version 2>&1 | head -n1)"

# --- checks ------------------------------------------------------------------

PASSED=0
FAILED=0
FAILED_NAMES=()

# check NAME CMD...: runs CMD, prints its output, counts the result.
check() {
    local name="$1" out status=0
    shift
    log "check: $name"
    out="$("$@" 2>&1)" || status=$?
    [ -z "$out" ] || printf '%s\n' "$out"
    if [ "$status" -eq 0 ]; then
        printf 'PASS  %s\n' "$name"
        PASSED=$((PASSED + 1))
    else
        printf 'FAIL  %s (exit %d)\n' "$name" "$status"
        FAILED=$((FAILED + 1))
        FAILED_NAMES+=("$name")
    fi
}

# No Prometheus server may be left running by this script's installs.
no_prometheus_server() {
    local pids
    pids="$(prometheus_pids)"
    if [ -n "$pids" ]; then
        echo "running prometheus server pid(s): $pids"
        return 1
    fi
}

dashboard_json() {
    "$PY" -m json.tool "$DASHBOARD" >/dev/null
}

dashboard_structure() {
    "$PY" - "$DASHBOARD" <<'PYEOF'
import json, re, sys

d = json.load(open(sys.argv[1]))
errors = []
if not 36 <= d.get("schemaVersion", 0) <= 41:
    errors.append(f"schemaVersion {d.get('schemaVersion')} not ~39")
if not d.get("uid"):
    errors.append("dashboard has no uid")
variables = {v["name"]: v for v in d.get("templating", {}).get("list", [])}
ds = variables.get("datasource")
if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
    errors.append("no `datasource` variable of type datasource/prometheus")
if "job" not in variables:
    errors.append("no `job` variable")

panels = []
def walk(ps):
    for p in ps:
        panels.append(p)
        walk(p.get("panels", []))
walk(d.get("panels", []))

ids = [p.get("id") for p in panels]
if len(ids) != len(set(ids)):
    errors.append(f"duplicate panel ids: {ids}")
exprs = []
for p in panels:
    if p.get("type") == "row":
        continue
    if p.get("datasource", {}).get("uid") != "${datasource}":
        errors.append(f"panel {p.get('title')!r}: datasource is not ${{datasource}}")
    if not p.get("targets"):
        errors.append(f"panel {p.get('title')!r}: no targets")
    for t in p.get("targets", []):
        exprs.append(t.get("expr", ""))
        if t.get("datasource", {}).get("uid") != "${datasource}":
            errors.append(f"panel {p.get('title')!r}: target datasource is not ${{datasource}}")
        if "$job" not in t.get("expr", ""):
            errors.append(f"panel {p.get('title')!r}: query ignores $job: {t.get('expr')}")
    if "gridPos" not in p:
        errors.append(f"panel {p.get('title')!r}: no gridPos")

text = "\n".join(exprs)
for metric in [
    "stripe_reconciler_lag_seconds",
    "stripe_reconciler_cursor_position",
    "stripe_reconciler_cycle_age_seconds",
    "stripe_reconciler_verdicts",
    "stripe_reconciler_open_findings",
    "stripe_reconciler_capacity_ratio",
    "stripe_reconciler_outbox_pending",
    "stripe_reconciler_last_success_timestamp_seconds",
]:
    if metric not in text:
        errors.append(f"no panel queries {metric}")
if re.search(r'(?<![\w$])job\s*(=|!=|=~|!~)\s*"', text):
    errors.append("a query hard-codes a job= matcher (use $job_label)")

for e in errors:
    print(e)
print(f"{len(panels)} panels, {len(exprs)} queries")
sys.exit(1 if errors else 0)
PYEOF
}

# Every dashboard query, with the variables filled in both ways, must parse
# as PromQL: they become recording rules in a scratch file for promtool.
dashboard_promql() {
    local scratch status=0
    scratch="$(mktemp --suffix=.yaml)"
    "$PY" - "$DASHBOARD" >"$scratch" <<'PYEOF' || status=$?
import json, sys

d = json.load(open(sys.argv[1]))
rules = []
def walk(ps):
    for p in ps:
        for t in p.get("targets", []):
            for label in ("job", "exported_job"):
                expr = t["expr"].replace("$job_label", label).replace("$job", "payments-vs-stripe")
                rules.append({"record": f"dashboard:panel_{p['id']}_{t['refId']}_{label}", "expr": expr})
        walk(p.get("panels", []))
walk(d["panels"])
for v in d["templating"]["list"]:
    if v["type"] == "query":
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        # label_values(metric, label) is Grafana's, not PromQL: check the metric.
        metric = q.split("(", 1)[1].split(",", 1)[0].strip()
        rules.append({"record": f"dashboard:variable_{v['name']}", "expr": metric})
print(json.dumps({"groups": [{"name": "dashboard-queries", "rules": rules}]}))
PYEOF
    if [ "$status" -eq 0 ]; then
        promtool check rules --lint=none "$scratch" || status=$?
    fi
    rm -f "$scratch"
    return "$status"
}

rules_hygiene() {
    "$PY" - "$RULES" <<'PYEOF'
import re, sys, yaml

doc = yaml.safe_load(open(sys.argv[1]))
errors, alerts = [], 0
for group in doc["groups"]:
    for rule in group["rules"]:
        name = rule.get("alert") or rule.get("record")
        expr = rule["expr"]
        # Pushgateway labels arrive as job or exported_job: never select on either.
        if re.search(r'\b(exported_)?job\s*(=|!=|=~|!~)', expr):
            errors.append(f"{name}: expression selects on job/exported_job")
        if re.search(r'\b(by|on)\s*\(', expr):
            errors.append(f"{name}: by()/on() would drop job or exported_job; use without()")
        if "alert" not in rule:
            continue
        alerts += 1
        if rule.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
            errors.append(f"{name}: severity label missing or unknown")
        for key in ("summary", "description", "runbook"):
            if not rule.get("annotations", {}).get(key):
                errors.append(f"{name}: annotation {key} missing")
for e in errors:
    print(e)
print(f"{alerts} alerting rules")
sys.exit(1 if errors else 0)
PYEOF
}

test_coverage() {
    "$PY" - "$RULES" "$TESTS" <<'PYEOF'
import os, sys, yaml

rules_path, tests_path = sys.argv[1], sys.argv[2]
rules = yaml.safe_load(open(rules_path))
tests = yaml.safe_load(open(tests_path))
errors = []

names = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
want = os.path.normpath(rules_path)
got = [os.path.normpath(os.path.join(os.path.dirname(tests_path), f)) for f in tests["rule_files"]]
if want not in got:
    errors.append(f"rule_files {tests['rule_files']} do not point at {rules_path}")

fires, silent, exported = set(), set(), set()
for case in tests["tests"]:
    series = " ".join(s["series"] for s in case.get("input_series", []))
    for t in case.get("alert_rule_test", []):
        if t.get("exp_alerts"):
            fires.add(t["alertname"])
            if 'exported_job="' in series and any(
                "exported_job" in a.get("exp_labels", {}) for a in t["exp_alerts"]
            ):
                exported.add(t["alertname"])
        else:
            silent.add(t["alertname"])
for n in sorted(names):
    if n not in fires:
        errors.append(f"{n}: no test case where it fires")
    if n not in silent:
        errors.append(f"{n}: no test case where it stays silent")
if not exported:
    errors.append("no test with exported_job series (scrape without honor_labels)")
unknown = (fires | silent) - names
if unknown:
    errors.append(f"tests name unknown alerts: {sorted(unknown)}")
for e in errors:
    print(e)
print(f"{len(names)} alerts: fire-tested {len(fires & names)}, silence-tested {len(silent & names)}, "
      f"exported_job-tested {len(exported)}")
sys.exit(1 if errors else 0)
PYEOF
}

readme_coverage() {
    "$PY" - "$RULES" "$DASHBOARD" "$README" <<'PYEOF'
import re, sys, yaml

rules = yaml.safe_load(open(sys.argv[1]))
dashboard = open(sys.argv[2]).read()
readme = open(sys.argv[3]).read()
errors = []
exprs = " ".join(r["expr"] for g in rules["groups"] for r in g["rules"])
metrics = set(re.findall(r"stripe_reconciler_\w+", exprs + dashboard))
for m in sorted(metrics):
    if f"`{m}" not in readme:
        errors.append(f"README does not document metric {m}")
for g in rules["groups"]:
    for r in g["rules"]:
        if "alert" in r and r["alert"] not in readme:
            errors.append(f"README does not document alert {r['alert']}")
if "honor_labels: true" not in readme:
    errors.append("README lacks the honor_labels: true scrape config")
# Everything the binary pushes is documented too.
pushed = re.findall(r'\("(\w+)", "', open("src/metrics.rs").read())
for m in pushed:
    if f"`stripe_reconciler_{m}" not in readme:
        errors.append(f"README does not document pushed metric stripe_reconciler_{m}")
for e in errors:
    print(e)
print(f"{len(metrics)} metrics used by rules and dashboard")
sys.exit(1 if errors else 0)
PYEOF
}

check "promtool check rules $RULES" promtool check rules "$RULES"
check "promtool test rules $TESTS" promtool test rules "$TESTS"
check "rule hygiene (no job matchers, severity, annotations)" rules_hygiene
check "every alert has a firing and a silent test, exported_job covered" test_coverage
check "$DASHBOARD is valid JSON" dashboard_json
check "$DASHBOARD variables and panels" dashboard_structure
check "$DASHBOARD queries parse as PromQL" dashboard_promql
check "$README documents every metric and alert" readme_coverage
check "no prometheus server left running" no_prometheus_server

if [ "$FAILED" -ne 0 ]; then
    printf 'failed: %s\n' "${FAILED_NAMES[@]}" >&2
fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
