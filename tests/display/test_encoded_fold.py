"""`DisplayFold.apply_encoded` (models and their JSON text) folds exactly as `apply` does on the parsed events."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

import pytest
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    ReasoningMessageContentEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)

from devtools.sample_runs import load_samples
from tests.display._flows import ALL_RUNS, lines_of, worker_batches
from worker.display import DisplayFold
from worker.display._json import loads_object
from worker.display.bounding import bound_event
from worker.errors import AguiObservationError
from worker.observe import encode_event

STAMP = 1764547200000
DELTA = "a13n.pydantic_ai.part_delta"


def _pair(run_id: str) -> tuple[DisplayFold, DisplayFold]:
    folds = DisplayFold(run_id), DisplayFold(run_id)
    for fold in folds:
        fold.settle_finished()
    return folds


def _feed(parsed: DisplayFold, encoded: DisplayFold, events: Sequence[BaseEvent], source: object = None) -> None:
    bounded = [bound_event(event) for event in events]
    texts = [encode_event(event) for event in bounded]
    parsed.apply([loads_object(text) for text in texts], source)  # type: ignore[arg-type]
    encoded.apply_encoded(bounded, texts, source)  # type: ignore[arg-type]


def _assert_same(parsed: DisplayFold, encoded: DisplayFold, where: str) -> None:
    assert encoded.export_json() == parsed.export_json(), f"folds differ after {where}"
    assert encoded.export() == parsed.export(), f"snapshots differ after {where}"


def _batches_of(lines: Sequence[str]) -> list[tuple[object, tuple[BaseEvent, ...]]]:
    return [(batch.item, batch.events) for batch in worker_batches(tuple(lines)) if batch.events]


@pytest.mark.parametrize("run", ALL_RUNS)
def test_golden_and_synthetic_runs_fold_alike(run: str) -> None:
    batches = _batches_of(lines_of(run))
    parsed, encoded = _pair("root")
    for index, (item, events) in enumerate(batches):
        _feed(parsed, encoded, events, item)
        _assert_same(parsed, encoded, f"batch {index} of {run}")


@pytest.mark.parametrize("sample", load_samples(), ids=lambda sample: sample.name)
def test_sample_runs_fold_alike(sample: object) -> None:
    lines = [line.decode() for line in sample.lines]  # type: ignore[attr-defined]
    parsed, encoded = _pair("root")
    for index, (item, events) in enumerate(_batches_of(lines)):
        _feed(parsed, encoded, events, item)
        if index % 7 == 0:
            _assert_same(parsed, encoded, f"batch {index} of {sample.name}")  # type: ignore[attr-defined]
    _assert_same(parsed, encoded, "the last batch")


class _Kind(StrEnum):
    TOOL_CALL = "tool_call"
    NATIVE = "builtin-tool-call"


def _delta(args: object, *, part: object = 0, kind: object = "tool_call", **extra: object) -> CustomEvent:
    delta = {"part_delta_kind": kind, "args_delta": args, "tool_call_id": f"call-{part}", **extra}
    value = {"event": {"event_kind": "part_delta", "index": part, "delta": delta}, "run_id": "root", "thread_id": "t"}
    return CustomEvent(name=DELTA, value=value, timestamp=STAMP)


def _custom(name: str, value: object, **fields: object) -> CustomEvent:
    return CustomEvent(name=name, value=value, timestamp=STAMP, **fields)


ODD_EVENTS: list[tuple[str, list[BaseEvent]]] = [
    ("plain observations", [_custom("a13n.pydantic_ai.part_start", {"event": {"part": {"part_kind": "text"}}}),
                            _custom("vendor.thing", [1, 2.5, None, "x"]), _custom("vendor.none", None)]),
    ("a subagent's observation", [_custom("vendor.thing", {"a": 1}, subagent_run_id="child")]),
    ("metadata and raw events", [_custom("vendor.thing", {"a": 1}, metadata={"k": 1.5}),
                                 _custom("vendor.thing", {"a": 1}, raw_event={"raw": True})]),
    ("values that parse as something else", [_custom("vendor.tuple", {"event": {"part": ("a", 1)}}),
                                             _custom("vendor.enum", {"event": {"part": {"part_kind": _Kind.NATIVE}}})]),
    ("numbers", [_custom("vendor.big", {"n": 2**70, "m": -(2**65)}), _custom("vendor.float", {"f": 1e16, "g": 0.1}),
                 _custom("vendor.nan", {"f": float("nan")})]),
    ("an observation near its bound", [_custom("vendor.large", {"text": "é" * 3000}),
                                       _custom("vendor.huge", {"text": "x" * 40000})]),
    ("request groups", [_custom("a13n.harness.lifecycle", {"event": {"payload": {"type": "model_request_started"}}}),
                        TextMessageStartEvent(message_id="m", role="assistant", timestamp=STAMP),
                        TextMessageContentEvent(message_id="m", delta="hi", timestamp=STAMP),
                        _custom("a13n.harness.lifecycle", {"event": {"payload": {"type": "model_request_started"}}},
                                subagent_run_id="child"),
                        TextMessageContentEvent(message_id="m", delta=" there", timestamp=STAMP + 1),
                        TextMessageEndEvent(message_id="m", timestamp=STAMP + 2)]),
    ("content without a start, and after the end", [_custom("a13n.harness.lifecycle", {"event": {"payload": {
                                                        "type": "model_request_started"}}}),
                                                    ReasoningMessageContentEvent(message_id="r", delta="x"),
                                                    TextMessageContentEvent(message_id="m", delta="y"),
                                                    TextMessageEndEvent(message_id="m"),
                                                    TextMessageContentEvent(message_id="m", delta="z")]),
    ("content of a subagent or with metadata", [TextMessageContentEvent(message_id="m", delta="a", subagent_run_id="c"),
                                                TextMessageContentEvent(message_id="m", delta="b", metadata={"x": 1})]),
    ("an argument stream", [_delta('{"a":'), _delta(' 1'), _delta('}')]),
    ("argument streams interrupted and switching parts", [_delta('{"a":'), _custom("vendor.thing", {}), _delta("1"),
                                                          _delta("2", part=1), _delta("3", part=1), _delta("4")]),
    ("argument deltas the stream does not take", [_delta("a"), _delta(None), _delta("b"),
                                                  _delta("c", tool_name_delta="t"), _delta("d", kind=_Kind.TOOL_CALL),
                                                  _delta("e", part=(1, 2)), _delta("f", extra=(1,)),
                                                  _delta("g", extra=[1])]),
    ("an argument stream past the observation bound", [_delta("x" * 20000), _delta("y" * 20000), _delta("z")]),
    ("lifecycle events", [RunStartedEvent(thread_id="t", run_id="root", timestamp=STAMP),
                          RunFinishedEvent(thread_id="t", run_id="root", result={"cost": 0.25, "n": 2**70})]),
]  # fmt: skip


@pytest.mark.parametrize(("what", "events"), ODD_EVENTS, ids=[what for what, _ in ODD_EVENTS])
def test_events_off_the_common_shapes_fold_alike(what: str, events: list[BaseEvent]) -> None:
    for batch in ([events], [[event] for event in events]):
        parsed, encoded = _pair("root")
        for index, chunk in enumerate(batch):
            _feed(parsed, encoded, chunk)
            _assert_same(parsed, encoded, f"{what}, event batch {index}")


def test_a_malformed_event_refuses_the_whole_batch_before_anything_is_folded() -> None:
    fold = DisplayFold("root")
    fold.settle_finished()
    good = _custom("vendor.thing", {"a": 1})
    bad = TextMessageContentEvent.model_construct(message_id=7, delta="x")  # type: ignore[arg-type]
    before = fold.export_json()
    with pytest.raises(AguiObservationError):
        fold.apply_encoded([good, bad], [encode_event(good), b'{"type":"TEXT_MESSAGE_CONTENT","messageId":7}'])
    assert fold.export_json() == before
