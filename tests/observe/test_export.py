"""`export_data`, the observer's continuation built without pydantic, equals the continuation model's JSON dump."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.errors import AguiObservationError
from worker.observe import HarnessAguiStreamObserver, ObserverContinuation, announced_child, encode_event
from worker.observe._continuation import StateModel
from worker.observe._state import PartCursor, RunState, state_data
from worker.wire import HarnessItem, decode_item

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden"
RUNS = ["c01_child_completed", "c02_child_failed", "c03_child_nested", "s07_errors", "s09_big_fragments", "r0007",
        "edges/edges", "edges/edges2", "damaged/d002"]


def _items(run: str) -> list[HarnessItem]:
    out = []
    for line in (GOLDEN / f"{run}.jsonl").read_bytes().split(b"\n"):
        if line.strip() and not line.startswith(b"#"):
            try:
                out.append(decode_item(line))
            except ValueError:
                continue
    return out


def _observe(observer: HarnessAguiStreamObserver, item: object) -> list[bytes | str]:
    try:
        return [encode_event(e) for e in observer.observe(item)]
    except ValueError as exc:
        return [type(exc).__name__]


@pytest.mark.parametrize("run", RUNS)
def test_export_data_equals_the_models_dump_after_every_item(run: str) -> None:
    observer = HarnessAguiStreamObserver(retain_events=False)
    assert observer.export_data() == observer.export().model_dump(mode="json")
    for item in _items(run):
        _observe(observer, item)
        data = observer.export_data()
        assert data == observer.export().model_dump(mode="json")
        assert ObserverContinuation.model_validate_json(orjson.dumps(data)) == observer.export()


@pytest.mark.parametrize("run", RUNS)
def test_an_observer_restored_from_export_data_at_any_item_continues_byte_identically(run: str) -> None:
    items = _items(run)
    whole = HarnessAguiStreamObserver(retain_events=False)
    expected = [_observe(whole, item) for item in items]
    for cut in range(len(items) + 1):
        first = HarnessAguiStreamObserver(retain_events=False)
        for item in items[:cut]:
            _observe(first, item)
        data = orjson.loads(orjson.dumps(first.export_data()))
        restored = HarnessAguiStreamObserver.restore(ObserverContinuation.model_validate(data))
        assert [_observe(restored, item) for item in items[cut:]] == expected[cut:], cut


def test_a_true_request_index_survives_export_and_restore() -> None:
    # `true` is kept as sent, because part ids spell it: "request-True"
    state = RunState(request_index=True)
    data = state_data(state)
    assert data["request_index"] is True
    assert StateModel.model_validate(data).to_state().request_index is True
    assert StateModel.model_validate({"request_index": 1}).to_state().request_index == 1


_TEXT = st.text(max_size=8)
_CURSORS = st.builds(PartCursor, st.sampled_from(["text", "reasoning", "tool_call"]), _TEXT,
                     st.none() | _TEXT, st.booleans(), st.booleans())  # fmt: skip


def _states(depth: int) -> st.SearchStrategy[RunState]:
    children = st.just({}) if depth == 0 else st.dictionaries(_TEXT, _states(depth - 1), max_size=3)
    return st.builds(
        RunState, st.booleans() | st.integers(0, 2**40), st.dictionaries(st.integers(0, 50), _CURSORS, max_size=4),
        children, st.dictionaries(_TEXT, _TEXT, max_size=3),
    )  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(state=_states(2))
def test_state_data_equals_the_state_models_json_dump(state: RunState) -> None:
    assert state_data(state) == StateModel.of(state).model_dump(mode="json")
    assert StateModel.model_validate(state_data(state)).to_state() == state


def test_export_data_is_refused_while_resuming_as_export_is() -> None:
    observer = HarnessAguiStreamObserver(retain_events=False)
    observer._resuming = True
    with pytest.raises(AguiObservationError):
        observer.export_data()


def test_announced_child_names_the_children_of_started_inline_delegations_only() -> None:
    items = _items("c03_child_nested")
    announced = [(i, announced_child(item)) for i, item in enumerate(items) if announced_child(item) is not None]
    children = {item.run_id for item in items} - {items[0].run_id}
    assert len(announced) == 2
    assert {child for _, child in announced} == children
    for at, child in announced:  # each child speaks only after its announcement
        assert min(i for i, item in enumerate(items) if item.run_id == child) > at
    assert announced_child(object()) is None
