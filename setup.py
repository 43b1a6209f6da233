"""Packaging hook: with HARNESS_AGUI_COMPILE=1 the conversion hot path is compiled with mypyc; else pure Python.

A compiled wheel ships each listed module twice, as a mypyc extension module and as its source; Python imports
the extension. A plain or editable install (`pip install .`, `pip install -e .`) runs the sources.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup

ROOT = Path(__file__).resolve().parent
# The per-record path: decode, observe, encode and the partition state. Modules defining pydantic models
# stay interpreted (mypyc cannot compile their classes); so does everything that talks to Kafka.
# One path per line; a listed file that does not exist stops every build, compiled or not, naming it.
COMPILED = [
    "worker/_framing.py",
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
    "worker/stream/_display_batch.py",
    "worker/stream/_partition.py",
    "worker/stream/_records.py",
    "worker/stream/_shards.py",
    "worker/stream/_table.py",
]


def _listed_sources() -> list[str]:
    """COMPILED, once every listed file exists: a missing one stops the build with its module's name."""
    missing = [path for path in COMPILED if not (ROOT / path).is_file()]
    if missing:
        names = ", ".join(f"{path.removesuffix('.py').replace('/', '.')} ({path})" for path in missing)
        raise SystemExit(f"setup.py: COMPILED lists modules that do not exist: {names}; remove or rename them there")
    return COMPILED


def _extensions() -> dict[str, Any]:
    sources = _listed_sources()
    if os.environ.get("HARNESS_AGUI_COMPILE", "0") != "1":
        return {}
    if {"editable_wheel", "develop", "--inplace", "-i"} & set(sys.argv[1:]):
        raise SystemExit("setup.py: HARNESS_AGUI_COMPILE=1 builds a wheel (pip wheel, pip install .); an editable "
                         "install or build_ext --inplace would leave compiled modules beside the sources")
    from mypyc.build import mypycify  # noqa: PLC0415  (only a compiling build needs mypy)

    # The group name puts mypyc's shared library inside the package (worker/_runtime__mypyc.*.so), so it
    # is installed with it.
    return {"ext_modules": mypycify(sources, opt_level="3", debug_level="0", group_name="worker._runtime")}


setup(**_extensions())
