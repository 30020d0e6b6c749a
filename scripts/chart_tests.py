#!/usr/bin/env python3
"""Rendering tests and schema validation for helm/stripe-reconciler.

Run by scripts/check-chart.sh (which provides helm and a venv with PyYAML and
kubernetes-validate); each assertion prints `ok - ...` or `not ok - ...`.

  chart_tests.py versions --chart DIR
      print every Kubernetes minor the chart claims (Chart.yaml kubeVersion,
      a lower bound) that kubernetes-validate ships schemas for, one a line
  chart_tests.py validate --k8s-version 1.27.0 [--k8s-version ...] --counts FILE MANIFEST...
      validate every document against the Kubernetes schemas (strict) of each version
  chart_tests.py test --helm HELM --chart DIR --counts FILE
      plain assertions on `helm template` output (and NOTES.txt)
  chart_tests.py static --root DIR --counts FILE
      the Dockerfile (digest-pinned bases, stripped binary, OCI labels) and the
      deployment docs (docs/deployment.md's install walk-through, k8s/ rules and
      Pushgateway URL)

The pass/fail counts are appended to FILE as "PASSED FAILED".
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

# Kinds whose schema is a CRD that kubernetes-validate does not ship. They are
# skipped by name, never because a schema happened to be missing.
CRD_KINDS = {"PrometheusRule"}

RELEASE = "stripe-reconciler"
CONTAINER = "stripe-reconciler"


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print(f"ok - {what}")
        else:
            self.failed += 1
            print(f"not ok - {what}" + (f": {detail}" if detail else ""))
        return cond

    def equal(self, actual, expected, what):
        return self.check(actual == expected, what, f"expected {expected!r}, got {actual!r}")

    def write(self, path):
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{self.passed} {self.failed}\n")


# ---------------------------------------------------------------- validate


def cmd_versions(args):
    """The Kubernetes minors from Chart.yaml's kubeVersion lower bound to the newest schema shipped."""
    import re
    import kubernetes_validate  # from the venv

    chart = yaml.safe_load((Path(args.chart) / "Chart.yaml").read_text(encoding="utf-8"))
    m = re.fullmatch(r">=\s*1\.(\d+)\.\d+(-0)?", chart.get("kubeVersion", "").strip())
    if not m:
        print(f"Chart.yaml kubeVersion {chart.get('kubeVersion')!r} is not '>=1.N.0-0'", file=sys.stderr)
        return 1
    schemas = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    minors = sorted({int(v.group(1)) for p in schemas.iterdir()
                     if (v := re.fullmatch(r"v1\.(\d+)\.0-local-strict", p.name))})
    claimed = [n for n in minors if n >= int(m.group(1))]
    if not claimed or claimed[0] != int(m.group(1)):
        print(f"kubernetes-validate has no schema for the chart's minimum 1.{m.group(1)}", file=sys.stderr)
        return 1
    for n in claimed:
        print(f"1.{n}.0")
    return 0


def cmd_validate(args):
    import kubernetes_validate  # from the venv, next to PyYAML

    r = Results()
    for name in args.manifests:
        with open(name, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        r.check(len(docs) > 0, f"{name}: has documents")
        for doc in docs:
            kind = doc.get("kind")
            ident = f"{name}: {kind}/{doc.get('metadata', {}).get('name')}"
            if kind in CRD_KINDS:
                print(f"skip - {ident} (CRD, no schema in kubernetes-validate)")
                continue
            bad = []
            for version in args.k8s_version:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except Exception as e:  # ValidationError, SchemaNotFoundError, ...
                    bad.append(f"{version}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            r.check(not bad, f"{ident} valid for Kubernetes {', '.join(v.rsplit('.', 1)[0] for v in args.k8s_version)} (strict)",
                    "; ".join(bad))
    r.write(args.counts)
    return 0 if r.failed == 0 else 1


# ---------------------------------------------------------------- test


class Chart:
    def __init__(self, helm, chart):
        self.helm = helm
        self.chart = Path(chart)

    def run(self, values=None, sets=()):
        cmd = [self.helm, "template", RELEASE, str(self.chart)]
        if values:
            cmd += ["--values", str(self.chart / "ci" / values)]
        for s in sets:
            cmd += list(s) if isinstance(s, tuple) else ["--set", s]
        return subprocess.run(cmd, capture_output=True, text=True, check=False)

    def render(self, values=None, sets=()):
        p = self.run(values, sets)
        if p.returncode != 0:
            raise RuntimeError(f"helm template failed ({values}, {sets}): {p.stderr}")
        return Docs([d for d in yaml.safe_load_all(p.stdout) if d])


class Docs(list):
    def kind(self, kind, name=None):
        return [d for d in self if d["kind"] == kind
                and (name is None or d["metadata"]["name"] == name)]

    def one(self, kind, name=None):
        found = self.kind(kind, name)
        if len(found) != 1:
            raise AssertionError(f"expected one {kind} {name or ''}, found {len(found)}")
        return found[0]


def pod_spec(workload):
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return workload["spec"]["template"]["spec"]


def job_spec(workload):
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]
    return workload["spec"]


def container(workload):
    cs = pod_spec(workload)["containers"]
    assert len(cs) == 1, cs
    return cs[0]


def env_map(workload):
    return {e["name"]: e for e in container(workload).get("env", [])}


def check_hardening(r, w, label):
    """The restricted securityContext, Never, podFailurePolicy, no token."""
    pod = pod_spec(w)
    c = container(w)
    r.equal(pod.get("restartPolicy"), "Never", f"{label}: restartPolicy Never")
    r.equal(pod.get("automountServiceAccountToken"), False, f"{label}: pod automountServiceAccountToken false")
    psc = pod.get("securityContext", {})
    r.equal(psc.get("runAsNonRoot"), True, f"{label}: pod runAsNonRoot")
    r.equal(psc.get("runAsUser"), 65532, f"{label}: pod runAsUser 65532")
    r.equal(psc.get("runAsGroup"), 65532, f"{label}: pod runAsGroup 65532")
    r.equal(psc.get("fsGroup"), 65532, f"{label}: pod fsGroup 65532")
    r.equal(psc.get("seccompProfile", {}).get("type"), "RuntimeDefault", f"{label}: seccomp RuntimeDefault")
    csc = c.get("securityContext", {})
    r.equal(csc.get("allowPrivilegeEscalation"), False, f"{label}: allowPrivilegeEscalation false")
    r.equal(csc.get("readOnlyRootFilesystem"), True, f"{label}: readOnlyRootFilesystem true")
    r.equal(csc.get("capabilities", {}).get("drop"), ["ALL"], f"{label}: capabilities drop ALL")
    r.check("command" not in c, f"{label}: image ENTRYPOINT kept (no command)")
    rules = job_spec(w).get("podFailurePolicy", {}).get("rules", [])
    fail = [x for x in rules if x.get("action") == "FailJob" and "onExitCodes" in x]
    r.check(len(fail) == 1, f"{label}: one FailJob onExitCodes rule", str(rules))
    if fail:
        oec = fail[0]["onExitCodes"]
        r.equal(oec.get("operator"), "In", f"{label}: FailJob operator In")
        r.equal(sorted(oec.get("values", [])), [75, 78], f"{label}: FailJob on exit codes 75 and 78")
        r.equal(oec.get("containerName"), c["name"], f"{label}: FailJob rule names the container")
    ignore = [x for x in rules if x.get("action") == "Ignore"]
    r.check(any({"type": "DisruptionTarget"} in [{"type": p.get("type")} for p in x.get("onPodConditions", [])]
                for x in ignore), f"{label}: Ignore on DisruptionTarget", str(rules))


