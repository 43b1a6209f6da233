"""The suite runs this Python's installation of the project, and the build it holds is the one promised: the wheel
scripts/test.sh builds as the image does (hot path compiled with mypyc), or with HARNESS_AGUI_COMPILE=0 an editable
install of the checkout's sources. The checkout never runs behind an installed wheel's back."""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
from importlib.machinery import ExtensionFileLoader
from pathlib import Path

import pytest

from devtools.dockerfile import copy_build_context
from tests import installation
from tests.installation import ROOT
from worker._native import describe

COMPILED_PROMISED = os.environ.get("HARNESS_AGUI_EXPECT_COMPILED") == "1"  # set by scripts/test.sh with the wheel
GOLDEN = ROOT / "tests" / "data" / "golden"
WORKER_RUN = ["-m", "worker", "run", "--bootstrap-servers", "127.0.0.1:1", "--source-topic", "s", "--output-topic",
              "o", "--dlq-topic", "d", "--metrics-port", "0", "--log-format", "json"]


def _loaded_worker_files() -> dict[str, Path]:
    """The file of every loaded `worker` module, after loading the compiled list and the worker's entry point."""
    for name in [*installation.compiled_modules(), "worker.app"]:
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


def test_the_suite_runs_the_installed_compiled_wheel_when_one_was_promised() -> None:
    if not COMPILED_PROMISED:
        pytest.skip("HARNESS_AGUI_EXPECT_COMPILED is not set (scripts/test.sh sets it when it installs the wheel)")
    package = installation.installed_package()
    assert not installation.editable() and package != (ROOT / "worker").resolve(), f"the suite imports {package}"
    _loaded_worker_files()
    shipped = installation.installed_extensions()
    listed = installation.compiled_modules()
    assert [name for name in listed if name not in shipped] == []
    from_source = [name for name in listed if not isinstance(sys.modules[name].__loader__, ExtensionFileLoader)]
    assert from_source == []
    # mypyc's shared library (setup.py's group "worker._runtime"), which every compiled module calls into
    runtime = sys.modules["worker._runtime__mypyc"]
    assert Path(str(runtime.__file__)).resolve() == shipped["worker._runtime__mypyc"]
    assert describe() == f"compiled (mypyc): {shipped['worker.wire._decode']}"


def test_the_checkouts_sources_run_as_plain_python() -> None:
    """What an editable install imports, the checkout's worker/ ahead of any installation, works in either build:
    every module setup.py compiles, and the entry point, import as plain Python from the checkout's own files."""
    listed = installation.compiled_modules()
    code = ("import importlib, json, sys\n"
            "names = json.loads(sys.argv[1])\n"
            "for name in [*names, 'worker.app']:\n"
            "    importlib.import_module(name)\n"
            "print(json.dumps({name: sys.modules[name].__file__ for name in names}))\n")
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(ROOT)}
    loaded = subprocess.run([sys.executable, "-c", code, json.dumps(listed)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert loaded.returncode == 0, loaded.stderr
    files = {name: Path(file).resolve() for name, file in json.loads(loaded.stdout).items()}
    assert sorted(files) == sorted(listed)
    expected = {name: (ROOT / name.replace(".", "/")).with_suffix(".py").resolve() for name in listed}
    assert [f"{name}: {file}" for name, file in files.items() if file != expected[name]] == []


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
    """How the start log line names the installation's build: by the file its decoder module loads from."""
    decoder = installation.installed_extensions().get("worker.wire._decode")
    if decoder is not None:
        return f"compiled (mypyc): {decoder}"
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
    assert kind == "compiled (mypyc)" or not COMPILED_PROMISED


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


def test_the_pure_sources_convert_the_corpus_byte_for_byte_like_the_compiled_wheel(tmp_path: Path) -> None:
    """The compiled build is the same program: every golden file, both observers, identical output and error lines
    from the installed wheel and from the checkout's sources."""
    if not installation.installed_extensions():
        pytest.skip("the installed build is pure: nothing compiled to compare")
    compiled_build, compiled = _convert_corpus(tmp_path / "compiled")
    pure_build, pure = _convert_corpus(tmp_path / "pure", PYTHONPATH=str(ROOT))
    assert compiled_build.startswith("compiled (mypyc): ")
    assert pure_build == f"pure Python: {ROOT / 'worker' / 'wire' / '_decode.py'}"
    assert len(compiled) > 200
    assert compiled.keys() == pure.keys()
    assert [name for name in compiled if compiled[name] != pure[name]] == []


def test_a_compiled_module_listed_but_missing_stops_the_build_naming_it(tmp_path: Path) -> None:
    context = copy_build_context(tmp_path / "context")
    [first, *_] = installation.compiled_modules()
    missing = first.replace(".", "/") + ".py"
    (context / missing).unlink()
    done = subprocess.run([sys.executable, "setup.py", "--version"], cwd=context, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 1
    assert f"{first} ({missing})" in done.stderr
    shutil.copy2(ROOT / missing, context / missing)
    done = subprocess.run([sys.executable, "setup.py", "--version"], cwd=context, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_compiling_into_the_source_tree_is_refused(tmp_path: Path) -> None:
    """HARNESS_AGUI_COMPILE=1 builds wheels only: an editable install or `build_ext --inplace` would leave compiled
    modules beside the sources they shadow."""
    context = copy_build_context(tmp_path / "context")
    environment = {**os.environ, "HARNESS_AGUI_COMPILE": "1"}
    editable = subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_editable({str(tmp_path)!r})"],
        cwd=context, env=environment, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    in_place = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=context, env=environment,
                              capture_output=True, text=True, timeout=120, check=False)
    for done in (editable, in_place):
        assert done.returncode != 0
        assert "HARNESS_AGUI_COMPILE=1 builds a wheel" in done.stderr
    assert [p for p in context.rglob("*") if p.name.endswith(installation.EXTENSION_SUFFIXES)] == []
