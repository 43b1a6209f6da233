#!/usr/bin/env bash
# Installs the non-Python tools the tests use into a cache outside the work tree: nothing is downloaded twice.
set -euo pipefail
CACHE="${HARNESS_WORKER_CACHE:-$HOME/.cache/harness-agui-worker}"
mkdir -p "$CACHE/bin"
echo "tools cache: $CACHE"
