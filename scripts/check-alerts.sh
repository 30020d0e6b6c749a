#!/usr/bin/env bash
# Checks the alerting and dashboard files:
#   the rules as the chart renders them: for each monitoring/tests/NAME_test.yaml,
#     helm template (namespace payments, values monitoring/tests/NAME.values.yaml
#     when present) renders helm/stripe-reconciler/files/alerts.yaml into
#     NAME.rules.yaml beside a copy of the test file;
#   promtool check rules and promtool test rules on each;
#   dashboard.json is valid JSON and has the variables and panels it promises
#   rule hygiene, test coverage and docs coverage: docs/operations.md documents
#   every metric and alert, README.md carries the runbook_url anchors (see below)
#
# Runs on a fresh Debian/Ubuntu machine as root: installs promtool (package
# `prometheus`) and python3 + PyYAML from apt when missing, without starting
# a Prometheus server, and helm (scripts/helm-tool.sh, from npm). Every check always runs; nothing is skipped. Ends with
# "N passed, M failed" and exits nonzero when M > 0.
#
# Usage: scripts/check-alerts.sh        (from anywhere)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

CHART=helm/stripe-reconciler
RULES=$CHART/files/alerts.yaml
TESTDIR=monitoring/tests
DASHBOARD=helm/stripe-reconciler/files/dashboard.json
README=README.md
OPERATIONS=docs/operations.md
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
# shellcheck source=scripts/helm-tool.sh
source "$ROOT/scripts/helm-tool.sh"
ensure_helm || die "could not install helm"
log "$(promtool --version 2>&1 | head -n1), helm $("$HELM" version --short)"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# render_rules NAME: the chart's rules for test file NAME_test.yaml, as a plain
# Prometheus rule file $WORK/NAME.rules.yaml, with the test file copied beside it.
render_rules() {
    local name="$1" args=()
    [ ! -f "$TESTDIR/$name.values.yaml" ] || args+=(--values "$TESTDIR/$name.values.yaml")
    "$HELM" template stripe-reconciler "$CHART" --namespace payments \
        --set prometheusRule.enabled=true --set existingSecret.name=credentials "${args[@]}" \
        --show-only templates/prometheusrule.yaml >"$WORK/$name.prometheusrule.yaml" || return 1
    "$PY" -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); yaml.safe_dump({"groups": d["spec"]["groups"]}, open(sys.argv[2], "w"), sort_keys=False, width=1000)' \
        "$WORK/$name.prometheusrule.yaml" "$WORK/$name.rules.yaml" || return 1
    cp "$TESTDIR/${name}_test.yaml" "$WORK/${name}_test.yaml"
}

