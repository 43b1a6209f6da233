"""The suite runs this Python's installation of the project, and the build it holds is the one promised: the wheel
scripts/test.sh builds as the image does (the native module built from native/), or an editable install of the
checkout (native when a Rust tool chain is there). `HARNESS_AGUI_PURE=1` runs the pure sources of any installation;
without a tool chain `pip install .` gives the pure build. The checkout never runs behind an installed wheel's back."""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from devtools.dockerfile import copy_build_context
from devtools.wheel import PIP_WHEEL
from tests import installation
from tests.installation import ROOT
from worker._native import PURE_ENV, describe

NATIVE_PROMISED = os.environ.get("HARNESS_AGUI_EXPECT_NATIVE") == "1"  # set by scripts/test.sh with a native build
GOLDEN = ROOT / "tests" / "data" / "golden"
WORKER_RUN = ["-m", "worker", "run", "--bootstrap-servers", "127.0.0.1:1", "--source-topic", "s", "--output-topic",
              "o", "--dlq-topic", "d", "--metrics-port", "0", "--log-format", "json"]
# The conversion core's modules and the worker's entry point.
CORE = ["worker.wire", "worker.observe", "worker.display", "worker.stream", "worker._native", "worker.app"]


def _loaded_worker_files() -> dict[str, Path]:
    """The file of every loaded `worker` module, after loading the conversion core and the worker's entry point."""
    for name in CORE:
        importlib.import_module(name)
    loaded = list(sys.modules.items())
    return {name: Path(str(module.__file__)).resolve() for name, module in loaded
            if name.partition(".")[0] == "worker" and getattr(module, "__file__", None)}


def test_every_worker_module_loads_from_the_installation() -> None:
    package = installation.installed_package()
    files = _loaded_worker_files()
    assert len(files) > 40
    elsewhere = sorted(f"{name}: {file}" for name, file in files.items() if not file.is_relative_to(package))
    assert elsewhere == []
    assert installation.editable() or package != (ROOT / "worker").resolve(), package


def test_the_suite_runs_the_native_build_when_one_was_promised() -> None:
    if not NATIVE_PROMISED:
        pytest.skip("HARNESS_AGUI_EXPECT_NATIVE is not set (scripts/test.sh sets it when it builds the native module)")
    module = installation.native_module_file()
    assert module is not None, f"no native module in {installation.installed_package()}"
    assert os.environ.get(PURE_ENV) != "1"
    assert describe() == f"native (Rust): {module}"
    assert Path(str(importlib.import_module("worker._native_core").__file__)).resolve() == module