def check_secret_ref(r, w, label, secret, db_key, stripe_key):
    env = env_map(w)
    db = env.get("DATABASE_URL", {}).get("valueFrom", {}).get("secretKeyRef", {})
    r.equal((db.get("name"), db.get("key")), (secret, db_key), f"{label}: DATABASE_URL from Secret {secret}/{db_key}")
    if stripe_key is None:
        r.check("STRIPE_API_KEY" not in env, f"{label}: no STRIPE_API_KEY (least privilege)")
    else:
        sk = env.get("STRIPE_API_KEY", {}).get("valueFrom", {}).get("secretKeyRef", {})
        r.equal((sk.get("name"), sk.get("key")), (secret, stripe_key),
                f"{label}: STRIPE_API_KEY from Secret {secret}/{stripe_key}")


def hook_of(doc):
    a = doc["metadata"].get("annotations", {}) or {}
    return (set(filter(None, a.get("helm.sh/hook", "").split(","))),
            int(a.get("helm.sh/hook-weight", "0")),
            set(filter(None, a.get("helm.sh/hook-delete-policy", "").split(","))))


def test_default(r, chart):
    d = chart.render("default-values.yaml")
    cj = d.one("CronJob", RELEASE)
    label = "default/CronJob"
    r.equal(cj["spec"].get("concurrencyPolicy"), "Forbid", f"{label}: concurrencyPolicy Forbid")
    r.equal(cj["spec"].get("timeZone"), "UTC", f"{label}: timeZone UTC")
    r.equal(cj["spec"].get("suspend"), False, f"{label}: suspend false")
    r.equal(cj["spec"].get("schedule"), "*/10 * * * *", f"{label}: schedule")
    for k, v in [("startingDeadlineSeconds", 300), ("successfulJobsHistoryLimit", 3),
                 ("failedJobsHistoryLimit", 3)]:
        r.equal(cj["spec"].get(k), v, f"{label}: {k} {v}")
    js = job_spec(cj)
    for k, v in [("activeDeadlineSeconds", 540), ("backoffLimit", 0), ("ttlSecondsAfterFinished", 86400)]:
        r.equal(js.get(k), v, f"{label}: jobTemplate {k} {v}")
    r.equal(pod_spec(cj).get("activeDeadlineSeconds"), 540, f"{label}: one attempt, whose pod gets the whole 540 s")
    r.equal(env_map(cj).get("RECONCILER_RUN_DEADLINE_SECONDS", {}).get("value"), "480",
            f"{label}: RECONCILER_RUN_DEADLINE_SECONDS = the pod's 540 s less 60")
    r.equal(container(cj).get("args"), ["run"], f"{label}: args [run]")
    r.equal(container(cj).get("image"), "stripe-reconciler:0.1.0", f"{label}: image tag defaults to appVersion")
    check_hardening(r, cj, label)
    res = container(cj).get("resources", {})
    r.equal(res.get("requests"), {"cpu": "50m", "memory": "64Mi"}, f"{label}: requests 50m/64Mi")
    r.equal(res.get("limits"), {"memory": "128Mi"}, f"{label}: memory limit 128Mi")

    sa = d.one("ServiceAccount", RELEASE)
    r.equal(sa.get("automountServiceAccountToken"), False, "default/ServiceAccount: automountServiceAccountToken false")
    r.equal(pod_spec(cj).get("serviceAccountName"), sa["metadata"]["name"], f"{label}: runs as the chart's ServiceAccount")

    cm = d.one("ConfigMap", RELEASE)
    expected = {
        "STRIPE_API_BASE": "https://api.stripe.com", "RECONCILER_JOB": "payments-vs-stripe",
        "RECONCILER_BATCHES_PER_RUN": "auto",
        "RECONCILER_TARGET_CYCLE_SECONDS": "86400", "RECONCILER_SCHEDULE_INTERVAL_SECONDS": "600",
        "RECONCILER_GRACE_SECONDS": "600", "RECONCILER_RATE_LIMIT_RPS": "10",
        "RECONCILER_MAX_IN_FLIGHT": "8", "RECONCILER_HTTP_TIMEOUT_SECONDS": "10",
        "RECONCILER_LOG_FORMAT": "json",
        "RECONCILER_READ_MODE": "list", "RECONCILER_LIST_WINDOW_SLACK_SECONDS": "3600",
        "RECONCILER_LIST_MAX_PAGES": "auto",
        "RECONCILER_AMOUNT_UNIT": "minor", "RECONCILER_TIMESTAMP_ZONE": "UTC",
        "RECONCILER_LOCAL_STATUSES": "pending=pending;paid=paid;failed=failed",
        "RECONCILER_OUTBOX_TABLE": "outbox",
        "RECONCILER_OUTBOX_SHAPE": "reconciler",
        # Whole numbers as written (Helm would print 1209600 as 1.2096e+06).
        "RECONCILER_AUTH_EXPIRY_WARN_SECONDS": "432000",
        "RECONCILER_PROCESSING_MAX_SECONDS": "1209600",
        "RECONCILER_ABANDONED_AFTER_SECONDS": "0", "RECONCILER_UNVERIFIABLE_CYCLES": "3",
        "RECONCILER_EVENTS_LOOKBACK_SECONDS": "86400", "RECONCILER_EVENTS_MAX_PAGES": "100",
        "RECONCILER_EVENTS_ACCOUNT_ACTIVE_SECONDS": "2592000",
    }
    r.equal(cm.get("data"), expected, "default/ConfigMap: DESIGN.md defaults, no PUSHGATEWAY_URL when empty")
    r.equal(container(cj).get("envFrom"), [{"configMapRef": {"name": RELEASE}}], f"{label}: envFrom the ConfigMap")

    secret = d.one("Secret", RELEASE)
    sname = secret["metadata"]["name"]
    r.equal(sorted(secret.get("stringData", {})), ["DATABASE_URL", "STRIPE_API_KEY"], "default/Secret: both keys")
    r.equal(secret["stringData"]["STRIPE_API_KEY"], "rk_test_placeholder", "default/Secret: value from secret.stripeApiKey")
    check_secret_ref(r, cj, label, sname, "DATABASE_URL", "STRIPE_API_KEY")

    ann = pod_spec_annotations(cj)
    r.check(len(ann.get("checksum/config", "")) == 64, f"{label}: checksum/config annotation", str(ann))
    r.check(len(ann.get("checksum/secret", "")) == 64, f"{label}: checksum/secret annotation (chart-managed Secret)")

    mig = d.one("Job", f"{RELEASE}-migrate")
    hooks, weight, policy = hook_of(mig)
    r.equal(hooks, {"pre-install", "pre-upgrade"}, "default/migrate Job: pre-install,pre-upgrade hook")
    r.equal(policy, {"before-hook-creation", "hook-succeeded"}, "default/migrate Job: hook-delete-policy")
    r.equal(container(mig).get("args"), ["migrate"], "default/migrate Job: args [migrate]")
    r.check("envFrom" not in container(mig), "default/migrate Job: no ConfigMap dependency (not created before hooks)")
    check_hardening(r, mig, "default/migrate Job")
    # The release's ServiceAccount and Secret are ordinary objects; the
    # migration Job has hook-scoped copies created before it.
    for obj in (secret, sa):
        r.equal(hook_of(obj)[0], set(), f"default/{obj['kind']} {obj['metadata']['name']}: an ordinary release object, not a hook")
    msecret = d.one("Secret", f"{RELEASE}-migrate")
    msa = d.one("ServiceAccount", f"{RELEASE}-migrate")
    check_secret_ref(r, mig, "default/migrate Job", f"{RELEASE}-migrate", "DATABASE_URL", None)
    r.equal(pod_spec(mig).get("serviceAccountName"), f"{RELEASE}-migrate", "default/migrate Job: runs as the hook ServiceAccount")
    r.equal(sorted(msecret.get("stringData", {})), ["DATABASE_URL"], "default/migrate Secret: DATABASE_URL only")
    for pre in (msecret, msa):
        ph, pw, pp = hook_of(pre)
        what = f"default/{pre['kind']} {pre['metadata']['name']}: hook created before the migration Job"
        r.check(ph == {"pre-install", "pre-upgrade"} and pw < weight, what, f"{ph} weight {pw} vs {weight}")
        r.equal(pp, {"before-hook-creation", "hook-succeeded"}, f"default/{pre['kind']}-migrate: deleted once the hooks succeeded")

    r.check(not d.kind("CronJob", f"{RELEASE}-repair"), "default: no repair CronJob")
    r.check(not d.kind("PrometheusRule"), "default: no PrometheusRule")
    r.check(not d.kind("ConfigMap", f"{RELEASE}-dashboard"), "default: no dashboard ConfigMap")


