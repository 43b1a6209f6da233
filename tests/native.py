"""The installation's native module, for the tests that compare it with the pure-Python reference: skipped on a pure
build, a failure when the suite was promised a native one (scripts/test.sh sets HARNESS_AGUI_EXPECT_NATIVE)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

NATIVE_PROMISED = os.environ.get("HARNESS_AGUI_EXPECT_NATIVE") == "1"


def native_core() -> ModuleType:
    """`worker._native_core`, whatever HARNESS_AGUI_PURE says (a parity test runs both builds in one process)."""
    try:
        return importlib.import_module("worker._native_core")
    except ImportError as exc:
        if NATIVE_PROMISED:
            pytest.fail(f"the suite was promised a native build, but worker._native_core does not load: {exc}")
        pytest.skip("the installed build is pure: no native module to compare")


def build_params() -> list[str]:
    """The builds a test of the conversion core runs on, as fixture parameters."""
    return ["pure", "native"]


def use_build(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `worker._native.core()` answer for build `name` ("pure" or "native") for the rest of the test."""
    from worker import _native  # noqa: PLC0415  (the installed package, imported after the suite's checks)

    module = native_core() if name == "native" else None
    monkeypatch.setattr(_native, "_loaded", [module])
