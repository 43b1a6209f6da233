#!/usr/bin/env bash
# Installs the non-Python tools the tests use into a cache outside the work tree: nothing is downloaded twice.
set -euo pipefail
CACHE="${HARNESS_WORKER_CACHE:-$HOME/.cache/harness-agui-worker}"
mkdir -p "$CACHE/bin"
echo "tools cache: $CACHE"

# ---- helm (begin; owned by the deploy helper) ----
# Helm renders and lints the chart in tests/deploy; built once from the Go module proxy into "$CACHE/bin".
HELM_VERSION="v3.22.0"
if [ -x "$CACHE/bin/helm" ] && "$CACHE/bin/helm" version --short 2>/dev/null | grep -q "^${HELM_VERSION}"; then
  echo "helm ${HELM_VERSION}: cached"
else
  echo "helm ${HELM_VERSION}: building (a few minutes, once)"
  helm_start=$(date +%s)
  GOBIN="$CACHE/bin" GOFLAGS="${GOFLAGS:-} -mod=mod" CGO_ENABLED=0 \
    go install "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
  echo "helm ${HELM_VERSION}: built in $(( $(date +%s) - helm_start ))s"
fi
# ---- helm (end) ----
