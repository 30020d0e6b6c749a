#!/usr/bin/env python3
"""Generates the parameter tables of helm/stripe-reconciler/README.md from the
`## @section` and `## @param` comments of values.yaml (Bitnami's
readme-generator-for-helm convention, helm-docs style output).

  scripts/chart-readme.py           rewrite the README between its markers
  scripts/chart-readme.py --check   fail when the README is out of date, a
                                    value has no @param, or a @param names
                                    no value (run by scripts/check-chart.sh)

A @param documents its key and everything below it (a map or list value is
documented as a whole). Needs PyYAML.
"""

import argparse
import difflib
import json
import re
import sys
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parent.parent / "helm" / "stripe-reconciler"
BEGIN, END = "<!-- parameters:begin (scripts/chart-readme.py) -->", "<!-- parameters:end -->"


def leaves(value, prefix=""):
    """Dotted paths of the leaves of the values (lists and empty maps are leaves)."""
    for k, v in value.items():
        path = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            yield from leaves(v, path)
        else:
            yield path


def lookup(values, path):
    v = values
    for part in path.split("."):
        if not isinstance(v, dict) or part not in v:
            raise KeyError(path)
        v = v[part]
    return v


def render_default(v):
    if isinstance(v, str):
        return f'`"{v}"`'
    return f"`{json.dumps(v, separators=(', ', ': '))}`"


def parse(text):
    """[(section title, section notes, [(key, description)])]."""
    sections, notes_open = [], False
    for line in text.splitlines():
        m = re.match(r"\s*## @section (.+)$", line)
        if m:
            sections.append([m.group(1).strip(), [], []])
            notes_open = True
            continue
        m = re.match(r"\s*## @param (\S+) (.+)$", line)
        if m:
            if not sections:
                sections.append(["Parameters", [], []])
            sections[-1][2].append((m.group(1), m.group(2).strip()))
            notes_open = False
            continue
        m = re.match(r"\s*## (.*)$", line)
        if m and notes_open and sections:
            sections[-1][1].append(m.group(1).strip())
        elif line.strip() and not line.lstrip().startswith("#"):
            notes_open = False
    return sections


def generate(values_text):
    values = yaml.safe_load(values_text)
    sections = parse(values_text)
    errors, out, documented = [], [], set()
    for title, notes, params in sections:
        out.append(f"### {title}\n")
        if notes:
            out.append(" ".join(notes) + "\n")
        out.append("| Name | Description | Default |")
        out.append("|---|---|---|")
        for key, desc in params:
            try:
                default = render_default(lookup(values, key))
            except KeyError:
                errors.append(f"@param {key} names no value in values.yaml")
                continue
            documented.add(key)
            out.append(f"| `{key}` | {desc.replace('|', '&#124;')} | {default.replace('|', '&#124;')} |")
        out.append("")
    for path in leaves(values):
        if not any(path == d or path.startswith(d + ".") for d in documented):
            errors.append(f"value {path} has no ## @param comment in values.yaml")
    return "\n".join(out).rstrip() + "\n", errors


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    readme_path = CHART / "README.md"
    tables, errors = generate((CHART / "values.yaml").read_text(encoding="utf-8"))
    readme = readme_path.read_text(encoding="utf-8")
    if BEGIN not in readme or END not in readme:
        errors.append(f"{readme_path} lacks the markers {BEGIN} ... {END}")
        new = readme
    else:
        head, rest = readme.split(BEGIN, 1)
        new = head + BEGIN + "\n\n" + tables + "\n" + END + rest.split(END, 1)[1]
    for e in errors:
        print(f"chart-readme: {e}", file=sys.stderr)
    if args.check:
        if new != readme:
            sys.stdout.writelines(difflib.unified_diff(readme.splitlines(True), new.splitlines(True),
                                                       "README.md (committed)", "README.md (generated)"))
            print("chart-readme: helm/stripe-reconciler/README.md is out of date; run scripts/chart-readme.py",
                  file=sys.stderr)
            return 1
        return 1 if errors else 0
    if new != readme:
        readme_path.write_text(new, encoding="utf-8")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
