#!/usr/bin/env bash
# Installs the non-Python tools the tests use into a cache outside the work tree: nothing is downloaded twice, and
# nothing needs root. `--unit`: only what the tests without a broker or a browser use (helm, promtool, the
# Node packages).
set -euo pipefail
UNIT=0
if [ "${1:-}" = "--unit" ]; then UNIT=1; fi
CACHE="${HARNESS_WORKER_CACHE:-$HOME/.cache/harness-agui-worker}"
mkdir -p "$CACHE/bin"
echo "tools cache: $CACHE"

# ---- helm (begin; owned by the deploy helper) ----
# Helm renders and lints the chart in tests/deploy; built once from the Go module proxy into "$CACHE/bin".
# The ldflags do what helm's Makefile does: without them `helm version` says v3.22 and `helm template`
# assumes Kubernetes 1.20. HELM_K8S_MINOR follows the k8s.io/client-go v0.<minor> that helm release uses.
HELM_VERSION="v3.22.0"
HELM_K8S_MINOR="37"
if [ -x "$CACHE/bin/helm" ] && "$CACHE/bin/helm" version --short 2>/dev/null | grep -q "^${HELM_VERSION}"; then
  echo "helm ${HELM_VERSION}: cached"
else
  echo "helm ${HELM_VERSION}: building (a few minutes, once)"
  helm_start=$(date +%s)
  helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
  for pkg in pkg/chartutil pkg/lint/rules; do
    helm_ldflags="$helm_ldflags -X helm.sh/helm/v3/${pkg}.k8sVersionMajor=1"
    helm_ldflags="$helm_ldflags -X helm.sh/helm/v3/${pkg}.k8sVersionMinor=${HELM_K8S_MINOR}"
  done
  GOBIN="$CACHE/bin" GOFLAGS="${GOFLAGS:-} -mod=mod" CGO_ENABLED=0 \
    go install -trimpath -ldflags="$helm_ldflags" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
  echo "helm ${HELM_VERSION}: built in $(( $(date +%s) - helm_start ))s"
fi
# ---- helm (end) ----

# ---- promtool (begin; owned by the alerts' tests) ----
# tests/deploy/test_alerts.py runs `promtool test rules` on the chart's PrometheusRule; promtool is built once from
# the Go module proxy into "$CACHE/bin" (Prometheus 3.x is the Go module version v0.3xx). The build tag
# remove_all_sd leaves out the service-discovery plugins (cloud SDKs), which rule tests do not use.
PROMETHEUS_MODULE_VERSION="v0.316.0"
if [ -x "$CACHE/bin/promtool" ] && [ -f "$CACHE/bin/promtool.version" ] \
    && [ "$(cat "$CACHE/bin/promtool.version")" = "$PROMETHEUS_MODULE_VERSION" ]; then
  echo "promtool ${PROMETHEUS_MODULE_VERSION}: cached"
else
  echo "promtool ${PROMETHEUS_MODULE_VERSION}: building (several minutes, once)"
  promtool_start=$(date +%s)
  GOBIN="$CACHE/bin" GOFLAGS="${GOFLAGS:-} -mod=mod" CGO_ENABLED=0 \
    go install -trimpath -tags remove_all_sd -ldflags="-s -w" \
    "github.com/prometheus/prometheus/cmd/promtool@${PROMETHEUS_MODULE_VERSION}"
  echo "$PROMETHEUS_MODULE_VERSION" > "$CACHE/bin/promtool.version"
  echo "promtool ${PROMETHEUS_MODULE_VERSION}: built in $(( $(date +%s) - promtool_start ))s"
fi
# ---- promtool (end) ----

