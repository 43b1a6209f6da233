#!/usr/bin/env bash
# The one command: set up everything from a fresh clone, then run linters, type checks and the whole test suite.
# Extra arguments go to pytest (e.g. `scripts/test.sh -k golden`).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -U pip
# The worker's dependencies at the versions the image ships (requirements.lock), then the project and its test tools.
.venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes --only-binary=:all: --no-deps \
  -r requirements.lock
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'

bash scripts/install-tools.sh

if [ "${HARNESS_AGUI_COMPILE:-1}" = "0" ]; then
  echo "== mypyc: skipped (HARNESS_AGUI_COMPILE=0): the suite tests the pure-Python sources"
else
  echo "== mypyc: compile the hot path in place (scripts/compile.sh); the suite then tests what the image ships"
  if ! bash scripts/compile.sh >.compile.log 2>&1; then
    cat .compile.log
    exit 1
  fi
  export HARNESS_AGUI_EXPECT_COMPILED=1
fi

echo "== ruff"
.venv/bin/ruff check setup.py worker tests bench devtools
echo "== mypy --strict worker"
.venv/bin/mypy --no-incremental worker
echo "== pytest"
exec .venv/bin/python -m pytest "$@"
