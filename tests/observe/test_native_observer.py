"""The native observer converts exactly as the reference observers do: for every golden source and for generated
runs with inline children, in stream and plain mode, each item's frames byte for byte (or the same refusal, type and
message), and the same continuation after every item."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from tests.native import native_core
from tests.observe._parity import observed_by_both
from tests.observe._runs import wire_runs
from worker.errors import DecodeError
from worker.observe import HarnessAguiObserver, HarnessAguiStreamObserver
from worker.wire import HarnessItem, decode_item, timestamp_ms

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden"
SOURCES = sorted(p for p in GOLDEN.rglob("*.jsonl") if ".agui." not in p.name and ".display." not in p.name)


def _native_item(core: Any, record: bytes, reference: HarnessItem) -> Any:
    item = core.decode(record)
    return item if item is not None else core.import_item(reference, timestamp_ms(reference))


def compare(records: list[bytes], stream: bool) -> int:
    """Feed both observers the records; the number of items observed."""
    core = native_core()
    reference: HarnessAguiObserver = (HarnessAguiStreamObserver if stream else HarnessAguiObserver)(
        retain_events=False)
    native = core.Observer(stream)
    observed = 0
    for record in records:
        try:
            item = decode_item(record)
        except DecodeError:
            continue
        ours = _native_item(core, record, item)
        theirs, got = observed_by_both(reference, item, native, ours)
        assert got == theirs, record[:200]
        assert json.dumps(native.export_data()) == json.dumps(reference.export_data()), record[:200]
        observed += 1
    return observed


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
def test_every_golden_source_converts_identically(stream: bool) -> None:
    observed = sum(compare([ln for ln in path.read_bytes().split(b"\n") if ln.strip()], stream) for path in SOURCES)
    assert observed > 5000


@settings(max_examples=300, deadline=None)
@given(wire_runs())
def test_generated_runs_with_children_convert_identically(run: list[dict[str, Any]]) -> None:
    records = [json.dumps(line).encode() for line in run]
    compare(records, stream=True)
    compare(records, stream=False)


def _terminal_line(result: dict[str, Any]) -> bytes:
    return json.dumps({"thread_id": "thread_a", "run_id": "run-a", "sequence": 1,
                       "occurred_at": "2025-06-01T12:00:00Z", "result": result}).encode()


@pytest.mark.parametrize("result", [
    {"status": "suspended", "suspend_reason": "deferred", "usage": {}, "deferred": {"calls": [], "approvals": []}},
    {"status": "completed", "usage": {"input_tokens": -1, "output_tokens": 2}},
    {"status": "cancelled", "usage": {"input_tokens": 2**53, "output_tokens": 0}},
    {"status": "failed", "usage": {"input_tokens": 1, "details": {"reasoning_tokens": -3}},
     "failure": {"code": "x", "message": "y"}},
], ids=["no-interrupts", "negative-count", "count-beyond-2**53", "negative-reasoning"])
def test_terminals_the_agui_models_refuse_are_refused_alike(result: dict[str, Any]) -> None:
    """Found by tests/fuzz_native.py: a suspended run without interrupts, and usage counts outside 0..2^53, are
    refused by the reference's AG-UI models (pydantic's ValidationError, its message), natively too."""
    started = json.dumps({"thread_id": "thread_a", "run_id": "run-a", "sequence": 0,
                          "occurred_at": "2025-06-01T12:00:00Z",
                          "event": {"schema_version": "1", "kind": "lifecycle", "payload": {"type": "run_started"}}})
    assert compare([started.encode(), _terminal_line(result)], stream=True) == 2
    core = native_core()
    with pytest.raises(ValueError, match="validation error"):
        core.Observer(True).observe(core.decode(_terminal_line(result)))


@pytest.mark.parametrize("name", ["r0001", "s02_tool_roundtrip"])
def test_sequences_beyond_64_bits_convert_identically(name: str) -> None:
    """A sequence is any integer >= 0: beyond 64 bits the native decoder reads it itself (it deferred such records
    to the reference, whose items the native core could not hold) and spells it as Python does in every event."""
    lines = [json.loads(ln) for ln in (GOLDEN / f"{name}.jsonl").read_bytes().split(b"\n") if ln.strip()]
    records = [json.dumps({**line, "sequence": 2**70 + line["sequence"]}).encode() for line in lines]
    core = native_core()
    assert all(core.decode(record) is not None for record in records)
    assert compare(records, stream=True) == len(records)
    assert compare(records, stream=False) == len(records)
