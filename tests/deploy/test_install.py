"""The image's install step, done for real: the wheel built from the Docker build context as the builder stage
builds it (devtools.wheel, which scripts/test.sh also installs), installed fresh with the locked dependencies
alone, then the builder's own check that the installed conversion core is the native module."""

from __future__ import annotations

import os
import shlex
import subprocess
import venv
from pathlib import Path

import pytest

from devtools.dockerfile import copy_build_context, stages
from devtools.wheel import build
from tests.deploy.conftest import ROOT

GOLDEN = ROOT / "tests" / "data" / "golden"


def _run(*cmd: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`cmd` without the path the suite gives its own children: the fresh venv sees its own packages alone."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=900)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _builder_check(venv_dir: Path) -> list[str]:
    """The builder stage's check of the installed package, run with this venv's Python instead of /opt/venv's."""
    commands = [shlex.split(c) for w, a in stages()[0] if w == "RUN" for c in a.split(" && ")]
    [check] = [c for c in commands if c[0] == "/opt/venv/bin/python"]
    return [str(venv_dir / "bin" / "python"), *check[1:]]


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs(tmp_path: Path) -> None:
    wheel = build()  # in this environment, as the builder stage does: the native module built from native/
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # As the image does: the locked dependencies (hash-checked wheels), then the project's wheel alone.
    _run(str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--require-hashes",
         "--only-binary=:all:", "--no-deps", "-r", str(ROOT / "requirements.lock"), cwd=tmp_path)
    _run(str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", str(wheel),
         cwd=tmp_path)
    _run(str(python), "-m", "pip", "check", cwd=tmp_path)  # the lock holds everything the wheel requires
    # The builder runs its check in /src, beside the sources: here, in a copy of the same context.
    context = copy_build_context(tmp_path / "context")
    _run(*_builder_check(env_dir), cwd=context)
    # The image runs from / (no sources there): here, from tmp_path.
    probe = _run(str(python), "-c", "import worker, worker.ops.health; print(worker.__file__)", cwd=tmp_path)
    installed = Path(probe.stdout.strip())
    assert installed.is_relative_to(env_dir) and installed.parent.parent.name == "site-packages", installed
    converted = _run(str(python), "-m", "worker", "convert", str(GOLDEN / "c01_child_completed.jsonl"), cwd=tmp_path)
    assert converted.stdout == (GOLDEN / "c01_child_completed.stream.agui.jsonl").read_text()
    shown = _run(str(python), "-m", "worker", "--help", cwd=tmp_path)
    assert "run" in shown.stdout
