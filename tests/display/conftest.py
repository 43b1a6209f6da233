"""Every display test runs on both builds of the display fold: the pure-Python reference and the native engine (the
native side skips on a pure installation, and fails where the suite was promised a native build)."""

from __future__ import annotations

import pytest

from tests.native import build_params, use_build


@pytest.fixture(autouse=True, params=build_params())
def build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The build the test's folds and projections are made with: "pure" or "native"."""
    name: str = request.param
    use_build(name, monkeypatch)
    return name