TEST_NAMES=()
for f in "$TESTDIR"/*_test.yaml; do
    n="$(basename "$f" _test.yaml)"
    TEST_NAMES+=("$n")
done
[ "${#TEST_NAMES[@]}" -ge 2 ] || die "expected at least two test files in $TESTDIR, found ${TEST_NAMES[*]:-none}"

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
# The money-at-risk stat counts exactly the kinds StripeReconcilerMoneyAtRisk alerts on.
source = open("helm/stripe-reconciler/files/alerts.yaml").read()
alert_kinds = re.search(r'open_findings\{kind=~"([^"]+)"\}', source)
if not alert_kinds or f'kind=~"{alert_kinds.group(1)}"' not in text:
    errors.append("the money-at-risk panel's kinds differ from StripeReconcilerMoneyAtRisk's")
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

# The source file: thresholds, `for` and severities are chart values.
rules_source() {
    "$PY" - "$RULES" "$CHART/values.yaml" <<'PYEOF'
import re, sys, yaml

text = open(sys.argv[1]).read()
doc = yaml.safe_load(text)
values = yaml.safe_load(open(sys.argv[2]))["alerts"]
errors = []
for group in doc["groups"]:
    for rule in group["rules"]:
        name = rule.get("alert")
        if not name:
            continue
        key = name.removeprefix("StripeReconciler")
        key = key[:1].lower() + key[1:]
        if key not in values:
            errors.append(f"{name}: no alerts.{key} block in values.yaml")
        if not re.fullmatch(r"\$\{alerts\.[A-Za-z.]+\}s?", str(rule.get("for", ""))):
            errors.append(f"{name}: `for` is not a chart value: {rule.get('for')!r}")
        if not re.fullmatch(r"\$\{alerts\.[A-Za-z.]+\}", str(rule.get("labels", {}).get("severity", ""))):
            errors.append(f"{name}: severity is not a chart value")
        # Every comparison with a literal number must be a chart value.
        for m in re.finditer(r"(>|<|>=|<=|==)\s*([0-9][0-9.*\s]*)(?![\w])", rule["expr"]):
            if m.group(2).strip() not in ("0", "1"):
                errors.append(f"{name}: literal threshold {m.group(0).strip()!r}; use ${{alerts.{key}.…}}")
for e in errors:
    print(e)
print(f"{len(set(re.findall(r'[$][{]alerts[.][A-Za-z.]+[}]', text)))} distinct placeholders")
sys.exit(1 if errors else 0)
PYEOF
}

# The rendered rules: no job matchers, the Pushgateway's labels aggregated
# away, the release namespace attached, conventional annotations.
rules_hygiene() {
    "$PY" - "$WORK"/*.rules.yaml <<'PYEOF'
import re, sys, yaml

TARGET = {"instance", "pod", "namespace", "service", "endpoint", "container"}
errors, alerts = [], set()
for path in sys.argv[1:]:
    doc = yaml.safe_load(open(path))
    for group in doc["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule.get("record")
            expr = rule["expr"]
            where = f"{path.rsplit('/', 1)[-1]}: {name}"
            if "${" in yaml.safe_dump(rule):
                errors.append(f"{where}: unreplaced placeholder")
            if re.search(r'\b(exported_)?job\s*(=|!=|=~|!~)', expr):
                errors.append(f"{where}: expression selects on job/exported_job")
            if re.search(r'\b(by|on)\s*\(', expr):
                errors.append(f"{where}: by()/on() would drop job or exported_job; use without()")
            for m in re.finditer(r'without\s*\(([^)]*)\)', expr):
                missing = TARGET - {x.strip() for x in m.group(1).split(",")}
                if missing:
                    errors.append(f"{where}: without({m.group(1)}) keeps the Pushgateway's {sorted(missing)}")
            metrics = re.findall(r"stripe_reconciler_\w+", expr)
            if "absent(" not in expr and expr.count("without") < len(metrics):
                errors.append(f"{where}: a metric is used without aggregating the Pushgateway's labels away")
            if "alert" not in rule:
                continue
            alerts.add(rule["alert"])
            labels = rule.get("labels", {})
            if labels.get("severity") not in ("critical", "warning", "info"):
                errors.append(f"{where}: severity label missing or unknown")
            if labels.get("namespace") != "payments":
                errors.append(f"{where}: no namespace=\"payments\" label (the release namespace)")
            ann = rule.get("annotations", {})
            for key in ("summary", "description", "runbook_url"):
                if not ann.get(key):
                    errors.append(f"{where}: annotation {key} missing")
            if ann.get("runbook_url", "").rsplit("#", 1)[-1] != rule["alert"].lower():
                errors.append(f"{where}: runbook_url {ann.get('runbook_url')!r} does not end in #{rule['alert'].lower()}")
            if "runbook" in ann:
                errors.append(f"{where}: use runbook_url, not runbook")
for e in errors:
    print(e)
print(f"{len(alerts)} alerts in {len(sys.argv) - 1} rendered rule files")
sys.exit(1 if errors else 0)
PYEOF
}

test_coverage() {
    "$PY" - "$WORK" "${TEST_NAMES[@]}" <<'PYEOF'
import re, sys, yaml

work, names = sys.argv[1], sys.argv[2:]
TARGET = ("namespace=\"monitoring\"", "service=", "endpoint=", "container=", "pod=")
errors = []
# The money kinds are derived from the Rust source: the variants
# FindingKind::is_money answers true for, named by FindingKind::fixed_name
# (src/reconcile/kind.rs). Added to them, the status kinds where money is
# lost or unproven, which the alert also covers (DESIGN.md): paid but not
# charged, an unknown PaymentIntent, and a charge on a failed payment.
kind_rs = open("src/reconcile/kind.rs").read()
kind_names = dict(re.findall(r'Self::(\w+) => "([a-z_]+)",', kind_rs))
is_money = re.search(r"fn is_money\(&self\) -> bool \{\s*match self \{(.*?)=> true,", kind_rs, re.S)
money_variants = re.findall(r"Self::(\w+)", is_money.group(1)) if is_money else []
unnamed = [v for v in money_variants if v not in kind_names]
if len(money_variants) < 5 or unnamed:
    errors.append(f"src/reconcile/kind.rs: could not derive the money kinds from is_money "
                  f"(found {money_variants}, without a fixed_name: {unnamed}): the pattern no longer matches the code")
MONEY = {kind_names[v] for v in money_variants if v in kind_names} | {
    "paid_locally_not_externally", "missing_externally", "unexpected:failed->succeeded"}
alerts, fires, silent, honor, exported, money = set(), set(), set(), set(), set(), set()
sizing = False
for n in names:
    rules = yaml.safe_load(open(f"{work}/{n}.rules.yaml"))
    tests = yaml.safe_load(open(f"{work}/{n}_test.yaml"))
    if tests.get("rule_files") != [f"{n}.rules.yaml"]:
        errors.append(f"{n}_test.yaml: rule_files must be [{n}.rules.yaml] (rendered by this script)")
    alerts |= {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    for case in tests["tests"]:
        series = [s["series"] for s in case.get("input_series", [])]
        kp = all(all(t in s for t in TARGET) for s in series if s.startswith("stripe_reconciler_"))
        for t in case.get("alert_rule_test", []):
            if not t.get("exp_alerts"):
                silent.add(t["alertname"])
                if "sizing example" in case.get("name", "") and t["alertname"] == "StripeReconcilerLagHigh":
                    sizing = True
                continue
            fires.add(t["alertname"])
            for a in t["exp_alerts"]:
                lab = a.get("exp_labels", {})
                if lab.get("namespace") != "payments":
                    errors.append(f"{n}: {case['name']}: {t['alertname']} expected without namespace=payments")
                if t["alertname"] == "StripeReconcilerMoneyAtRisk":
                    money.add(lab.get("kind"))
                if not kp or not series:
                    continue
                if "exported_job" in lab:
                    exported.add(t["alertname"])
                elif "job" in lab or lab.get("reason") == "never_reported":
                    honor.add(t["alertname"])
for a in sorted(alerts):
    if a not in fires:
        errors.append(f"{a}: no test case where it fires")
    if a not in silent:
        errors.append(f"{a}: no test case where it stays silent")
    if a not in honor:
        errors.append(f"{a}: never fired from kube-prometheus-stack series with honorLabels")
    if a not in exported:
        errors.append(f"{a}: never fired from kube-prometheus-stack series without honorLabels (exported_job)")
if MONEY - money:
    errors.append(f"StripeReconcilerMoneyAtRisk: no firing test for kinds {sorted(MONEY - money)}")
if not sizing:
    errors.append("no test named '... sizing example ...' where StripeReconcilerLagHigh stays silent")
unknown = (fires | silent) - alerts
if unknown:
    errors.append(f"tests name alerts no rendered rule file has: {sorted(unknown)}")
for e in errors:
    print(e)
print(f"{len(alerts)} alerts: fire-tested {len(fires & alerts)}, silence-tested {len(silent & alerts)}, "
      f"honorLabels {len(honor)}, exported_job {len(exported)}, money kinds {len(money)}")
sys.exit(1 if errors else 0)
PYEOF
}

readme_coverage() {
    "$PY" - "$WORK/default.rules.yaml" "$DASHBOARD" "$OPERATIONS" "$README" "$WORK"/*.rules.yaml <<'PYEOF'
import re, sys, yaml

rules = yaml.safe_load(open(sys.argv[1]))
dashboard = open(sys.argv[2]).read()
ops_path, readme_path = sys.argv[3], sys.argv[4]
ops = open(ops_path).read()
pages = {ops_path: ops, readme_path: open(readme_path).read()}
errors = []
exprs = " ".join(r["expr"] for g in rules["groups"] for r in g["rules"])
metrics = set(re.findall(r"stripe_reconciler_\w+", exprs + dashboard))
for m in sorted(metrics):
    if f"`{m}" not in ops:
        errors.append(f"{ops_path} does not document metric {m}")
anchors = {p: set(re.findall(r'<a id="([^"]+)"></a>', t)) for p, t in pages.items()}
for path in sys.argv[5:]:
    for g in yaml.safe_load(open(path))["groups"]:
        for r in g["rules"]:
            if "alert" not in r:
                continue
            if r["alert"] not in ops:
                errors.append(f"{ops_path} does not document alert {r['alert']}")
            url = r["annotations"]["runbook_url"]
            page, anchor = url.rsplit("#", 1)
            # The default alerts.runbookBaseUrl is the README: its alert list
            # carries the anchor and links to the runbook on the operations page.
            if page in pages and anchor not in anchors[page]:
                errors.append(f"{page} has no <a id=\"{anchor}\"></a> for the runbook_url of {r['alert']}")
            if anchor not in anchors[ops_path]:
                errors.append(f"{ops_path} has no runbook <a id=\"{anchor}\"></a> for {r['alert']}")
            if f"(docs/operations.md#{anchor})" not in pages[readme_path]:
                errors.append(f"{readme_path} does not link {r['alert']} to docs/operations.md#{anchor}")
if "honor_labels: true" not in ops:
    errors.append(f"{ops_path} lacks the honor_labels: true scrape config")
# Everything the binary pushes is documented too.
import glob
sources = "".join(open(p).read() for p in sorted(glob.glob("src/metrics/*.rs")))
# A gauge's name is a figure()/register() call's first string, or the first
# of a `const NAME: (&str, &str) = ("name", "help")` pair (src/metrics/events.rs).
pushed = re.findall(r'(?:(?:figure|register)\(\s*(?:registry,\s*)?|const \w+: \(&str, &str\) = \(\s*)"(\w+)"', sources)
if len(set(pushed)) < 30:
    errors.append(f"found only {len(set(pushed))} pushed metric names in src/metrics/: the pattern no longer matches the code")
for m in pushed:
    if f"`stripe_reconciler_{m}" not in ops:
        errors.append(f"{ops_path} does not document pushed metric stripe_reconciler_{m}")
for e in errors:
    print(e)
print(f"{len(metrics)} metrics used by rules and dashboard, {len(anchors[ops_path])} runbook anchors, "
      f"{len(anchors[readme_path])} README alert anchors")
sys.exit(1 if errors else 0)
PYEOF
}

check "$RULES: thresholds, for and severities are chart values" rules_source
for n in "${TEST_NAMES[@]}"; do
    check "helm renders the rules for $TESTDIR/${n}_test.yaml" render_rules "$n"
done
for n in "${TEST_NAMES[@]}"; do
    check "promtool check rules (rendered, $n)" promtool check rules "$WORK/$n.rules.yaml"
    check "promtool test rules $TESTDIR/${n}_test.yaml" promtool test rules "$WORK/${n}_test.yaml"
done
check "rule hygiene (no job matchers, Pushgateway labels dropped, namespace, severity, annotations)" rules_hygiene
check "every alert fires and stays silent in tests, both scrape forms, every money kind, sizing example" test_coverage
check "$DASHBOARD is valid JSON" dashboard_json
check "$DASHBOARD variables and panels" dashboard_structure
check "$DASHBOARD queries parse as PromQL" dashboard_promql
check "$OPERATIONS documents every metric and alert with a runbook; $README carries every runbook_url anchor" readme_coverage
check "no prometheus server left running" no_prometheus_server

if [ "$FAILED" -ne 0 ]; then
    printf 'failed: %s\n' "${FAILED_NAMES[@]}" >&2
fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
