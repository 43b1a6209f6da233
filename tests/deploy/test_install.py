"""The image's install step, done for real: build the wheel from the Docker build context, install it fresh
with the locked dependencies."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT
from tests.deploy.test_dockerfile import stages

GOLDEN = ROOT / "tests" / "data" / "golden"


def _run(*cmd: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, timeout=900)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _builder_context(dest: Path) -> Path:
    """Copy exactly what the builder stage's COPY lines copy, so a file missing there fails here too."""
    for word, args in stages()[0]:
        if word != "COPY":
            continue
        *sources, target = args.split()
        for source in sources:
            src = ROOT / source
            out = dest / (source if target in ("./", ".") else target.removeprefix("./"))
            if src.is_dir():
                shutil.copytree(src, out, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so",
                                                                         "_compiled.json"))
            else:
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, out)
    return dest


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs(tmp_path: Path) -> None:
    context = _builder_context(tmp_path / "context")
    wheels = tmp_path / "wheels"
    # As the builder stage does: compiled with mypyc against the dependencies installed here.
    _run("env", "HARNESS_AGUI_COMPILE=1", sys.executable, "-m", "pip", "wheel", "--no-deps",
         "--no-build-isolation", "--disable-pip-version-check", "-q", "--wheel-dir", str(wheels), ".", cwd=context)
    [wheel] = wheels.glob("harness_agui_worker-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # As the image does: the locked dependencies (hash-checked wheels), then the project's wheel alone.
    _run(str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--require-hashes",
         "--only-binary=:all:", "--no-deps", "-r", str(context / "requirements.lock"), cwd=tmp_path)
    _run(str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", str(wheel),
         cwd=tmp_path)
    _run(str(python), "-m", "pip", "check", cwd=tmp_path)  # the lock holds everything the wheel requires
    # Run from tmp_path so the repository's own worker/ is not on sys.path.
    probe = _run(str(python), "-c", "import worker, worker.ops.health; print(worker.__file__)", cwd=tmp_path)
    assert str(env_dir) in probe.stdout
    native = _run(str(python), "-W", "error", "-c",
                  "import worker._native as n; print(n.compiled(), n.fallback_reason)", cwd=tmp_path)
    assert native.stdout.split() == ["True", "None"], native.stdout + native.stderr
    converted = _run(str(python), "-m", "worker", "convert", str(GOLDEN / "c01_child_completed.jsonl"), cwd=tmp_path)
    assert converted.stdout == (GOLDEN / "c01_child_completed.stream.agui.jsonl").read_text()
    if (ROOT / "worker" / "__main__.py").exists():
        shown = _run(str(python), "-m", "worker", "--help", cwd=tmp_path)
        assert "run" in shown.stdout
    else:  # the CLI module is not written yet: the settings model is the next best import
        _run(str(python), "-c", "import worker.settings; worker.settings.Settings()", cwd=tmp_path)
