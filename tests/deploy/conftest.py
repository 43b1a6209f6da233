"""Fixtures for the deploy tests: the cached helm binary and a chart renderer that parses the YAML."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "harness-agui-worker"
Render = Callable[..., list[dict[str, Any]]]


def helm_path() -> Path:
    """Where scripts/install-tools.sh puts helm (same cache rule as that script)."""
    cache = os.environ.get("HARNESS_WORKER_CACHE") or str(Path.home() / ".cache" / "harness-agui-worker")
    return Path(cache) / "bin" / "helm"


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., subprocess.CompletedProcess[str]]:
    path = helm_path()
    if not os.access(path, os.X_OK):
        pytest.fail(f"helm not found at {path}: run scripts/install-tools.sh (it builds helm v3.22.0 once)")
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(path), *args], check=False, capture_output=True, text=True, env=env, timeout=120
        )
        if check and done.returncode != 0:
            pytest.fail(f"helm {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done

    return run


@pytest.fixture
def render(helm: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path) -> Render:
    """Render the chart with the given values (a dict merged over values.yaml); returns the parsed objects."""

    def _render(values: dict[str, Any] | None = None, release: str = "rel") -> list[dict[str, Any]]:
        overrides = tmp_path / "values.yaml"
        overrides.write_text(yaml.safe_dump(values or {}))
        out = helm("template", release, str(CHART), "--namespace", "streams", "-f", str(overrides)).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]

    return _render


@pytest.fixture
def render_error(helm: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path) -> Callable[..., str]:
    """Render values that must be refused; returns helm's error text."""

    def _fail(values: dict[str, Any]) -> str:
        overrides = tmp_path / "bad-values.yaml"
        overrides.write_text(yaml.safe_dump(values))
        done = helm("template", "rel", str(CHART), "-f", str(overrides), check=False)
        assert done.returncode != 0, f"helm accepted {values}:\n{done.stdout[:2000]}"
        return done.stderr

    return _fail
