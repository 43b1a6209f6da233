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
# The worker's dependencies at the versions the image ships (requirements.lock), and the image builder's mypyc
# tool chain (requirements-build.lock); then the project and its test tools.
.venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes --only-binary=:all: --no-deps \
  -r requirements.lock
.venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes --only-binary=:all: --no-deps \
  -r requirements-build.lock
if [ "${HARNESS_AGUI_COMPILE:-1}" = "0" ]; then
  echo "== build: none (HARNESS_AGUI_COMPILE=0): the suite tests the pure-Python sources, installed editable"
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
else
  echo "== build: the compiled wheel, as the image builds it (devtools/wheel.py); the suite tests it installed"
  wheel="$(.venv/bin/python -m devtools.wheel)"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$wheel"
  .venv/bin/python -m pip install -q --disable-pip-version-check "$wheel[test]"
  export HARNESS_AGUI_EXPECT_COMPILED=1
fi

bash scripts/install-tools.sh

echo "== ruff"
.venv/bin/ruff check setup.py worker tests bench devtools
echo "== mypy --strict worker"
.venv/bin/mypy --no-incremental worker
echo "== pytest"
# pytest's own script, not `python -m pytest`: that would put the checkout's worker/ ahead of the installed one.
exec .venv/bin/pytest "$@"
