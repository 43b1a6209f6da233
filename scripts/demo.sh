#!/usr/bin/env bash
# The demo (the README's second command): a local Kafka broker, the worker, sample Harness runs, and the AG-UI
# events printed as they are committed. Ctrl-C stops everything; `--duration SECONDS` runs it unattended.
# Uses the .venv made by `bash scripts/test.sh`, or makes one with the runtime dependencies if it is missing.
# Needs Java 17+ and Maven (the broker's jars are resolved once into ~/.cache/harness-agui-worker).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  PYTHON="${PYTHON:-python3}"
  echo "[demo] creating .venv with the worker's runtime dependencies" >&2
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -e .
fi
exec .venv/bin/python -m devtools.demo "$@"
