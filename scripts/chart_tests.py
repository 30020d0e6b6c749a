#!/usr/bin/env python3
"""Rendering tests and schema validation for helm/stripe-reconciler.

Run by scripts/check-chart.sh (which provides helm and a venv with PyYAML and
kubernetes-validate); each assertion prints `ok - ...` or `not ok - ...`.

  chart_tests.py validate --k8s-version 1.34.0 --counts FILE MANIFEST...
      validate every document against the Kubernetes schemas (strict)
  chart_tests.py test --helm HELM --chart DIR --counts FILE
      plain assertions on `helm template` output

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
            try:
                kubernetes_validate.validate(doc, args.k8s_version, strict=True)
                r.check(True, f"{ident} valid for Kubernetes {args.k8s_version} (strict)")
            except Exception as e:  # ValidationError, SchemaNotFoundError, ...
                r.check(False, f"{ident} valid for Kubernetes {args.k8s_version} (strict)",
                        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
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
    for k, v in [("activeDeadlineSeconds", 540), ("backoffLimit", 2), ("ttlSecondsAfterFinished", 86400)]:
        r.equal(js.get(k), v, f"{label}: jobTemplate {k} {v}")
    r.equal(container(cj).get("args"), ["run"], f"{label}: args [run]")
    r.equal(container(cj).get("image"), "stripe-reconciler:0.1.0", f"{label}: image tag defaults to appVersion")
    check_hardening(r, cj, label)
    res = container(cj).get("resources", {})
    r.equal(res.get("requests"), {"cpu": "50m", "memory": "64Mi"}, f"{label}: requests 50m/64Mi")
    r.equal(res.get("limits"), {"memory": "128Mi"}, f"{label}: memory limit 128Mi")

    sa = d.one("ServiceAccount")
    r.equal(sa.get("automountServiceAccountToken"), False, "default/ServiceAccount: automountServiceAccountToken false")
    r.equal(pod_spec(cj).get("serviceAccountName"), sa["metadata"]["name"], f"{label}: runs as the chart's ServiceAccount")

    cm = d.one("ConfigMap", RELEASE)
    expected = {
        "STRIPE_API_BASE": "https://api.stripe.com", "RECONCILER_JOB": "payments-vs-stripe",
        "RECONCILER_BATCH_SIZE": "200", "RECONCILER_BATCHES_PER_RUN": "10",
        "RECONCILER_GRACE_SECONDS": "600", "RECONCILER_RATE_LIMIT_RPS": "10",
        "RECONCILER_MAX_IN_FLIGHT": "8", "RECONCILER_HTTP_TIMEOUT_SECONDS": "10",
        "RECONCILER_LOG_FORMAT": "json",
        # activeDeadlineSeconds (540) less a minute.
        "RECONCILER_RUN_DEADLINE_SECONDS": "480",
    }
    r.equal(cm.get("data"), expected, "default/ConfigMap: DESIGN.md defaults, no PUSHGATEWAY_URL when empty")
    r.equal(container(cj).get("envFrom"), [{"configMapRef": {"name": RELEASE}}], f"{label}: envFrom the ConfigMap")

    secret = d.one("Secret")
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
    check_secret_ref(r, mig, "default/migrate Job", sname, "DATABASE_URL", None)
    for pre in (secret, sa):
        ph, pw, pp = hook_of(pre)
        what = f"default/{pre['kind']}: hook created before the migration Job"
        r.check(ph == {"pre-install", "pre-upgrade"} and pw < weight, what, f"{ph} weight {pw} vs {weight}")
        r.check("hook-succeeded" not in pp, f"default/{pre['kind']}: kept after the hook succeeds")

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


def test_alerts_dashboard(r, chart):
    d = chart.render("alerts-dashboard-values.yaml")
    label = "alerts-dashboard"
    pr = d.one("PrometheusRule")
    alerts = yaml.safe_load((chart.chart / "files" / "alerts.yaml").read_text(encoding="utf-8"))
    r.equal(pr["spec"].get("groups"), alerts["groups"], f"{label}: PrometheusRule groups == files/alerts.yaml groups")
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
    r.equal(len(d.kind("CronJob")), 2, f"{label}: reconcile and repair CronJobs")
    r.check(not d.kind("Job"), f"{label}: migration.enabled=false renders no migration Job")
    secret = d.one("Secret")
    r.check(not hook_of(secret)[0], f"{label}: without the migration hook the Secret is an ordinary resource")


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


def cmd_test(args):
    r = Results()
    chart = Chart(args.helm, args.chart)
    for t in (test_default, test_existing_secret, test_alerts_dashboard, test_repair, test_failures, test_misc):
        try:
            t(r, chart)
        except Exception as e:  # a crash is a failure, never a skip
            r.check(False, f"{t.__name__} ran to completion", f"{type(e).__name__}: {e}")
    r.write(args.counts)
    return 0 if r.failed == 0 else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("validate")
    v.add_argument("--k8s-version", required=True)
    v.add_argument("--counts", required=True)
    v.add_argument("manifests", nargs="+")
    t = sub.add_parser("test")
    t.add_argument("--helm", required=True)
    t.add_argument("--chart", required=True)
    t.add_argument("--counts", required=True)
    args = p.parse_args()
    return cmd_validate(args) if args.cmd == "validate" else cmd_test(args)


if __name__ == "__main__":
    sys.exit(main())