def pod_spec_annotations(w):
    return (w["spec"]["jobTemplate"]["spec"]["template"]["metadata"].get("annotations") or {})


def test_existing_secret(r, chart):
    d = chart.render("existing-secret-values.yaml")
    label = "existing-secret"
    r.check(not d.kind("Secret"), f"{label}: the chart creates no Secret")
    cj = d.one("CronJob", RELEASE)
    check_secret_ref(r, cj, f"{label}/CronJob", "payments-reconciler-credentials",
                     "database-url", "stripe-restricted-key")
    check_secret_ref(r, d.one("Job", f"{RELEASE}-migrate"), f"{label}/migrate Job",
                     "payments-reconciler-credentials", "database-url", None)
    ann = pod_spec_annotations(cj)
    r.check("checksum/config" in ann and "checksum/secret" not in ann,
            f"{label}: checksum/config only", str(ann))
    r.equal(ann.get("example.com/team"), "payments", f"{label}: podAnnotations")
    r.equal(d.one("ConfigMap", RELEASE)["data"].get("PUSHGATEWAY_URL"), "http://pushgateway.monitoring:9091",
            f"{label}: PUSHGATEWAY_URL when set")
    r.equal(d.one("ConfigMap", RELEASE)["data"].get("RECONCILER_BATCH_SIZE"), "500", f"{label}: batchSize 500")
    r.equal(d.one("ConfigMap", RELEASE)["data"].get("RECONCILER_BATCHES_PER_RUN"), "20",
            f"{label}: a number of batches per run is passed as that number")
    r.equal(cj["spec"].get("timeZone"), "Europe/Paris", f"{label}: timeZone")
    pod = pod_spec(cj)
    r.equal(container(cj)["image"], "registry.example.com/payments/stripe-reconciler@sha256:" + "0" * 64,
            f"{label}: image by digest")
    r.equal(pod.get("imagePullSecrets"), [{"name": "regcred"}], f"{label}: imagePullSecrets")
    r.equal(pod.get("nodeSelector"), {"kubernetes.io/os": "linux"}, f"{label}: nodeSelector")
    r.equal(len(pod.get("tolerations", [])), 1, f"{label}: tolerations")
    r.check("nodeAffinity" in pod.get("affinity", {}), f"{label}: affinity")
    r.equal(env_map(cj).get("RUST_LOG", {}).get("value"), "stripe_reconciler=debug,info", f"{label}: extraEnv")
    r.equal(cj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"].get("team"), "payments",
            f"{label}: podLabels")
    # Notifications (docs/review.md): the URL from the Secret, never the ConfigMap.
    notify = env_map(cj).get("RECONCILER_NOTIFY_URL", {}).get("valueFrom", {}).get("secretKeyRef", {})
    r.equal((notify.get("name"), notify.get("key")), ("payments-reconciler-credentials", "slack-webhook-url"),
            f"{label}: RECONCILER_NOTIFY_URL from the Secret's notifyUrlKey")
    data = d.one("ConfigMap", RELEASE)["data"]
    r.check("RECONCILER_NOTIFY_URL" not in data, f"{label}: the notification URL is not in the ConfigMap")
    r.equal((data.get("RECONCILER_NOTIFY_FORMAT"), data.get("RECONCILER_NOTIFY_KINDS")), ("slack", "money"),
            f"{label}: notification format and kinds with a URL")
    repair = [w for w in d.kind("CronJob") if "repair" in w["metadata"]["name"]]
    r.check(all("RECONCILER_NOTIFY_URL" not in env_map(w) for w in repair),
            f"{label}: the repair CronJob gets no notification URL")


def test_alerts_dashboard(r, chart):
    d = chart.render("alerts-dashboard-values.yaml")
    label = "alerts-dashboard"
    pr = d.one("PrometheusRule")
    alerts = yaml.safe_load((chart.chart / "files" / "alerts.yaml").read_text(encoding="utf-8"))
    names = lambda groups, keep=lambda a: True: [(g["name"], [x.get("alert") for x in g["rules"] if keep(x.get("alert"))])
                                                  for g in groups]
    r.equal(names(pr["spec"].get("groups", [])), names(alerts["groups"], lambda a: a != "StripeReconcilerAbandoned"),
            f"{label}: PrometheusRule has the rules of files/alerts.yaml but the ones off by default")
    r.check("${" not in json.dumps(pr["spec"]), f"{label}: every placeholder of files/alerts.yaml replaced")
    r.equal(pr["metadata"]["labels"].get("release"), "kube-prometheus-stack", f"{label}: PrometheusRule labels")
    dash = d.one("ConfigMap", f"{RELEASE}-dashboard")
    r.equal(dash["metadata"]["labels"].get("grafana_dashboard"), "1", f"{label}: grafana_dashboard label")
    r.equal(dash["metadata"].get("annotations", {}).get("grafana_folder"), "Payments", f"{label}: dashboard annotations")
    expected = json.loads((chart.chart / "files" / "dashboard.json").read_text(encoding="utf-8"))
    data = dash.get("data", {})
    r.check(len(data) == 1 and json.loads(next(iter(data.values()))) == expected,
            f"{label}: dashboard ConfigMap carries files/dashboard.json")


def test_repair(r, chart):
    d = chart.render("repair-values.yaml")
    label = "repair"
    rep = d.one("CronJob", f"{RELEASE}-repair")
    r.equal(rep["spec"].get("concurrencyPolicy"), "Forbid", f"{label}/CronJob: concurrencyPolicy Forbid")
    r.equal(rep["spec"].get("schedule"), "*/5 * * * *", f"{label}/CronJob: schedule")
    r.equal(container(rep).get("args"), ["repair"], f"{label}/CronJob: args [repair]")
    check_hardening(r, rep, f"{label}/CronJob")
    check_secret_ref(r, rep, f"{label}/CronJob", RELEASE, "DATABASE_URL", None)
    r.equal(len(d.kind("CronJob")), 3, f"{label}: reconcile, events and repair CronJobs")
    r.check(not d.kind("Job"), f"{label}: migration.enabled=false renders no migration Job")
    secret = d.one("Secret")
    r.check(not hook_of(secret)[0], f"{label}: without the migration hook the Secret is an ordinary resource")
    r.equal(pod_spec(rep).get("activeDeadlineSeconds"), 70, f"{label}/CronJob: 3 attempts share 240 s less 30 s back-off")
    r.check("RECONCILER_RUN_DEADLINE_SECONDS" not in env_map(rep), f"{label}/CronJob: no run deadline for repair")


