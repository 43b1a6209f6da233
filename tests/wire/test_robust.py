"""Arbitrary damage to real records yields a decoded item or a DecodeError, never another exception."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from worker.errors import AguiObservationError, DecodeError
from worker.observe import HarnessAguiStreamObserver, encode_event
from worker.wire import decode_item

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden"
SAMPLES = [
    json.loads(line)
    for name in ("s02_tool_roundtrip", "s04_suspended", "s08_extensions", "c03_child_nested", "r0003",
                 "edges/edges", "edges/edges2")
    for line in (GOLDEN / f"{name}.jsonl").read_text(encoding="utf-8").split("\n")
    if line.strip()
]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**66), 2**66) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += _paths(item, (*prefix, index))
    return out


def _damage(record: Any, path: tuple[Any, ...], replacement: Any, delete: bool) -> Any:
    if not path:
        return replacement
    record = json.loads(json.dumps(record))
    parent = record
    for step in path[:-1]:
        parent = parent[step]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    return record


@settings(max_examples=400, deadline=None)
@given(data=st.data(), replacement=JSON, delete=st.booleans())
def test_damaged_records_decode_or_raise_decode_error(data: st.DataObject, replacement: Any, delete: bool) -> None:
    record = data.draw(st.sampled_from(SAMPLES))
    path = data.draw(st.sampled_from(_paths(record)))
    damaged = json.dumps(_damage(record, path, replacement, delete)).encode()
    try:
        item = decode_item(damaged)
    except DecodeError as exc:
        assert exc.path.startswith("$") and exc.reason
        return
    observer = HarnessAguiStreamObserver(retain_events=False)
    try:
        events = observer.observe(item)
    except (AguiObservationError, ValidationError):
        return
    for event in events:
        encode_event(event)


@settings(max_examples=200, deadline=None)
@given(blob=st.binary(max_size=64) | st.text(max_size=64))
def test_arbitrary_bytes_never_escape_as_other_errors(blob: bytes | str) -> None:
    with contextlib.suppress(DecodeError):
        decode_item(blob)
