"""The compiled conversion core is used only while it matches its sources; otherwise the sources run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import worker._native as native

ROOT = Path(__file__).resolve().parent.parent
PROBE = "import worker._native as n; print(n.compiled()); print(n.fallback_reason)"


def _compiled_tree(dest: Path) -> Path:
    """A copy of the package with its compiled modules, mypyc's shared library and the manifest."""
    if not native.compiled():
        pytest.skip("the conversion core is not compiled here: run scripts/compile.sh (scripts/test.sh does)")
    shutil.copytree(ROOT / "worker", dest / "worker", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _python(code: str, cwd: Path, path: Path | None, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in `cwd` with `path` (or nothing) as PYTHONPATH."""
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path is not None:
        base["PYTHONPATH"] = str(path)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=False,
                          timeout=120, env={**base, **env})


def _probe(tree: Path, **env: str) -> tuple[list[str], str]:
    done = _python(PROBE, tree, tree, **env)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines(), done.stderr


def test_the_suite_runs_the_compiled_core_when_the_build_promised_it(tmp_path: Path) -> None:
    if os.environ.get("HARNESS_AGUI_EXPECT_COMPILED") != "1":
        pytest.skip("HARNESS_AGUI_EXPECT_COMPILED is not set (scripts/test.sh sets it after compiling)")
    assert native.fallback_reason is None
    assert native.compiled()
    # the installed package, from a directory that is not the checkout: every part of the build travels with it
    done = _python(PROBE, tmp_path, None, HARNESS_AGUI_PURE="")
    assert done.stdout.split() == ["True", "None"], done.stdout + done.stderr


def test_an_unchanged_copy_runs_compiled(tmp_path: Path) -> None:
    tree = _compiled_tree(tmp_path)
    assert _probe(tree, HARNESS_AGUI_PURE="") == (["True", "None"], "")


def test_a_source_changed_after_compiling_runs_every_module_from_source(tmp_path: Path) -> None:
    tree = _compiled_tree(tmp_path)
    source = tree / "worker" / "observe" / "_parts.py"
    source.write_text(source.read_text() + "\n# edited after the build\n")
    lines, stderr = _probe(tree, HARNESS_AGUI_PURE="")
    assert lines == ["False", "worker/observe/_parts.py changed since it was compiled (rebuild: scripts/compile.sh)"]
    assert "RuntimeWarning: running the pure-Python conversion core" in stderr
    modules = _python(
        "import worker, sys; print(sorted(m for m, v in sys.modules.items() if m.startswith('worker.')"
        " and str(getattr(v, '__file__', '')).endswith('.so')))", tree, tree, HARNESS_AGUI_PURE="",
    )
    assert modules.returncode == 0, modules.stderr
    assert modules.stdout.strip() == "[]"  # not even the unchanged modules: compiled code calls itself directly


def test_a_missing_manifest_and_the_pure_switch_both_run_the_sources(tmp_path: Path) -> None:
    tree = _compiled_tree(tmp_path)
    assert _probe(tree, HARNESS_AGUI_PURE="1") == (["False", "HARNESS_AGUI_PURE=1"], "")
    (tree / "worker" / "_compiled.json").unlink()
    lines, stderr = _probe(tree, HARNESS_AGUI_PURE="")
    assert lines[0] == "False" and lines[1].endswith("_compiled.json is missing or unreadable")
    assert "RuntimeWarning" in stderr
    for shared in (tree / "worker").glob("_runtime__mypyc.*"):
        shared.unlink()
    lines, _ = _probe(tree, HARNESS_AGUI_PURE="")
    assert lines == ["False", "mypyc's shared library _runtime__mypyc is missing"]


def _convert_corpus(out: Path, **env: str) -> dict[str, bytes]:
    inputs = sorted(
        p for p in (ROOT / "tests" / "data" / "golden").rglob("*.jsonl") if ".agui." not in p.name
        and ".display." not in p.name
    )
    out.mkdir()
    for observer in ("stream", "plain"):
        subprocess.run(
            [sys.executable, "-W", "error::RuntimeWarning", "-m", "worker", "convert", "--observer", observer,
             "--out-dir", str(out / observer), *map(str, inputs)],
            cwd=ROOT, capture_output=True, check=False, timeout=300, env={**os.environ, **env},
        )  # exit 1 is expected: some corpus files hold bad lines, written as error lines
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_the_pure_sources_convert_the_corpus_byte_for_byte_like_the_running_build(tmp_path: Path) -> None:
    """The fallback is the same program: every golden file, both observers, identical output and error lines."""
    running = _convert_corpus(tmp_path / "running", HARNESS_AGUI_PURE=os.environ.get("HARNESS_AGUI_PURE", ""))
    pure = _convert_corpus(tmp_path / "pure", HARNESS_AGUI_PURE="1")
    assert len(running) > 200
    assert running.keys() == pure.keys()
    differing = [name for name in running if running[name] != pure[name]]
    assert differing == []
