#!/usr/bin/env bash
# Compile the conversion hot path with mypyc, in place (the list is in setup.py). Pure Python needs no step:
# `worker._native` falls back to the sources whenever one differs from what was compiled.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
HARNESS_AGUI_COMPILE=1 "$PY" setup.py -q build_ext --inplace --parallel "$(nproc)"
