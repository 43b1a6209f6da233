"""Which build of the conversion core runs: mypyc-compiled modules only while every source matches them.

A build with HARNESS_AGUI_COMPILE=1 leaves compiled modules next to their sources and `_compiled.json` with
the sources' digests. Imported before any other `worker` module, this falls back to the sources for the whole
package (compiled modules call each other directly, so a mix is never safe) when HARNESS_AGUI_PURE=1, when the
shared library or the manifest is missing, or when a source changed since it was compiled.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["compiled", "describe", "fallback_reason"]

_PACKAGE = Path(__file__).resolve().parent
_ROOT = _PACKAGE.parent
_EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)
_RUNTIME = "_runtime__mypyc"  # the shared library of setup.py's group "worker._runtime", which every module imports


class _SourcesOnly:
    """A meta-path finder that loads `worker.*` modules from their `.py` sources, never from extensions."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("worker.") or path is None:
            return None
        for entry in path:
            finder = importlib.machinery.FileFinder(
                entry, (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES)
            )
            spec = finder.find_spec(fullname, target)
            if spec is not None:
                return spec
        return None


def _compiled_modules() -> list[Path]:
    return [path for path in _PACKAGE.rglob("*.so") if path.name.endswith(_EXTENSIONS)]


def _reason() -> str | None:
    """Why the compiled modules must not be used, or None when they match their sources (or there are none)."""
    compiled_modules = _compiled_modules()
    if not compiled_modules:
        return None
    if os.environ.get("HARNESS_AGUI_PURE", "") == "1":
        return "HARNESS_AGUI_PURE=1"
    if not any(path.name.startswith(f"{_RUNTIME}.") for path in compiled_modules):
        return f"mypyc's shared library {_RUNTIME} is missing"
    manifest = _PACKAGE / "_compiled.json"
    try:
        sources: dict[str, str] = json.loads(manifest.read_text())["sources"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"{manifest} is missing or unreadable"
    for name, digest in sorted(sources.items()):
        source = _ROOT / name
        try:
            current = hashlib.sha256(source.read_bytes()).hexdigest()
        except OSError:
            continue  # an installed wheel may ship the compiled module alone
        if current != digest:
            return f"{name} changed since it was compiled (rebuild: scripts/compile.sh)"
    return None


fallback_reason = _reason()
if fallback_reason is not None:
    sys.meta_path.insert(0, _SourcesOnly())
    if fallback_reason != "HARNESS_AGUI_PURE=1":
        warnings.warn(f"running the pure-Python conversion core: {fallback_reason}", RuntimeWarning, stacklevel=1)


def compiled() -> bool:
    """True when the conversion core runs from mypyc-compiled modules."""
    module = importlib.import_module("worker.wire._decode")
    return str(getattr(module, "__file__", "")).endswith(_EXTENSIONS)


def describe() -> str:
    """Which build runs, for logs and benchmarks: "compiled (mypyc)" or "pure Python (<why>)"."""
    return "compiled (mypyc)" if compiled() else f"pure Python ({fallback_reason or 'not compiled'})"
