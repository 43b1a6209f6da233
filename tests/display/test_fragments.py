"""CustomEventAssembler: in-order frames rebuild the event; any anomaly drops data and sets the gap flag."""

from __future__ import annotations

from typing import Any

import pytest
from ag_ui.core import CustomEvent

from worker.display import CustomEventAssembler, FragmentState
from worker.observe import FRAGMENT_EVENT_NAME


def _inner(size: int = 200, name: str = "a13n.harness.context") -> dict[str, Any]:
    event = CustomEvent(timestamp=1700000000000, name=name, value={"blob": "é" * size})
    dumped: dict[str, Any] = event.model_dump(mode="json", by_alias=True)
    return dumped


def _frames(inner: dict[str, Any], *, chunk: int = 64, identity: str = "t:r:3:0") -> list[dict[str, Any]]:
    text = CustomEvent.model_validate(inner).model_dump_json(by_alias=True)
    chunks = [text[i : i + chunk] for i in range(0, len(text), chunk)]
    return [
        {
            "type": "CUSTOM",
            "timestamp": inner["timestamp"],
            "name": FRAGMENT_EVENT_NAME,
            "value": {"id": identity, "index": index, "count": len(chunks), "data": data},
        }
        for index, data in enumerate(chunks)
    ]


def _feed(assembler: CustomEventAssembler, frames: list[dict[str, Any]]) -> list[Any]:
    return [assembler.accept(frame) for frame in frames]


def test_non_fragment_events_pass_through_unchanged() -> None:
    assembler = CustomEventAssembler()
    event = {"type": "CUSTOM", "name": "x", "value": {"a": 1}}
    assert assembler.accept(event) is event
    assert not assembler.gap


def test_in_order_frames_rebuild_the_inner_event() -> None:
    inner = _inner()
    frames = _frames(inner)
    assert len(frames) > 3
    results = _feed(CustomEventAssembler(), frames)
    assert results[:-1] == [None] * (len(frames) - 1)
    assert results[-1] == inner


def test_out_of_order_frame_sets_gap_and_drops_the_assembly() -> None:
    frames = _frames(_inner())
    assembler = CustomEventAssembler()
    assert assembler.accept(frames[0]) is None
    assert assembler.accept(frames[2]) is None  # skipped index 1
    assert assembler.gap
    assert assembler.export().pending == {}
    # The rest of that assembly can never complete.
    assert all(result is None for result in _feed(assembler, frames[3:]))


def test_index_zero_restarts_an_assembly() -> None:
    inner = _inner()
    frames = _frames(inner)
    assembler = CustomEventAssembler()
    _feed(assembler, frames[:3])
    results = _feed(assembler, frames)  # starts again at index 0
    assert results[-1] == inner
    assert not assembler.gap
    assert assembler.export().pending == {}


def test_byte_bound_overflow_sets_gap() -> None:
    frames = _frames(_inner(size=400))
    assembler = CustomEventAssembler(max_bytes=300)
    results = _feed(assembler, frames)
    assert all(result is None for result in results)
    assert assembler.gap
    assert sum(assembly.size for assembly in assembler.export().pending.values()) <= 300


def test_pending_bound_evicts_the_oldest_assembly_with_a_gap() -> None:
    first = _frames(_inner(), identity="a")
    second = _frames(_inner(), identity="b")
    assembler = CustomEventAssembler(max_pending=1)
    assembler.accept(first[0])
    assembler.accept(second[0])
    assert assembler.gap
    assert list(assembler.export().pending) == ["b"]
    assert assembler.accept(first[1]) is None  # "a" was evicted


@pytest.mark.parametrize(
    "value",
    [
        "not a dict",
        {"id": "x", "index": 1, "count": 1, "data": "{}"},  # index outside count
        {"id": "x", "index": 0, "count": 1, "data": 5},  # data not text
        {"id": 3, "index": 0, "count": 1, "data": "{}"},  # id not text
    ],
)
def test_malformed_frame_sets_gap(value: object) -> None:
    assembler = CustomEventAssembler()
    assert assembler.accept({"type": "CUSTOM", "name": FRAGMENT_EVENT_NAME, "value": value}) is None
    assert assembler.gap


def test_complete_but_invalid_payload_sets_gap() -> None:
    frame = {"type": "CUSTOM", "name": FRAGMENT_EVENT_NAME, "value": {"id": "x", "index": 0, "count": 1}}
    assembler = CustomEventAssembler()
    assert assembler.accept({**frame, "value": {**frame["value"], "data": '{"type":"CUST'}}) is None
    assert assembler.gap


def test_nested_fragment_is_refused() -> None:
    frames = _frames(_inner(name=FRAGMENT_EVENT_NAME))
    assembler = CustomEventAssembler()
    assert _feed(assembler, frames)[-1] is None
    assert assembler.gap


def test_export_restore_mid_assembly_continues_exactly() -> None:
    inner = _inner()
    frames = _frames(inner)
    assembler = CustomEventAssembler(max_pending=3)
    _feed(assembler, frames[:2])
    state = FragmentState.model_validate_json(assembler.export().model_dump_json())
    assert state.pending["t:r:3:0"].count == len(frames)
    restored = CustomEventAssembler.restore(state)
    assert restored.max_pending == 3
    assert restored.export() == assembler.export()
    assert _feed(restored, frames[2:])[-1] == inner
    # The exported state is detached: the original still holds its own partial assembly.
    assert _feed(assembler, frames[2:])[-1] == inner


def test_a_restored_assembler_counts_the_bytes_it_holds() -> None:
    frames = _frames(_inner())
    sizes = [len(frame["value"]["data"].encode()) for frame in frames]
    # Room for every frame of the assembly but the last: the bound is reached only by what was held before.
    assembler = CustomEventAssembler(max_bytes=sum(sizes) - 1)
    _feed(assembler, frames[:2])
    restored = CustomEventAssembler.restore(assembler.export())
    assert _feed(restored, frames[2:]) == [None] * (len(frames) - 2)
    assert restored.gap and restored.export().pending == {}


@pytest.mark.parametrize("bounds", [{"max_bytes": 0}, {"max_pending": 0}])
def test_bounds_must_be_positive(bounds: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        CustomEventAssembler(**bounds)
