"""Digests of the bytes a worker publishes for the golden runs, and the stored expectation they are compared to.

`tests/data/golden-bytes.json` holds, per case, the number of records and a SHA-256 of their bytes in a canonical
order, recorded from the code as it was before a refactor that must not change one byte; `HARNESS_AGUI_RECORD_BYTES=1`
rewrites a case instead of comparing it (only on purpose: the file is the proof).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

EXPECTED = Path(__file__).resolve().parent / "data" / "golden-bytes.json"
_WORKER_VERSION = re.compile(rb'"worker":"[^"]*"')


class Digest:
    """A running SHA-256 of records, each fed as the repr of its fields (bytes, str, int and None only)."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.records = 0

    def add(self, *fields: object) -> None:
        self._sha.update(repr(fields).encode())
        self._sha.update(b"\n")
        self.records += 1

    def add_all(self, rows: Iterable[tuple[Any, ...]]) -> None:
        for row in rows:
            self.add(*row)

    def summary(self) -> dict[str, Any]:
        return {"records": self.records, "sha256": self._sha.hexdigest()}


def changelog_value(value: bytes | None) -> bytes | None:
    """A changelog value without the version of the worker that wrote it (a release changes it, a refactor not)."""
    return None if value is None else _WORKER_VERSION.sub(b'"worker":"-"', value)


def check(case: str, got: dict[str, Any]) -> None:
    """Compare `got` with the stored expectation of `case`, or store it when recording."""
    stored: dict[str, Any] = json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}
    if os.environ.get("HARNESS_AGUI_RECORD_BYTES") == "1":
        stored[case] = got
        EXPECTED.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
        return
    assert case in stored, f"{EXPECTED.name} holds no expectation for {case!r}"
    want = stored[case]
    changed = sorted(name for name in set(want) | set(got) if want.get(name) != got.get(name))
    assert not changed, f"{case}: the bytes of {changed} differ from {EXPECTED.name}: " + "; ".join(
        f"{name} {want.get(name)} -> {got.get(name)}" for name in changed
    )