def test_the_pure_switch_runs_the_sources_of_the_same_installation() -> None:
    """With HARNESS_AGUI_PURE=1 the installation's pure sources run, whatever it holds."""
    code = "from worker._native import describe, native; print(native(), describe())"
    env = {**os.environ, PURE_ENV: "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == f"False pure Python: {installation.installed_package() / 'wire' / '_decode.py'}"


def test_a_run_that_would_import_the_checkout_stops_before_collecting() -> None:
    """`python -m pytest` puts the working directory first on the path; with a wheel installed, the checkout's
    worker/ would shadow it, and the run stops naming both. pytest's own script, or `python -P`, runs."""
    if installation.editable():
        pytest.skip("an editable install imports the checkout itself")
    args = ["-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/test_public_api.py"]
    shell = {k: v for k, v in os.environ.items() if k not in installation.child_path()}  # as a developer's shell
    shadowed = subprocess.run([sys.executable, *args], cwd=ROOT, env=shell, capture_output=True, text=True,
                              timeout=120, check=False)
    assert shadowed.returncode == pytest.ExitCode.USAGE_ERROR, shadowed.stdout + shadowed.stderr
    assert f"the suite would import {ROOT / 'worker'}, not the installed package" in shadowed.stderr
    safe = subprocess.run([sys.executable, "-P", *args], cwd=ROOT, env=shell, capture_output=True, text=True,
                          timeout=120, check=False)
    assert safe.returncode == 0, safe.stdout + safe.stderr


def _expected_core() -> str:
    """How the start log line names the installation's build: by its native module, or the pure decoder's source."""
    module = installation.native_module_file()
    if module is not None and os.environ.get(PURE_ENV) != "1":
        return f"native (Rust): {module}"
    return f"pure Python: {installation.installed_package() / 'wire' / '_decode.py'}"


@pytest.mark.timeout(120)
def test_a_worker_started_from_the_checkout_logs_the_installed_build() -> None:
    """As the suite starts workers (`python -m worker run`, working directory the checkout), the worker runs the
    installation, and its `worker starting` line names that build and the file that shows it."""
    proc = subprocess.Popen([sys.executable, *WORKER_RUN], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        starting = None
        for line in proc.stdout:
            entry = json.loads(line) if line.startswith("{") else {}
            if entry.get("msg") == "worker starting":
                starting = entry
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert starting is not None, "no `worker starting` line"
    kind, _, file = str(starting["conversion_core"]).partition(": ")
    expected_kind, _, expected_file = _expected_core().partition(": ")
    assert (kind, Path(file).resolve()) == (expected_kind, Path(expected_file))
    assert kind == "native (Rust)" or not NATIVE_PROMISED


def test_the_processes_a_worker_forks_run_the_installed_build() -> None:
    """Replay processes come from a forkserver, a Python of its own started from the working directory: they run
    the same build as the suite, and import the suite's processors."""
    with multiprocessing.get_context("forkserver").Pool(1) as pool:
        core, processor = pool.apply(_describe_in_child)
    assert core == _expected_core()
    assert processor == str(ROOT / "tests" / "processors.py")


def _describe_in_child() -> tuple[str, str]:
    from tests import processors  # noqa: PLC0415  (imported in the child)

    return describe(), str(processors.__file__)


def _convert_corpus(out: Path, **env: str) -> tuple[str, dict[str, bytes]]:
    """The build a Python started with `env` runs, and what its `worker convert` writes for every golden source."""
    inputs = sorted(p for p in GOLDEN.rglob("*.jsonl") if ".agui." not in p.name and ".display." not in p.name)
    environment = {**os.environ, **env}
    probe = subprocess.run([sys.executable, "-c", "from worker._native import describe; print(describe())"],
                           cwd=out.parent, env=environment, capture_output=True, text=True, timeout=120, check=True)
    out.mkdir()
    for observer in ("stream", "plain"):
        subprocess.run(
            [sys.executable, "-m", "worker", "convert", "--observer", observer, "--out-dir",
             str(out / observer), *map(str, inputs)],
            cwd=out.parent, env=environment, capture_output=True, check=False, timeout=300,
        )  # exit 1 is expected: some corpus files hold bad lines, written as error lines
    written = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    return probe.stdout.strip(), written


def test_the_pure_sources_convert_the_corpus_byte_for_byte_like_the_native_build(tmp_path: Path) -> None:
    """The native build is the same program: every golden file, both observers, identical output and error lines
    from the installation's native module and from its pure sources."""
    if installation.native_module_file() is None:
        pytest.skip("the installed build is pure: nothing native to compare")
    native_build, native = _convert_corpus(tmp_path / "native", **{PURE_ENV: "0"})
    pure_build, pure = _convert_corpus(tmp_path / "pure", **{PURE_ENV: "1"})
    assert native_build.startswith("native (Rust): ")
    assert pure_build == f"pure Python: {installation.installed_package() / 'wire' / '_decode.py'}"
    assert len(native) > 200
    assert native.keys() == pure.keys()
    assert [name for name in native if native[name] != pure[name]] == []


def _wheel_without_rust(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`pip wheel` of the build context as the builder stage runs it, on a PATH without cargo or rustc."""
    context = copy_build_context(tmp_path / "context")
    bare = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if not (Path(d) / "cargo").exists() and not (Path(d) / "rustc").exists())
    # scripts/test.sh exports HARNESS_AGUI_NATIVE=1 for the suite's own build: a build without it is left unset here.
    environment = {**{k: v for k, v in os.environ.items()
                      if not k.startswith(("CARGO", "RUSTUP")) and k != "HARNESS_AGUI_NATIVE"}, "PATH": bare, **env}
    return subprocess.run([sys.executable, "-m", *PIP_WHEEL, "--wheel-dir", str(tmp_path / "wheels"), "."],
                          cwd=context, env=environment, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_without_a_rust_tool_chain_the_build_is_pure_unless_native_is_required(tmp_path: Path) -> None:
    """`pip install .` on a machine without Rust installs the pure build; HARNESS_AGUI_NATIVE=1 (the image, the
    suite) fails instead, naming what is missing."""
    done = _wheel_without_rust(tmp_path / "optional")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [wheel] = (tmp_path / "optional" / "wheels").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "worker/wire/_decode.py" in names
    assert [n for n in names if n.endswith(installation.EXTENSION_SUFFIXES)] == []
    required = _wheel_without_rust(tmp_path / "required", HARNESS_AGUI_NATIVE="1")
    assert required.returncode != 0
    assert "can't find Rust compiler" in required.stdout + required.stderr
