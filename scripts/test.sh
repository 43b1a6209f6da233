#!/usr/bin/env bash
# The one command: set up everything from a fresh clone, then run linters, type checks and the whole test suite.
# Extra arguments go to pytest (e.g. `scripts/test.sh -k golden`). Nothing here needs root.
# `scripts/test.sh --unit [pytest arguments]` is a contributor's fast loop: the checkout installed editable (its native
# module built in place), the same linters and type checks, and the tests that need no broker, no browser and no
# fresh install (`-m "not kafka and not cluster3 and not slow"`); of the tools, only helm, promtool
# and the Node packages (no broker jars, no browser). HARNESS_AGUI_NATIVE=0 installs the pure-Python build instead.
set -euo pipefail
cd "$(dirname "$0")/.."
BEGAN=$SECONDS
UNIT=0
if [ "${1:-}" = "--unit" ]; then
  UNIT=1
  shift
fi
# The native module is required (HARNESS_AGUI_NATIVE=1, a missing Rust tool chain fails the build) unless set to 0;
# cargo keeps its build in the tools cache, so a rebuild compiles only what changed.
export HARNESS_AGUI_NATIVE="${HARNESS_AGUI_NATIVE:-1}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${HARNESS_WORKER_CACHE:-$HOME/.cache/harness-agui-worker}/cargo-target}"
export PYO3_PYTHON="$PWD/.venv/bin/python"

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -U pip
# The worker's dependencies at the versions the image ships (requirements.lock), and the image builder's tool chain
# (requirements-build.lock: setuptools-rust); then the project and its test tools.
.venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes --only-binary=:all: --no-deps \
  -r requirements.lock
.venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes --only-binary=:all: --no-deps \
  -r requirements-build.lock
if [ "$UNIT" = 1 ] || [ "$HARNESS_AGUI_NATIVE" = "0" ]; then
  echo "== build: editable (HARNESS_AGUI_NATIVE=$HARNESS_AGUI_NATIVE): the suite tests the checkout's sources"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation -e '.[test]'
else
  echo "== build: the native wheel, as the image builds it (devtools/wheel.py); the suite tests it installed"
  wheel="$(.venv/bin/python -m devtools.wheel)"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$wheel"
  .venv/bin/python -m pip install -q --disable-pip-version-check "$wheel[test]"
fi
if [ "$HARNESS_AGUI_NATIVE" = "1" ]; then
  export HARNESS_AGUI_EXPECT_NATIVE=1
fi

if [ "$UNIT" = 1 ]; then
  bash scripts/install-tools.sh --unit
else
  bash scripts/install-tools.sh
fi

CHECKS_BEGAN=$SECONDS
echo "== ruff"
.venv/bin/ruff check setup.py worker tests bench devtools
echo "== mypy --strict worker"
.venv/bin/mypy --no-incremental worker
echo "== cargo fmt, clippy, test (native/)"
(cd native && cargo fmt --check && cargo clippy --locked --all-targets -- -D warnings && cargo test --locked -q)
if [ "$HARNESS_AGUI_NATIVE" = "1" ]; then
  # 30 s in the whole run (CI's); the fast loop only shows the target still runs
  FUZZ_SECONDS="${HARNESS_AGUI_FUZZ_SECONDS:-$([ "$UNIT" = 1 ] && echo 5 || echo 30)}"
  echo "== fuzz: the native decoder and observers against the reference, $FUZZ_SECONDS s (tests/fuzz_native.py)"
  fuzz_dir="$(mktemp -d)"
  if ! .venv/bin/python -P tests/fuzz_native.py --seconds "$FUZZ_SECONDS" -artifact_prefix="$fuzz_dir/" \
      >"$fuzz_dir/log" 2>&1; then
    tail -40 "$fuzz_dir/log"
    echo "fuzz: a difference; the input is in $fuzz_dir (run: .venv/bin/python -P tests/fuzz_native.py <file>)"
    exit 1
  fi
  grep -h "stat::number_of_executed_units" "$fuzz_dir/log" || true
  rm -rf "$fuzz_dir"
fi
echo "== pytest"
# pytest's own script, not `python -m pytest`: that would put the checkout's worker/ ahead of the installed one.
# The tests run side by side in pytest-xdist workers (tests/conftest.py: one session broker for all of them, the
# three-node and the secured clusters' tests each in one group); most broker tests wait, so the whole suite runs
# more workers than cores. The slowest twenty and the wall time are printed at the end; `-n 0` (given last) runs
# everything in one process.
if [ "$UNIT" = 1 ]; then
  set -- -n 2 -m "not kafka and not cluster3 and not slow" "$@"
else
  set -- -n 4 "$@"
fi
status=0
.venv/bin/pytest --dist loadgroup --durations=20 "$@" || status=$?
minutes() { printf '%d min %02d s' $(($1 / 60)) $(($1 % 60)); }
echo "== wall time: $(minutes $((SECONDS - CHECKS_BEGAN))) for linters, type checks and tests, after" \
  "$(minutes $((CHECKS_BEGAN - BEGAN))) of set-up"
exit "$status"