# ---- gateway clients (begin; owned by the gateway) ----
# The gateway tests run the official @ag-ui/client under Node and drive a headless Chromium with puppeteer-core
# (tests/gateway/node/package.json, pinned by its package-lock.json). The packages go to
# "$CACHE/gateway-node-<lock hash>/node_modules", installed once per lock. Chromium is @sparticuz/chromium's
# headless shell (Linux x86_64), a brotli-compressed binary in the npm package: its executablePath() inflates it
# into os.tmpdir(), here pointed at "$CACHE/gateway-node-<lock hash>/chromium", once per lock and user.
# CHROMIUM=/path/to/a/headless/chromium uses another one instead (on aarch64, which that package does not carry).
(
  cd "$(dirname "$0")/.."
  lock_hash=$(sha256sum tests/gateway/node/package-lock.json | cut -c1-16)
  node_dir="$CACHE/gateway-node-$lock_hash"
  if [ -d "$node_dir/node_modules/@ag-ui/client" ] && [ -d "$node_dir/node_modules/puppeteer-core" ] \
      && [ -d "$node_dir/node_modules/@sparticuz/chromium" ]; then
    echo "gateway node packages: cached"
  else
    rm -rf "$node_dir.tmp" && mkdir -p "$node_dir.tmp"
    cp tests/gateway/node/package.json tests/gateway/node/package-lock.json "$node_dir.tmp/"
    (cd "$node_dir.tmp" && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
    rm -rf "$node_dir" && mv "$node_dir.tmp" "$node_dir"
    echo "gateway node packages: installed in $node_dir"
  fi
  if [ "$UNIT" = 1 ]; then
    echo "chromium: not needed (--unit)"
  elif [ -n "${CHROMIUM:-}" ]; then
    echo "chromium: $CHROMIUM (CHROMIUM): $("$CHROMIUM" --version 2>/dev/null | head -1)"
  elif [ "$(uname -m)" != "x86_64" ]; then
    echo "chromium: @sparticuz/chromium carries Linux x86_64 only; set CHROMIUM to a headless Chromium" \
      "for tests/gateway/test_viewer.py"
  else
    if [ ! -x "$node_dir/chromium/chromium" ]; then
      rm -rf "$node_dir/chromium.tmp" && mkdir -p "$node_dir/chromium.tmp"
      (cd "$node_dir" && TMPDIR="$node_dir/chromium.tmp" node --input-type=module \
        -e 'const { default: chromium } = await import("@sparticuz/chromium"); await chromium.executablePath();')
      rm -rf "$node_dir/chromium" && mv "$node_dir/chromium.tmp" "$node_dir/chromium"
    fi
    echo "chromium: $("$node_dir/chromium/chromium" --version 2>/dev/null | head -1) in $node_dir/chromium"
  fi
)
# ---- gateway clients (end) ----

if [ "$UNIT" = 1 ]; then
  echo "kafka jars and kafka tools: not needed (--unit)"
  exit 0
fi

# ---- kafka jars (begin; owned by the Kafka test harness) ----
# The broker tests start a real Kafka 4.x KRaft cluster from Maven jars (devtools/kafka_cluster.py).
# Resolve them now, once per version into "$CACHE/kafka-<version>/libs", so the time shows here in CI logs.
(
  cd "$(dirname "$0")/.."
  kafka_start=$(date +%s)
  .venv/bin/python -m devtools.kafka_cluster --resolve-only
  echo "kafka jars: ready in $(( $(date +%s) - kafka_start ))s"
)
# ---- kafka jars (end) ----

# ---- kafka command-line tools (begin; owned by the devtools/demo helper) ----
# The replay test runs Kafka's own kafka-consumer-groups class (devtools/kafka_tools.py): resolve its jars
# once per version into "$CACHE/kafka-tools-<version>/libs".
(
  cd "$(dirname "$0")/.."
  tools_start=$(date +%s)
  .venv/bin/python -m devtools.kafka_tools --resolve-only >/dev/null
  echo "kafka tools jars: ready in $(( $(date +%s) - tools_start ))s"
)
# ---- kafka command-line tools (end) ----