def test_events(r, chart):
    d = chart.render("default-values.yaml")
    label = "events"
    ev = d.one("CronJob", f"{RELEASE}-events")
    r.equal(ev["spec"].get("concurrencyPolicy"), "Forbid", f"{label}/CronJob: concurrencyPolicy Forbid")
    r.equal(ev["spec"].get("schedule"), "*/5 * * * *", f"{label}/CronJob: every 5 minutes by default")
    r.equal(container(ev).get("args"), ["events"], f"{label}/CronJob: args [events]")
    r.equal(container(ev).get("envFrom"), [{"configMapRef": {"name": RELEASE}}], f"{label}/CronJob: envFrom the ConfigMap")
    check_hardening(r, ev, f"{label}/CronJob")
    env = env_map(ev)
    r.check("STRIPE_API_KEY" in env, f"{label}/CronJob: gets STRIPE_API_KEY")
    off = chart.render("default-values.yaml", ["events.enabled=false", "prometheusRule.enabled=true"])
    r.check(not [c for c in off.kind("CronJob") if c["metadata"]["name"].endswith("-events")],
            f"{label}: events.enabled=false renders no events CronJob")
    off_rules = [x.get("alert") for g in off.one("PrometheusRule")["spec"]["groups"] for x in g["rules"]]
    r.check(not [a for a in off_rules if a.startswith("StripeReconcilerEvents")],
            f"{label}: events.enabled=false drops the events alerts")
    on = chart.render("default-values.yaml", ["prometheusRule.enabled=true", "events.orphanMetadataKey=shop_order"])
    on_rules = [x.get("alert") for g in on.one("PrometheusRule")["spec"]["groups"] for x in g["rules"]]
    r.check("StripeReconcilerEventsLagHigh" in on_rules and "StripeReconcilerEventsNotRunning" in on_rules,
            f"{label}: the events alerts are rendered by default")
    r.equal(on.one("ConfigMap", RELEASE)["data"].get("RECONCILER_ORPHAN_METADATA_KEY"), "shop_order",
            f"{label}: events.orphanMetadataKey -> RECONCILER_ORPHAN_METADATA_KEY")


def test_subscriptions(r, chart):
    label = "subscriptions"
    d = chart.render("subscriptions-values.yaml")
    sub = d.one("CronJob", f"{RELEASE}-subscriptions")
    r.equal(sub["spec"].get("concurrencyPolicy"), "Forbid", f"{label}/CronJob: concurrencyPolicy Forbid")
    r.equal(sub["spec"].get("schedule"), "7,37 * * * *", f"{label}/CronJob: subscriptions.schedule")
    r.equal(container(sub).get("args"), ["run", "--object", "subscriptions"],
            f"{label}/CronJob: args [run --object subscriptions]")
    r.equal(container(sub).get("envFrom"), [{"configMapRef": {"name": RELEASE}}], f"{label}/CronJob: envFrom the ConfigMap")
    check_hardening(r, sub, f"{label}/CronJob")
    env = env_map(sub)
    r.check("STRIPE_API_KEY" in env, f"{label}/CronJob: gets STRIPE_API_KEY")
    r.check("RECONCILER_RUN_DEADLINE_SECONDS" in env, f"{label}/CronJob: a run deadline")
    r.equal(len(d.kind("CronJob")), 4, f"{label}: reconcile, events, subscriptions and repair CronJobs")
    data = d.one("ConfigMap", RELEASE)["data"]
    for var, value in [
        ("RECONCILER_SUBSCRIPTIONS_TABLE", "public.subscriptions"),
        ("RECONCILER_SUBSCRIPTION_ID_COLUMN", "stripe_id"),
        ("RECONCILER_SUBSCRIPTION_STATUS_COLUMN", "stripe_status"),
        ("RECONCILER_SUBSCRIPTION_ENDS_AT_COLUMN", "ends_at"),
        ("RECONCILER_SUBSCRIPTION_PRICE_COLUMN", "stripe_price"),
        ("RECONCILER_SUBSCRIPTION_QUANTITY_COLUMN", "quantity"),
        ("RECONCILER_SUBSCRIPTION_CREATED_COLUMN", "created_at"),
        ("RECONCILER_SUBSCRIPTION_UPDATED_COLUMN", "updated_at"),
        ("RECONCILER_PAST_DUE_ACCESS", "revoke"),
    ]:
        r.equal(data.get(var), value, f"{label}: ConfigMap {var}")
    r.check(data.get("RECONCILER_SUBSCRIPTION_STATUSES", "").startswith("active=active;"),
            f"{label}: ConfigMap RECONCILER_SUBSCRIPTION_STATUSES")
    for var in ("RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN", "RECONCILER_SUBSCRIPTION_ACCOUNT_COLUMN"):
        r.check(var not in data, f"{label}: an empty column value sets no {var}")
    # Off by default: no CronJob and no variable (the binary refuses one without the table).
    off = chart.render("default-values.yaml")
    r.check(not [c for c in off.kind("CronJob") if c["metadata"]["name"].endswith("-subscriptions")],
            f"{label}: disabled by default, no subscriptions CronJob")
    r.check(not [k for k in off.one("ConfigMap", RELEASE)["data"] if "SUBSCRIPTION" in k or k == "RECONCILER_PAST_DUE_ACCESS"],
            f"{label}: disabled by default, no RECONCILER_SUBSCRIPTION* variable")
    users = chart.render("subscriptions-values.yaml", [
        "subscriptions.table=users", "subscriptions.statusColumn=none", "subscriptions.statuses=",
        "subscriptions.endsAtColumn=", "subscriptions.periodEndColumn=plan_renews_at"])
    udata = users.one("ConfigMap", RELEASE)["data"]
    r.equal((udata.get("RECONCILER_SUBSCRIPTION_STATUS_COLUMN"), udata.get("RECONCILER_SUBSCRIPTION_PERIOD_END_COLUMN")),
            ("none", "plan_renews_at"), f"{label}: a status-less users table")
    fails(r, chart, ["subscriptions.enabled=true", "existingSecret.name=creds"], "needs subscriptions.table",
          f"{label}: enabled without a table fails (clear message)")
    fails(r, chart, ["subscriptions.statusColumn=none", "subscriptions.statuses=", "subscriptions.endsAtColumn="],
          "needs subscriptions.endsAtColumn or subscriptions.periodEndColumn",
          f"{label}: statusColumn none without an end column fails", values="subscriptions-values.yaml")
    fails(r, chart, ["subscriptions.statusColumn=none"], "needs a status column",
          f"{label}: statuses without a status column fails", values="subscriptions-values.yaml")
    for sets, what in [
        (["subscriptions.pastDueAccess=deny"], "pastDueAccess outside grant/revoke"),
        (["subscriptions.table=a.b.c"], "a table name with two dots"),
        (["subscriptions.priceColumn=price-id"], "a price column that is not a column name"),
        (["subscriptions.statuses=cancelled=canceled"], "a status map keyed by a word Stripe does not use"),
        (["subscriptions.bogus=1"], "an unknown key under subscriptions"),
    ]:
        fails(r, chart, ["existingSecret.name=creds"] + sets, "schema", f"{label}: schema rejects {what}")
    rules = chart.render("subscriptions-values.yaml", ["prometheusRule.enabled=true"])
    locked = rule_of(rules, "StripeReconcilerCustomerLockedOut")
    r.equal(locked["labels"].get("severity"), "critical", f"{label}: StripeReconcilerCustomerLockedOut is critical")
    r.check('kind="subscription_paid_but_blocked"' in locked["expr"],
            f"{label}: StripeReconcilerCustomerLockedOut counts subscription_paid_but_blocked")
    money = rule_of(rules, "StripeReconcilerMoneyAtRisk")["expr"]
    for kind in ("subscription_missed_cancel", "subscription_access_without_payment", "subscription_missing_locally"):
        r.check(kind in money, f"{label}: StripeReconcilerMoneyAtRisk covers {kind}")
    for kind in ("subscription_paid_but_blocked", "subscription_status_mismatch", "subscription_missing_externally"):
        r.check(kind not in money, f"{label}: StripeReconcilerMoneyAtRisk leaves {kind} out")


