"""Which build of the conversion core this installation runs: the native one when the Rust extension module
`worker._native_core` is installed and loads, else the pure-Python sources (the reference, and the fallback where no
wheel fits). `HARNESS_AGUI_PURE=1` makes an installation with the module run the pure sources, as a build without it
does (the tests of the conversion core run both builds in one installation).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

__all__ = ["PURE_ENV", "core", "describe", "native"]

PURE_ENV = "HARNESS_AGUI_PURE"
_PACKAGE = Path(__file__).resolve().parent
_loaded: list[ModuleType | None] = []


def core() -> ModuleType | None:
    """The native module, or None when this installation has none (or `HARNESS_AGUI_PURE=1` sets it aside); found
    once per process."""
    if not _loaded:
        module = None
        if os.environ.get(PURE_ENV) != "1":
            try:
                module = importlib.import_module("worker._native_core")
            except ImportError:
                module = None
        _loaded.append(module)
    return _loaded[0]


def native() -> bool:
    """True when the native module runs the conversion core."""
    return core() is not None


def describe() -> str:
    """The build and the file that shows it, for logs and benchmarks: "native (Rust): <path>" or
    "pure Python: <path>.py"."""
    module = core()
    if module is not None:
        return f"native (Rust): {Path(str(module.__file__)).resolve()}"
    return f"pure Python: {_PACKAGE / 'wire' / '_decode.py'}"
