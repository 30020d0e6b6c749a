#!/usr/bin/env bash
# Static agreement of the Dockerfile, scripts/image.sh and the chart, cheap
# enough for scripts/test.sh (building the image is not: scripts/image.sh,
# docs/deployment.md#building-the-image-without-a-registry):
# - scripts/image.sh parses (bash -n);
# - the Dockerfile keeps working where a registry exists: two stages whose
#   bases are the build arguments RUST_IMAGE and RUNTIME_IMAGE, both
#   defaulting to an image pinned by digest;
# - every build argument scripts/image.sh passes is one the Dockerfile
#   declares, and it passes both bases;
# - the Dockerfile's USER is the chart's podSecurityContext
#   runAsUser:runAsGroup and the non-root user scripts/image.sh puts in the
#   runtime base's /etc/passwd;
# - the ENTRYPOINT is the path the binary is copied to;
# - the build context leaves out target/.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

bash -n scripts/image.sh || die "scripts/image.sh does not parse"
python3 - <<'PY' || die "the Dockerfile, scripts/image.sh and the chart disagree (above)"
import json, re, sys

dockerfile = open("Dockerfile").read()
script = open("scripts/image.sh").read()
values = open("helm/stripe-reconciler/values.yaml").read()
errors = []

froms = re.findall(r"^FROM\s+(.+?)\s*$", dockerfile, re.M)
if froms != ["${RUST_IMAGE} AS builder", "${RUNTIME_IMAGE}"]:
    errors.append(f"the Dockerfile's stages are FROM {froms}, not ${{RUST_IMAGE}} AS builder and ${{RUNTIME_IMAGE}}")
for arg in ("RUST_IMAGE", "RUNTIME_IMAGE"):
    m = re.search(rf"^ARG {arg}=(\S+)$", dockerfile, re.M)
    if not m or not re.fullmatch(r"[a-z0-9./-]+(:[\w.-]+)?@sha256:[0-9a-f]{64}", m.group(1)):
        errors.append(f"ARG {arg} has no default pinned by digest (IMAGE:TAG@sha256:...)")

declared = set(re.findall(r"^ARG ([A-Z_]+)", dockerfile, re.M))
passed = set(re.findall(r"--build-arg ([A-Z_]+)=", script))
if passed - declared:
    errors.append(f"scripts/image.sh passes build arguments the Dockerfile does not declare: {sorted(passed - declared)}")
if not {"RUST_IMAGE", "RUNTIME_IMAGE"} <= passed:
    errors.append("scripts/image.sh does not pass both RUST_IMAGE and RUNTIME_IMAGE")

users = re.findall(r"^USER\s+(\S+)\s*$", dockerfile, re.M)
uid = re.search(r"^\s+runAsUser:\s*(\d+)\s*$", values, re.M)
gid = re.search(r"^\s+runAsGroup:\s*(\d+)\s*$", values, re.M)
chart_user = f"{uid.group(1)}:{gid.group(1)}" if uid and gid else None
script_uid = re.search(r"^NONROOT_UID=(\d+)$", script, re.M)
script_user = f"{script_uid.group(1)}:{script_uid.group(1)}" if script_uid else None
if users[-1:] != [chart_user] or chart_user != script_user:
    errors.append(f"USER {users[-1:]} in the Dockerfile, {chart_user} in the chart's podSecurityContext, "
                  f"{script_user} in scripts/image.sh's runtime base: they must be one numeric user")

entry = re.findall(r"^ENTRYPOINT\s+(.+?)\s*$", dockerfile, re.M)
copied = re.findall(r"^COPY --from=builder \S+ (\S+)$", dockerfile, re.M)
if len(entry) != 1 or json.loads(entry[0])[:1] != copied[-1:]:
    errors.append(f"ENTRYPOINT {entry} does not start the binary copied to {copied}")

ignored = open(".dockerignore").read().split()
if "target" not in ignored:
    errors.append(".dockerignore does not leave target/ out of the build context")

for e in errors:
    print("error:", e, file=sys.stderr)
sys.exit(1 if errors else 0)
PY
echo "Dockerfile, scripts/image.sh and the chart agree (stages, pinned bases, build arguments, USER $(sed -n 's/^USER[[:space:]]*//p' Dockerfile), ENTRYPOINT)"