def test_partition(r, chart):
    label = "partition"
    d = chart.render("partition-values.yaml")
    data = d.one("ConfigMap", RELEASE)["data"]
    r.equal(data.get("RECONCILER_PARTITION_COLUMN"), "legal_entity", f"{label}: partitionColumn -> RECONCILER_PARTITION_COLUMN")
    r.equal(data.get("RECONCILER_PARTITION_VALUE"), "eu", f"{label}: partitionValue -> RECONCILER_PARTITION_VALUE")
    r.equal(data.get("RECONCILER_JOB"), "payments-eu", f"{label}: the release's own job")
    # The migration hook runs before the ConfigMap exists: it must get what
    # `migrate` reads, or it never adds the partition's index (and `run`
    # refuses to start without it) nor checks the configured outbox.
    mig = env_map(d.one("Job", f"{RELEASE}-migrate"))
    for k, v in {"RECONCILER_JOB": "payments-eu", "RECONCILER_PARTITION_COLUMN": "legal_entity",
                 "RECONCILER_PARTITION_VALUE": "eu", "RECONCILER_OUTBOX_TABLE": data.get("RECONCILER_OUTBOX_TABLE"),
                 "RECONCILER_OUTBOX_SHAPE": data.get("RECONCILER_OUTBOX_SHAPE")}.items():
        r.equal(mig.get(k, {}).get("value"), v, f"{label}/migrate Job: {k} as the release's (partition index, outbox)")
    dmig = env_map(chart.render("default-values.yaml").one("Job", f"{RELEASE}-migrate"))
    r.check("RECONCILER_PARTITION_COLUMN" not in dmig, f"{label}: no partition for the default migrate Job")
    r.equal(dmig.get("RECONCILER_OUTBOX_TABLE", {}).get("value"), "outbox", "default/migrate Job: RECONCILER_OUTBOX_TABLE")
    # `migrate` checks the zone and copies payments.created_at in it (issue 30).
    r.equal(dmig.get("RECONCILER_TIMESTAMP_ZONE", {}).get("value"), "UTC", "default/migrate Job: RECONCILER_TIMESTAMP_ZONE")
    num = chart.render("partition-values.yaml", ("config.partitionValue=42",))
    r.equal(num.one("ConfigMap", RELEASE)["data"].get("RECONCILER_PARTITION_VALUE"), "42",
            f"{label}: a whole-number partitionValue (an integer column) is accepted and passed as text")
    default = chart.render("default-values.yaml").one("ConfigMap", RELEASE)["data"]
    r.check("RECONCILER_PARTITION_COLUMN" not in default and "RECONCILER_PARTITION_VALUE" not in default,
            f"{label}: no partition by default")
    base = ("existingSecret.name=creds", "config.job=payments-eu")
    fails(r, chart, base + ("config.partitionColumn=legal_entity",), "needs config.partitionValue",
          f"{label}: a column without a value is refused")
    fails(r, chart, base + ("config.partitionValue=eu",), "needs config.partitionColumn",
          f"{label}: a value without a column is refused")
    fails(r, chart, ("existingSecret.name=creds", "config.partitionColumn=legal_entity", "config.partitionValue=eu"),
          "a config.job of its own", f"{label}: the default job with a partition is refused")
    fails(r, chart, base + ("config.partitionColumn=entity;drop", "config.partitionValue=eu"), "schema",
          f"{label}: schema rejects a partitionColumn that is not a column name")


def test_failures(r, chart):
    def fails(sets, needle, what, values=None):
        p = chart.run(values, sets)
        r.check(p.returncode != 0 and needle in p.stderr, what,
                f"rc={p.returncode} stderr={p.stderr.strip()[:300]}")

    fails((), "no credentials", "fails without credentials (clear message)")
    fails(("secret.databaseUrl=postgres://u@h/db",), "secret.stripeApiKey is required",
          "fails with only secret.databaseUrl")
    fails(("existingSecret.name=creds",), "not both", "fails with both existingSecret and secret.*",
          values="default-values.yaml")
    base = ("existingSecret.name=creds",)
    schema_cases = [
        (("unknownKey=1",), "unknown top-level key"),
        (("config.unknown=1",), "unknown nested key"),
        (("schedule=5",), "schedule as a number"),
        ((("--set-string", "config.batchSize=200"),), "batchSize as a string"),
        (("config.batchSize=0",), "batchSize below 1"),
        (("config.maxInFlight=101",), "maxInFlight above 100"),
        (("config.logFormat=xml",), "logFormat outside the enum"),
        (("image.pullPolicy=Sometimes",), "pullPolicy outside the enum"),
        (("podSecurityContext.bogus=1",), "unknown key in podSecurityContext"),
        (("repair.enabled=yes-please",), "repair.enabled as a string"),
        (("config.batchesPerRun=lots",), "batchesPerRun neither auto nor a number"),
        (("config.listMaxPages=0",), "listMaxPages below 1"),
        (("config.targetCycleSeconds=30",), "targetCycleSeconds below 60"),
        (("config.scheduleIntervalSeconds=30",), "scheduleIntervalSeconds below 60"),
        (("config.accountColumn=acct-id",), "accountColumn that is not a column name"),
    ]
    for sets, what in schema_cases:
        fails(base + sets, "schema", f"schema rejects {what}")


def test_misc(r, chart):
    d = chart.render(sets=("existingSecret.name=creds", "timeZone=", "serviceAccount.create=false",
                           "serviceAccount.name=shared-sa"))
    cj = d.one("CronJob", RELEASE)
    r.check("timeZone" not in cj["spec"], "timeZone omitted when empty")
    r.check(not d.kind("ServiceAccount"), "serviceAccount.create=false renders no ServiceAccount")
    r.equal(pod_spec(cj).get("serviceAccountName"), "shared-sa", "serviceAccount.name is used")
    r.equal(pod_spec(cj).get("automountServiceAccountToken"), False, "token not mounted with a foreign ServiceAccount")
    connect = chart.render(sets=("existingSecret.name=creds", "config.accountColumn=stripe_account"))
    r.equal(connect.one("ConfigMap", RELEASE).get("data", {}).get("RECONCILER_ACCOUNT_COLUMN"), "stripe_account",
            "config.accountColumn sets RECONCILER_ACCOUNT_COLUMN (Connect)")
    sessions = chart.render(sets=("existingSecret.name=creds", "config.checkoutSessionColumn=checkout_session_id"))
    r.equal(sessions.one("ConfigMap", RELEASE).get("data", {}).get("RECONCILER_CHECKOUT_SESSION_COLUMN"),
            "checkout_session_id", "config.checkoutSessionColumn sets RECONCILER_CHECKOUT_SESSION_COLUMN")
    r.check("RECONCILER_CHECKOUT_SESSION_COLUMN" not in connect.one("ConfigMap", RELEASE).get("data", {}),
            "no RECONCILER_CHECKOUT_SESSION_COLUMN by default (sessions not read)")
    fails(r, chart, ("existingSecret.name=creds", "config.checkoutSessionColumn=cs;drop"), "schema",
          "schema rejects a checkoutSessionColumn that is not a column name")


