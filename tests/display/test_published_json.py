"""Shortcuts of the fold change nothing: a fold given each event's published JSON makes the same items as one that
writes them itself, whatever the CUSTOM event's fields; a delta that only appends text folds as the whole fold
folds a delta carrying more fields."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.display._events import BASE_TS, args_delta, custom, text, tool
from worker.display import MAX_FIELD_CHARS, MAX_OBSERVATION_BYTES, DisplayFold

_LIFECYCLE = {"kind": "lifecycle", "payload": {"type": "run_started", "note": "héllo \u2028 \x7f"}}
_REQUEST = {"kind": "lifecycle", "payload": {"type": "model_request_started"}}

_WEIGHTED = args_delta(2, '{"n":', BASE_TS + 13)
_WEIGHTED["value"]["weight"] = 0.5  # a float: measured by the stdlib, as orjson may spell it otherwise

CUSTOMS: list[dict[str, Any]] = [
    custom("a13n.harness.lifecycle", _LIFECYCLE, BASE_TS),
    custom("a13n.harness.lifecycle", _LIFECYCLE, BASE_TS + 1, metadata={"display": True}),
    {**custom("a13n.harness.usage", {"kind": "usage"}, BASE_TS + 2), "subagentRunId": "run-child"},
    {"type": "CUSTOM", "timestamp": BASE_TS + 3, "name": "vendor.no_value", "metadata": {"a": 1}},
    {"type": "CUSTOM", "timestamp": -5, "name": "vendor.negative_time", "value": [1, 2]},
    {"type": "CUSTOM", "name": "vendor.no_time", "value": {"x": None}, "metadata": None},
    {"type": "CUSTOM", "timestamp": BASE_TS + 4, "name": 7, "value": "a name that is no string"},
    custom("vendor.large", {"blob": "y" * MAX_OBSERVATION_BYTES}, BASE_TS + 5),
    text("START", "m1", BASE_TS + 6),
    text("CONTENT", "m1", BASE_TS + 7, "hel"),
    text("END", "m1", BASE_TS + 8),
    # Argument streams, sized from their published JSON: escapes and a float in the value, a subagent's field.
    args_delta(0, '{"q":"héllo \x7f', BASE_TS + 9),
    args_delta(0, ' more"}', BASE_TS + 10),
    {**args_delta(1, "{}", BASE_TS + 11), "subagentRunId": "run-child"},
    custom("a13n.harness.lifecycle", _REQUEST, BASE_TS + 12),
    _WEIGHTED,
    args_delta(3, "y" * MAX_OBSERVATION_BYTES, BASE_TS + 14),
    # Lifecycle events, whose observation holds the whole event.
    {"type": "RUN_STARTED", "timestamp": BASE_TS + 15, "threadId": "thread_t", "runId": "run-t"},
    {"type": "RUN_FINISHED", "timestamp": BASE_TS + 16, "threadId": "thread_t", "runId": "run-t",
     "result": {"text": "dône \u2028", "score": 1.25}},
]

DELTAS: list[dict[str, Any]] = [
    text("START", "m1", BASE_TS),
    text("CONTENT", "m1", BASE_TS + 1, "hel"),
    custom("a13n.harness.lifecycle", _REQUEST, BASE_TS + 2),  # a response group opens: the next delta joins it
    text("CONTENT", "m1", BASE_TS + 3, "lo"),
    {"type": "REASONING_MESSAGE_START", "timestamp": BASE_TS + 4, "messageId": "r1", "role": "assistant"},
    {"type": "REASONING_MESSAGE_CONTENT", "timestamp": BASE_TS + 5, "messageId": "r1", "delta": "think"},
    tool("START", "c1", BASE_TS + 6, toolCallName="calc"),
    tool("ARGS", "c1", BASE_TS + 7, delta='{"a":'),
    tool("ARGS", "c1", BASE_TS + 8, delta="1}"),
    text("CONTENT", "m1", BASE_TS + 9, "x" * MAX_FIELD_CHARS),  # cut at the bound
    text("CONTENT", "m1", BASE_TS + 10, "more"),
    text("END", "m1", BASE_TS + 11),
    text("CONTENT", "m1", BASE_TS + 12, "after its end"),
    {"type": "TOOL_CALL_ARGS", "timestamp": BASE_TS + 13, "toolCallId": "c2", "delta": "no start"},
]


def _folds() -> tuple[DisplayFold, DisplayFold]:
    folds = DisplayFold("run-t"), DisplayFold("run-t")
    for fold in folds:
        fold.keep_finished_as_json()
    return folds


@pytest.mark.parametrize("count", range(1, len(CUSTOMS) + 1))
def test_published_json_changes_nothing(count: int) -> None:
    events = CUSTOMS[:count]
    written, given = _folds()
    written.apply([dict(event) for event in events])
    given.apply([dict(event) for event in events], encoded=[orjson.dumps(event) for event in events])
    assert given.export_json() == written.export_json()
    assert given.export() == written.export()


@pytest.mark.parametrize("count", range(1, len(DELTAS) + 1))
def test_a_delta_folds_as_one_with_more_fields(count: int) -> None:
    events = DELTAS[:count]
    short, whole = _folds()
    short.apply([dict(event) for event in events])
    # rawEvent is a field the fold does not read, but a delta carrying it takes the whole fold.
    whole.apply([{**event, "rawEvent": {"n": 1}} if "delta" in event else dict(event) for event in events])
    assert short.export_json() == whole.export_json()
