#!/usr/bin/env python3
"""Compares what two copies of helm/stripe-reconciler render, as data.

  scripts/chart-render-diff.py OLD_CHART_DIR [NEW_CHART_DIR]

Renders `helm template` of both charts with every NEW_CHART_DIR/ci/*-values.yaml
and with k8s/values.yaml (namespace payments), parses the YAML documents and
compares them keyed by (apiVersion, kind, namespace, name): comments, key order
and document order do not count, every value does. Prints one line per scenario
("same: N objects" or the differing paths) and exits 1 when any differs.
Meant for chart refactors that must not change the output, e.g.

  git archive main helm | tar -x -C /tmp/old && scripts/chart-render-diff.py /tmp/old/helm/stripe-reconciler

Needs helm (PATH or scripts/check-chart.sh's copy) and PyYAML.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
RELEASE = "stripe-reconciler"


def helm():
    found = shutil.which("helm")
    if found:
        return found
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    path = cache / "stripe-reconciler-tools" / "bin" / "helm"
    if not path.exists():
        sys.exit("chart-render-diff: helm not found; run scripts/check-chart.sh once or put helm on PATH")
    return str(path)


def render(chart, values, extra):
    cmd = [helm(), "template", RELEASE, str(chart), "--values", str(values), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        return None, p.stderr.strip()
    objects = {}
    for doc in yaml.safe_load_all(p.stdout):
        if not doc:
            continue
        meta = doc.get("metadata", {})
        key = (doc.get("apiVersion"), doc.get("kind"), meta.get("namespace"), meta.get("name"))
        if key in objects:
            return None, f"two objects named {key}"
        objects[key] = doc
    return objects, ""


def differences(old, new, path="", out=None):
    out = [] if out is None else out
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            if k not in old:
                out.append(f"{path}.{k}: only in the new render")
            elif k not in new:
                out.append(f"{path}.{k}: only in the old render")
            else:
                differences(old[k], new[k], f"{path}.{k}", out)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            differences(a, b, f"{path}[{i}]", out)
    elif old != new:
        out.append(f"{path}: {old!r} -> {new!r}"[:300])
    return out


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    old_chart = Path(sys.argv[1])
    new_chart = Path(sys.argv[2]) if len(sys.argv) == 3 else ROOT / "helm" / "stripe-reconciler"
    scenarios = [(v, []) for v in sorted((new_chart / "ci").glob("*-values.yaml"))]
    scenarios.append((ROOT / "k8s" / "values.yaml", ["--namespace", "payments"]))
    failed = 0
    for values, extra in scenarios:
        old, old_err = render(old_chart, values, extra)
        new, new_err = render(new_chart, values, extra)
        name = values.relative_to(ROOT) if values.is_relative_to(ROOT) else values
        if old is None or new is None:
            failed += 1
            print(f"DIFFERENT {name}: a render failed: old: {old_err or 'ok'}; new: {new_err or 'ok'}")
            continue
        diffs = [f"{k}: only in the old render" for k in old if k not in new]
        diffs += [f"{k}: only in the new render" for k in new if k not in old]
        for k in old:
            if k in new:
                diffs += [f"{k[1]}/{k[3]}{d}" for d in differences(old[k], new[k])]
        if diffs:
            failed += 1
            print(f"DIFFERENT {name}:")
            for d in diffs:
                print(f"    {d}")
        else:
            kinds = sorted(f"{k[1]}/{k[3]}" for k in new)
            print(f"same {name}: {len(new)} objects ({', '.join(kinds)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