def ordinary(docs):
    """The release's ordinary objects (Helm keeps them across upgrades), by kind/name."""
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if not hook_of(d)[0]}


def test_migration_switch(r, chart):
    """Switching migration.enabled on an existing release changes no ordinary object."""
    for base in (("secret.databaseUrl=postgres://u:p@db/payments", "secret.stripeApiKey=rk_test_x"),
                 ("existingSecret.name=creds",)):
        on = chart.render(sets=base + ("migration.enabled=true",))
        off = chart.render(sets=base + ("migration.enabled=false",))
        what = "chart Secret" if len(base) == 2 else "existingSecret"
        r.equal(sorted(ordinary(on)), sorted(ordinary(off)),
                f"migration.enabled true/false ({what}): the same ordinary objects")
        same = all(ordinary(on)[k] == ordinary(off)[k] for k in ordinary(on) if k in ordinary(off))
        r.check(same, f"migration.enabled true/false ({what}): ordinary objects identical")
        hooks = sorted((d["kind"], d["metadata"]["name"]) for d in on if hook_of(d)[0])
        expected = [("Job", f"{RELEASE}-migrate"), ("ServiceAccount", f"{RELEASE}-migrate")]
        if len(base) == 2:
            expected.append(("Secret", f"{RELEASE}-migrate"))
        r.equal(hooks, sorted(expected), f"migration.enabled=true ({what}): only migration-scoped hooks")
        r.check(not [d for d in off if hook_of(d)[0]], f"migration.enabled=false ({what}): no hooks at all")
    d = chart.render(sets=("existingSecret.name=creds", "serviceAccount.create=false", "serviceAccount.name=shared"))
    mig = d.one("Job", f"{RELEASE}-migrate")
    r.equal(pod_spec(mig).get("serviceAccountName"), "shared", "serviceAccount.create=false: the migration runs as serviceAccount.name")
    r.check(not d.kind("ServiceAccount"), "serviceAccount.create=false: no hook ServiceAccount either")


def fails(r, chart, sets, needle, what, values=None):
    p = chart.run(values, sets)
    r.check(p.returncode != 0 and needle in p.stderr, what, f"rc={p.returncode} stderr={p.stderr.strip()[:300]}")


def test_deadlines(r, chart):
    base = ("existingSecret.name=creds",)
    fails(r, chart, base + ("activeDeadlineSeconds=600",), "shorter than the shortest interval",
          "activeDeadlineSeconds equal to the 10-minute schedule is refused")
    fails(r, chart, base + ("schedule=*/5 * * * *",), "shorter than the shortest interval",
          "activeDeadlineSeconds 540 with a 5-minute schedule is refused")
    fails(r, chart, base + ("schedule=0 9\\,17 * * *", "activeDeadlineSeconds=30000"), "(28800 s)",
          "the shortest gap of a two-times-a-day schedule (8h) bounds the deadline")
    fails(r, chart, base + ("repair.enabled=true", "repair.schedule=*/2 * * * *"), "repair.activeDeadlineSeconds",
          "repair.activeDeadlineSeconds longer than the repair schedule is refused")
    fails(r, chart, base + ("backoffLimit=5",), "per attempt", "a deadline too short for its retries is refused")
    d = chart.render(sets=base + ("schedule=0 */4 * * *", "activeDeadlineSeconds=3000", "backoffLimit=2"))
    cj = d.one("CronJob", RELEASE)
    r.equal(job_spec(cj).get("activeDeadlineSeconds"), 3000, "4-hourly: the Job keeps activeDeadlineSeconds 3000")
    r.equal(pod_spec(cj).get("activeDeadlineSeconds"), 990, "4-hourly, backoffLimit 2: each pod gets (3000 - 10 - 20) / 3 = 990 s")
    r.equal(env_map(cj).get("RECONCILER_RUN_DEADLINE_SECONDS", {}).get("value"), "930",
            "4-hourly, backoffLimit 2: the binary's deadline is the pod's less 60 s")
    chart.render(sets=base + ("schedule=@daily", "activeDeadlineSeconds=7200"))
    r.check(True, "@daily with a 2h deadline renders")


def rule_of(docs, alert, reason=None):
    for g in docs.one("PrometheusRule")["spec"]["groups"]:
        for rule in g["rules"]:
            if rule.get("alert") == alert and (reason is None or rule["labels"].get("reason") == reason):
                return rule
    return None


def test_alert_values(r, chart):
    base = ("existingSecret.name=creds", "prometheusRule.enabled=true")
    p = chart.run(None, base + (("--namespace", "payments"),))
    docs = Docs([d for d in yaml.safe_load_all(p.stdout) if d]) if p.returncode == 0 else Docs()
    r.check(p.returncode == 0, "PrometheusRule renders in namespace payments", p.stderr[:300])
    if p.returncode != 0:
        return
    alerts = [rule for g in docs.one("PrometheusRule")["spec"]["groups"] for rule in g["rules"] if "alert" in rule]
    r.check(all(a["labels"].get("namespace") == "payments" for a in alerts), "every alert carries namespace=payments (the release's)")
    r.check(all(a["annotations"].get("runbook_url") == f"README.md#{a['alert'].lower()}" for a in alerts),
            "every alert has runbook_url README.md#<alert>")
    r.check(rule_of(docs, "StripeReconcilerAbandoned") is None, "StripeReconcilerAbandoned is off by default")
    for alert in ("StripeReconcilerAuthorizationExpiring", "StripeReconcilerStuckProcessing",
                  "StripeReconcilerPersistentlyUnverifiable", "StripeReconcilerMoneyAtRisk"):
        r.check(rule_of(docs, alert) is not None, f"{alert} is on by default")
    r.equal(rule_of(docs, "StripeReconcilerAuthorizationExpiring")["labels"]["severity"], "critical",
            "authorization_expiring is critical")
    r.check("> 10800" in rule_of(docs, "StripeReconcilerNotRunning", "last_success_old")["expr"],
            "NotRunning: 3h for the default 10-minute schedule")
    for sched, deadline, expect in (("0 */4 * * *", 540, 2 * 14400 + 540), ("@daily", 540, 2 * 86400 + 540),
                                    ("0 9 * * 1-5", 540, 2 * 3 * 86400 + 540), ("*/30 * * * *", 540, 10800)):
        d = chart.render(sets=base + (("--set-string", f"schedule={sched}"), f"activeDeadlineSeconds={deadline}"))
        rule = rule_of(d, "StripeReconcilerNotRunning", "never_reported")
        r.equal(rule.get("for"), f"{expect}s", f"NotRunning derived from schedule {sched!r}: {expect} s")
    fails(r, chart, base + ("schedule=0 0 1 * *", "config.scheduleIntervalSeconds=2678400"), "alerts.notRunning.afterSeconds",
          "an unreadable schedule asks for alerts.notRunning.afterSeconds")
    d = chart.render(sets=base + ("schedule=0 0 1 * *", "config.scheduleIntervalSeconds=2678400", "alerts.notRunning.afterSeconds=3000000"))
    r.check("> 3000000" in rule_of(d, "StripeReconcilerNotRunning", "last_success_old")["expr"],
            "alerts.notRunning.afterSeconds is used when set")
    d = chart.render(sets=base + ("alerts.lagHigh.thresholdSeconds=172800", "alerts.lagHigh.for=1h",
                                  "alerts.abandoned.enabled=true", "alerts.namespaceLabel=payments-team",
                                  "alerts.runbookBaseUrl=https://git.example.com/r/blob/main/README.md",
                                  "alerts.moneyAtRisk.enabled=false"))
    lag = rule_of(d, "StripeReconcilerLagHigh")
    r.check("172800" in lag["expr"] and lag["for"] == "1h", "alerts.lagHigh.thresholdSeconds and .for are used")
    r.check(rule_of(d, "StripeReconcilerAbandoned") is not None, "alerts.abandoned.enabled=true adds the rule")
    r.check(rule_of(d, "StripeReconcilerMoneyAtRisk") is None, "alerts.moneyAtRisk.enabled=false drops the rule")
    r.equal(lag["labels"]["namespace"], "payments-team", "alerts.namespaceLabel overrides the namespace label")
    r.equal(lag["annotations"]["runbook_url"], "https://git.example.com/r/blob/main/README.md#stripereconcilerlaghigh",
            "alerts.runbookBaseUrl prefixes runbook_url")
    for sets, what in ((("alerts.lagHigh.for=30 minutes",), "a `for` that is no duration"),
                       (("alerts.lagHigh.severity=page",), "an unknown severity"),
                       (("alerts.stripeUnverifiable.ratio=2",), "an unverifiable ratio above 1"),
                       (("alerts.bogus.enabled=true",), "an unknown alert")):
        fails(r, chart, base + sets, "schema", f"schema rejects {what}")


