"""Which build of the conversion core this installation runs, told by the file Python imports its modules from.

A wheel built with HARNESS_AGUI_COMPILE=1 holds each module of setup.py's list as a mypyc extension module beside
its source, and Python imports the extension; a plain or editable install has the sources alone. One module
answers for all of them: a build compiles the whole list or none of it.
"""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

__all__ = ["compiled", "describe"]

_PROBE = "worker.wire._decode"  # listed in setup.py's COMPILED
_PROBE_DIR = Path(__file__).resolve().parent / "wire"


def _probe_file() -> str:
    # Found afresh on the path, not read from the loaded module: mypyc sets the `__file__` of a module that its
    # shared library imports as if the library sat at the top of the package tree (…/worker/worker/wire/…).
    spec = importlib.machinery.PathFinder.find_spec(_PROBE, [str(_PROBE_DIR)])
    return str(spec.origin) if spec is not None and spec.origin else f"{_PROBE} (not found)"


def _is_extension(file: str) -> bool:
    return file.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def compiled() -> bool:
    """True when the conversion core runs from mypyc extension modules."""
    return _is_extension(_probe_file())


def describe() -> str:
    """The build and the file that shows it, for logs and benchmarks: "compiled (mypyc): <path>.so" or
    "pure Python: <path>.py"."""
    file = _probe_file()
    return f"{'compiled (mypyc)' if _is_extension(file) else 'pure Python'}: {file}"
