"""Packaging hook: with HARNESS_AGUI_COMPILE=1 the conversion hot path is compiled with mypyc; else pure Python.

The compiled modules and the pure sources are the same code: `worker._native` falls back to the sources
when HARNESS_AGUI_PURE=1 or when a source no longer matches what was compiled.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# The per-record path: decode, observe, encode and the partition state. Modules defining pydantic models
# stay interpreted (mypyc cannot compile their classes); so does everything that talks to Kafka.
COMPILED = [
    "worker/_value.py",
    "worker/display/_customs.py",
    "worker/display/_failures.py",
    "worker/display/_ids.py",
    "worker/display/_json.py",
    "worker/display/_ledger.py",
    "worker/display/_standard.py",
    "worker/display/bounding.py",
    "worker/display/cadence.py",
    "worker/display/fold.py",
    "worker/display/projection.py",
    "worker/wire/_agent.py",
    "worker/wire/_decode.py",
    "worker/wire/_fields.py",
    "worker/wire/_items.py",
    "worker/wire/_media.py",
    "worker/wire/_redact.py",
    "worker/observe/_content.py",
    "worker/observe/_convert.py",
    "worker/observe/_encode.py",
    "worker/observe/_json.py",
    "worker/observe/_events.py",
    "worker/observe/_observer.py",
    "worker/observe/_parts.py",
    "worker/observe/_state.py",
    "worker/observe/_stream.py",
    "worker/observe/_terminal.py",
    "worker/stream/_build.py",
    "worker/stream/_changelog.py",
    "worker/stream/_core.py",
    "worker/stream/_partition.py",
    "worker/stream/_records.py",
    "worker/stream/_shards.py",
    "worker/stream/_table.py",
]
MANIFEST = "worker/_compiled.json"


def _manifest() -> str:
    """The sha256 of every compiled source, which `worker._native` checks before it uses the compiled code."""
    digests = {path: hashlib.sha256((ROOT / path).read_bytes()).hexdigest() for path in COMPILED}
    return json.dumps({"sources": digests}, indent=1, sort_keys=True) + "\n"


class _BuildWithManifest(build_ext):
    def run(self) -> None:
        super().run()
        target = ROOT / MANIFEST if self.inplace else Path(self.build_lib) / MANIFEST
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_manifest())


def _extensions() -> dict[str, Any]:
    if os.environ.get("HARNESS_AGUI_COMPILE", "0") != "1":
        return {}
    from mypyc.build import mypycify  # noqa: PLC0415  (only a compiling build needs mypy)

    # The group name puts mypyc's shared library inside the package (worker/_runtime__mypyc.*.so), so it
    # travels with it; at the top level an editable install could not find it from another directory.
    return {"ext_modules": mypycify(COMPILED, opt_level="3", debug_level="0", group_name="worker._runtime"),
            "cmdclass": {"build_ext": _BuildWithManifest}}


setup(**_extensions())