def test_extra_volumes(r, chart):
    d = chart.render("existing-secret-values.yaml")
    for name in (RELEASE, f"{RELEASE}-migrate"):
        w = d.one("CronJob", name) if name == RELEASE else d.one("Job", name)
        vols = {v["name"]: v for v in pod_spec(w).get("volumes", [])}
        mounts = {m["name"]: m for m in container(w).get("volumeMounts", [])}
        r.equal(vols.get("db-ca", {}).get("secret", {}).get("secretName"), "rds-ca-bundle", f"{name}: extraVolumes")
        r.equal(mounts.get("db-ca", {}).get("mountPath"), "/etc/ssl/db", f"{name}: extraVolumeMounts")
        r.check("tmp" in vols and "tmp" in mounts, f"{name}: the chart's /tmp stays")
    cj = d.one("CronJob", RELEASE)
    r.equal(container(cj).get("envFrom"), [{"configMapRef": {"name": RELEASE}}, {"secretRef": {"name": "pg-ssl", "optional": True}}],
            "envFrom: the chart's ConfigMap first, then envFrom")
    base = ("existingSecret.name=creds",)
    for sets, what in ((("extraVolumes[0].name=x", "extraVolumes[0].hostPath.path=/"), "a hostPath volume"),
                       (("extraVolumes[0].name=x",), "a volume without a source"),
                       (("extraVolumeMounts[0].name=x",), "a mount without mountPath"),
                       (("extraVolumeMounts[0].name=x", "extraVolumeMounts[0].mountPath=etc"), "a relative mountPath"),
                       (("envFrom[0].prefix=X_",), "an envFrom without a source"),
                       (("envFrom[0].secretRef.name=a", "envFrom[0].configMapRef.name=b"), "an envFrom with two sources")):
        fails(r, chart, base + sets, "schema", f"schema rejects {what}")


def test_network_policy(r, chart):
    base = ("existingSecret.name=creds", "networkPolicy.enabled=true")
    fails(r, chart, base, "networkPolicy.postgres.to", "networkPolicy without postgres.to fails with a clear message")
    pg = ("networkPolicy.postgres.to[0].ipBlock.cidr=10.0.5.0/24",)
    d = chart.render(sets=base + pg + ("config.pushgatewayUrl=http://prometheus-pushgateway.monitoring:9091",))
    np = d.one("NetworkPolicy")
    spec = np["spec"]
    r.equal(sorted(spec.get("policyTypes", [])), ["Egress", "Ingress"], "NetworkPolicy: Ingress and Egress")
    r.equal(spec.get("ingress"), [], "NetworkPolicy: no ingress")
    r.equal(spec["podSelector"]["matchLabels"], {"app.kubernetes.io/name": "stripe-reconciler",
                                                 "app.kubernetes.io/instance": RELEASE}, "NetworkPolicy: selects the release's pods")
    ports = [sorted((p["protocol"], p["port"]) for p in e["ports"]) for e in spec["egress"]]
    r.equal(ports, [[("TCP", 53), ("UDP", 53)], [("TCP", 5432)], [("TCP", 443)], [("TCP", 9091)]],
            "NetworkPolicy: egress to DNS, PostgreSQL, Stripe 443, Pushgateway")
    r.equal(spec["egress"][1]["to"], [{"ipBlock": {"cidr": "10.0.5.0/24"}}], "NetworkPolicy: postgres.to")
    d = chart.render(sets=base + pg)
    r.equal(len(d.one("NetworkPolicy")["spec"]["egress"]), 3, "NetworkPolicy: no Pushgateway rule without pushgatewayUrl")
    r.check(not chart.render(sets=("existingSecret.name=creds",)).kind("NetworkPolicy"), "no NetworkPolicy by default")


class UniqueKeyLoader(yaml.SafeLoader):
    pass


