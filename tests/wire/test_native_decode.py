"""The native decoder reads every record it accepts exactly as `decode_item` does, and leaves the rest to it: every
line of every golden source, and damaged records (the damage of test_robust). An item the reference decoder made
reads into the same native item."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.native import native_core
from tests.wire.test_robust import JSON, SAMPLES, _damage, _paths
from worker.errors import DecodeError
from worker.wire import AgentEvent, HarnessItem, HarnessRunResultEvent, decode_item, timestamp_ms

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden"
LINES = [line for path in sorted(GOLDEN.rglob("*.jsonl")) if ".agui." not in path.name and ".display." not in path.name
         for line in path.read_bytes().split(b"\n") if line.strip()]


def reference_dump(item: HarnessItem) -> dict[str, Any]:
    """What `Item.dump()` holds, read off a reference item."""
    out: dict[str, Any] = {"thread_id": item.thread_id, "run_id": item.run_id, "sequence": item.sequence,
                           "occurred_iso": item.occurred_iso, "timestamp_ms": timestamp_ms(item),
                           "wire_size": item.wire_size}
    if isinstance(item, HarnessRunResultEvent):
        r = item.result
        out["result"] = {"status": r.status, "usage": r.usage, "output": r.output, "failure": r.failure,
                         "suspend_reason": r.suspend_reason, "deferred": r.deferred}
    elif isinstance(item.event, AgentEvent):
        out["event"] = {"event_kind": item.event.event_kind, "data": item.event.data}
    else:
        out["event"] = {"kind": item.event.kind, "payload": item.event.payload,
                        "schema_version": item.event.schema_version}
    return out


def _same(native: Any, reference: HarnessItem) -> None:
    # json.dumps keeps key order and spells floats exactly: equal text, equal items
    assert json.dumps(native.dump()) == json.dumps(reference_dump(reference))


def _check(record: bytes) -> bool:
    """Compare the decoders on one record; whether the native one read it."""
    core = native_core()
    native = core.decode(record)
    try:
        reference = decode_item(record)
    except DecodeError:
        assert native is None, record
        return False
    if native is not None:
        _same(native, reference)
    _same(core.import_item(reference, timestamp_ms(reference)), reference)
    return native is not None


def test_golden_records_decode_identically_and_mostly_natively() -> None:
    read = sum(_check(line) for line in LINES)
    assert len(LINES) > 5000
    assert read > 0.9 * len(LINES), f"the native decoder read {read} of {len(LINES)} golden records"


@settings(max_examples=1000, deadline=None)
@given(data=st.data(), replacement=JSON, delete=st.booleans())
def test_damaged_records_decode_identically_or_go_to_the_reference(data: st.DataObject, replacement: Any,
                                                                  delete: bool) -> None:
    record = data.draw(st.sampled_from(SAMPLES))
    path = data.draw(st.sampled_from(_paths(record)))
    _check(json.dumps(_damage(record, path, replacement, delete)).encode())


@settings(max_examples=300, deadline=None)
@given(blob=st.binary(max_size=64))
def test_arbitrary_bytes_are_left_to_the_reference(blob: bytes) -> None:
    _check(blob)


def test_decode_record_reads_what_decode_item_reads_and_raises_its_fault() -> None:
    """`decode_record`, the worker's decoder: the native item, else the reference's item read into a native one, else
    the reference's DecodeError with its message."""
    core = native_core()
    deferred = 0
    for record in [*LINES, *(json.dumps(_damage(SAMPLES[0], ("sequence",), value, False)).encode()
                             for value in (2**70, -1, "1", 1.0, True))]:
        try:
            reference = decode_item(record)
        except DecodeError as exc:
            with pytest.raises(DecodeError) as raised:
                core.decode_record(record)
            assert str(raised.value) == str(exc)
            continue
        deferred += core.decode(record) is None
        _same(core.decode_record(record), reference)
    assert deferred > 0  # the reference's reading is used