def _unique_mapping(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dups = {k for k in keys if keys.count(k) > 1}
    if dups:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {sorted(dups)}", node.start_mark)
    return loader.construct_mapping(node, deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def test_labels(r, chart):
    sets = ("existingSecret.name=creds", "prometheusRule.enabled=true", "dashboard.enabled=true", "repair.enabled=true",
            "networkPolicy.enabled=true", "networkPolicy.postgres.to[0].ipBlock.cidr=10.0.0.0/8",
            "commonLabels.app\\.kubernetes\\.io/part-of=payments", "commonLabels.app\\.kubernetes\\.io/component=x",
            "commonLabels.app\\.kubernetes\\.io/name=evil", "commonLabels.team=payments",
            "podLabels.app\\.kubernetes\\.io/component=y", "podLabels.app\\.kubernetes\\.io/instance=evil",
            "prometheusRule.labels.release=kube-prometheus-stack", "prometheusRule.labels.team=sre",
            "dashboard.labels.team=grafana")
    p = chart.run(None, sets)
    r.check(p.returncode == 0, "renders with labels that repeat the chart's", p.stderr[:300])
    try:
        docs = [d for d in yaml.load_all(p.stdout, Loader=UniqueKeyLoader) if d]
        r.check(True, "no duplicate YAML keys with commonLabels/podLabels repeating chart labels")
    except yaml.YAMLError as e:
        r.check(False, "no duplicate YAML keys with commonLabels/podLabels repeating chart labels", str(e)[:300])
        return
    d = Docs(docs)
    cj = d.one("CronJob", RELEASE)
    meta = cj["metadata"]["labels"]
    r.equal(meta.get("app.kubernetes.io/name"), "stripe-reconciler", "commonLabels cannot override a selector label")
    r.equal(meta.get("app.kubernetes.io/part-of"), "payments", "commonLabels override a non-selector chart label")
    r.equal(meta.get("app.kubernetes.io/component"), "reconcile", "the component label beats commonLabels")
    r.equal(meta.get("team"), "payments", "commonLabels added")
    pl = cj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    r.equal((pl.get("app.kubernetes.io/component"), pl.get("app.kubernetes.io/instance")), ("reconcile", RELEASE),
            "podLabels cannot override the component or selector labels")
    r.equal(d.one("PrometheusRule")["metadata"]["labels"].get("team"), "sre", "prometheusRule.labels beat commonLabels")


def test_kube_versions(r, chart):
    fails(r, chart, ("existingSecret.name=creds", ("--kube-version", "1.26.9")), "kubeVersion",
          "Kubernetes 1.26 is refused (Chart.yaml kubeVersion >=1.27)")


def test_notes(r, chart):
    def notes(*sets):
        cmd = [chart.helm, "install", RELEASE, str(chart.chart), "--dry-run=client", "--namespace", "payments"]
        for x in sets:
            cmd += ["--set", x]
        p = subprocess.run(cmd, capture_output=True, text=True, check=False)
        return p.stdout.split("NOTES:", 1)[-1] if p.returncode == 0 else f"FAILED: {p.stderr}"
    n = notes("existingSecret.name=creds", "prometheusRule.enabled=true", "schedule=0 */4 * * *")
    r.check("StripeReconcilerNotRunning fires 8h9m0s" in n, "NOTES: the NotRunning threshold derived from a 4-hourly schedule", n[-600:])
    r.check("prometheusRule.labels is empty" in n, "NOTES: warns that kube-prometheus-stack ignores rules without its label")
    n = notes("existingSecret.name=creds", "prometheusRule.enabled=true", "prometheusRule.labels.release=kps",
              "alerts.runbookBaseUrl=https://x/README.md")
    # The absence of the warnings counts only when the install rendered the
    # alert section they belong to (a failed render has no warnings either).
    r.check(not n.startswith("FAILED") and "Alert rules: PrometheusRule stripe-reconciler" in n
            and "StripeReconcilerNotRunning fires" in n,
            "NOTES: the alert section renders with prometheusRule.labels and alerts.runbookBaseUrl set", n[-600:])
    r.check("prometheusRule.labels is empty" not in n and "runbookBaseUrl" not in n,
            "NOTES: no label or runbook warning once they are set", n[-600:])
    n = notes("existingSecret.name=creds")
    r.check("prometheusRule.enabled=true" in n, "NOTES: says how to install the rules when they are off")
    r.check("The three numbers you choose" in n and "config.targetCycleSeconds (86400)" in n
            and "every 600 s at most" in n, "NOTES: the three numbers an operator chooses", n[:1200])
    d = chart.render(sets=("existingSecret.name=creds", "schedule=0 */4 * * *", "config.batchesPerRun=7",
                           "config.listMaxPages=30"))
    data = d.one("ConfigMap", RELEASE)["data"]
    r.equal((data.get("RECONCILER_SCHEDULE_INTERVAL_SECONDS"), data.get("RECONCILER_BATCHES_PER_RUN"),
             data.get("RECONCILER_LIST_MAX_PAGES")), ("14400", "7", "30"),
            "schedule interval derived from a 4-hourly schedule; numbers pass as numbers")
    fails(r, chart, ("existingSecret.name=creds", "schedule=0 0 1 * *"), "config.scheduleIntervalSeconds",
          "an unreadable schedule asks for config.scheduleIntervalSeconds")
    d = chart.render(sets=("existingSecret.name=creds", "schedule=0 0 1 * *", "config.scheduleIntervalSeconds=2678400"))
    r.equal(d.one("ConfigMap", RELEASE)["data"].get("RECONCILER_SCHEDULE_INTERVAL_SECONDS"), "2678400",
            "config.scheduleIntervalSeconds wins")
    r.check("helm uninstall" not in n and "remove them afterwards" not in n,
            "NOTES: no leftover hook objects to delete by hand after uninstall")


def cmd_static(args):
    import re

    r = Results()
    root = Path(args.root)
    docker = (root / "Dockerfile").read_text(encoding="utf-8")
    args_ = dict(re.findall(r"^ARG (\w+)=(\S+)", docker, re.M))
    froms = re.findall(r"^FROM\s+(\S+)", docker, re.M)
    r.check(len(froms) >= 2, "Dockerfile: a builder and a runtime stage", str(froms))
    for f in froms:
        image = args_.get(f[2:-1], "") if f.startswith("${") else f
        r.check(re.search(r"@sha256:[0-9a-f]{64}$", image) is not None,
                f"Dockerfile: FROM {f} pinned by digest", image)
    r.check("CARGO_PROFILE_RELEASE_STRIP=symbols" in docker or re.search(r"\bstrip\b", docker) is not None,
            "Dockerfile: the binary is stripped")
    for label in ("version", "revision", "source", "created", "title", "licenses"):
        r.check(f"org.opencontainers.image.{label}=" in docker, f"Dockerfile: OCI label org.opencontainers.image.{label}")
    r.check(re.search(r"^USER 65532:65532$", docker, re.M) is not None, "Dockerfile: runs as 65532:65532")
    deployment = (root / "docs" / "deployment.md").read_text(encoding="utf-8")
    # The install walk-through: everything before the pooler section.
    deploy = deployment.split("\n## ", 1)[0]
    for needle in ("helm install", "prometheusRule.enabled=true", "prometheusRule.labels.release=",
                   "dashboard.enabled=true", "config.pushgatewayUrl=", "ruleSelector", "honorLabels",
                   "sslmode=verify-full", "extraVolumes", "metrics/job/stripe-reconciler-alert-test", "alertmanager"):
        r.check(needle in deploy, f"docs/deployment.md (install walk-through): mentions {needle}")
    readme = (root / "README.md").read_text(encoding="utf-8")
    r.check("(docs/deployment.md)" in readme, "README.md links docs/deployment.md")
    k8s_values = yaml.safe_load((root / "k8s" / "values.yaml").read_text(encoding="utf-8"))
    r.check(bool(k8s_values.get("config", {}).get("pushgatewayUrl")), "k8s/values.yaml: a Pushgateway URL")
    r.check(k8s_values.get("prometheusRule", {}).get("labels", {}).get("release") == "kube-prometheus-stack",
            "k8s/values.yaml: the PrometheusRule carries release: kube-prometheus-stack")
    k8s_readme = (root / "k8s" / "README.md").read_text(encoding="utf-8")
    for f in ("prometheusrule.yaml", "prometheus-rules.yaml", "PUSHGATEWAY_URL"):
        r.check(f in k8s_readme, f"k8s/README.md: mentions {f}")
    r.write(args.counts)
    return 0 if r.failed == 0 else 1


def cmd_test(args):
    r = Results()
    chart = Chart(args.helm, args.chart)
    for t in (test_default, test_existing_secret, test_alerts_dashboard, test_repair, test_events, test_subscriptions, test_partition, test_failures, test_misc,
              test_migration_switch, test_deadlines, test_alert_values, test_extra_volumes, test_network_policy,
              test_labels, test_kube_versions, test_notes):
        try:
            t(r, chart)
        except Exception as e:  # a crash is a failure, never a skip
            r.check(False, f"{t.__name__} ran to completion", f"{type(e).__name__}: {e}")
    r.write(args.counts)
    return 0 if r.failed == 0 else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("static")
    st.add_argument("--root", required=True)
    st.add_argument("--counts", required=True)
    vs = sub.add_parser("versions")
    vs.add_argument("--chart", required=True)
    v = sub.add_parser("validate")
    v.add_argument("--k8s-version", required=True, action="append")
    v.add_argument("--counts", required=True)
    v.add_argument("manifests", nargs="+")
    t = sub.add_parser("test")
    t.add_argument("--helm", required=True)
    t.add_argument("--chart", required=True)
    t.add_argument("--counts", required=True)
    args = p.parse_args()
    return {"versions": cmd_versions, "validate": cmd_validate, "test": cmd_test, "static": cmd_static}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
