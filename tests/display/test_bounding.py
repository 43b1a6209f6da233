"""Payload bounds: big texts, results and observations are cut unless full_content/retain_content."""

from __future__ import annotations

from typing import Any

import pytest
from ag_ui.core import TextMessageContentEvent, TextPart, ToolCallArgsEvent, ToolCallResultEvent

from tests.display._events import BASE_TS, args_delta, custom, text, tool
from worker.display import (
    MAX_FIELD_CHARS,
    MAX_OBSERVATION_BYTES,
    DisplayFold,
    bound_event,
    bounding_processor,
    json_size,
)

BIG = "x" * (MAX_FIELD_CHARS + 10)
POLICIES = [
    pytest.param({}, True, id="bounded"),
    pytest.param({"full_content": True}, False, id="full_content"),
    pytest.param({"retain_content": True}, False, id="retain_content"),
]


def _content(fold: DisplayFold, event_id: str) -> dict[str, Any]:
    return dict(fold.items[event_id].content)


def test_bound_event_cuts_result_text_and_args_one_past_the_bound() -> None:
    result = ToolCallResultEvent(message_id="c:result", tool_call_id="c", content=BIG)
    cut = bound_event(result)
    assert isinstance(cut, ToolCallResultEvent) and cut.content == BIG[: MAX_FIELD_CHARS + 1]
    args = bound_event(ToolCallArgsEvent(tool_call_id="c", delta=BIG))
    assert isinstance(args, ToolCallArgsEvent) and len(args.delta) == MAX_FIELD_CHARS + 1


def test_bound_event_replaces_oversized_part_lists_only() -> None:
    small = ToolCallResultEvent(message_id="m", tool_call_id="c", content=[TextPart(text="ok")])
    assert bound_event(small) is small
    big = ToolCallResultEvent(message_id="m", tool_call_id="c", content=[TextPart(text=BIG)])
    replaced = bound_event(big)
    assert isinstance(replaced, ToolCallResultEvent) and isinstance(replaced.content, list)
    assert [part.model_dump() for part in replaced.content] == [
        {"type": "text", "text": "Result parts omitted: display size limit exceeded."}
    ]


def test_bound_event_leaves_other_events_alone() -> None:
    event = TextMessageContentEvent(message_id="m", delta=BIG)
    assert bound_event(event) is event
    exact = ToolCallResultEvent(message_id="m", tool_call_id="c", content="y" * MAX_FIELD_CHARS)
    assert bound_event(exact) is exact


def test_bounding_processor_applies_the_callers_processor_first() -> None:
    calls: list[object] = []

    def drop_args(source: object, event: Any) -> Any:
        calls.append(source)
        return None if isinstance(event, ToolCallArgsEvent) else event

    bounded = bounding_processor(drop_args, bounded=True)
    assert bounded("src", ToolCallArgsEvent(tool_call_id="c", delta="{}")) is None
    result = bounded("src", ToolCallResultEvent(message_id="m", tool_call_id="c", content=BIG))
    assert isinstance(result, ToolCallResultEvent) and len(result.content) == MAX_FIELD_CHARS + 1
    unbounded = bounding_processor(None, bounded=False)
    whole = unbounded("src", ToolCallResultEvent(message_id="m", tool_call_id="c", content=BIG))
    assert isinstance(whole, ToolCallResultEvent) and whole.content == BIG
    assert calls == ["src", "src"]


@pytest.mark.parametrize(("policy", "bounded"), POLICIES)
def test_message_text_bound(policy: dict[str, bool], bounded: bool) -> None:
    fold = DisplayFold("run-t", **policy)
    records = fold.fold(
        [
            text("START", "m1", BASE_TS),
            text("CONTENT", "m1", BASE_TS + 1, BIG[:MAX_FIELD_CHARS]),
            text("CONTENT", "m1", BASE_TS + 2, "tail"),
            text("END", "m1", BASE_TS + 3),
        ]
    )
    item = records[-1].item
    assert item is not None and item.state == "completed"
    content = _content(fold, item.id)
    if bounded:
        assert content["text"] == BIG[:MAX_FIELD_CHARS] and content["truncated"] is True
    else:
        assert content["text"] == BIG[:MAX_FIELD_CHARS] + "tail" and "truncated" not in content


@pytest.mark.parametrize(("policy", "bounded"), POLICIES)
def test_tool_result_and_arguments_bound(policy: dict[str, bool], bounded: bool) -> None:
    fold = DisplayFold("run-t", **policy)
    records = fold.fold(
        [
            tool("START", "c1", BASE_TS, toolCallName="write"),
            tool("ARGS", "c1", BASE_TS, delta=BIG),
            tool("END", "c1", BASE_TS),
            tool("RESULT", "c1", BASE_TS + 5, messageId="c1:result", content=BIG, role="tool"),
        ]
    )
    item = records[-1].item
    assert item is not None and item.state == "completed" and item.kind == "tool_call"
    content = _content(fold, item.id)
    expected = BIG[:MAX_FIELD_CHARS] if bounded else BIG
    assert content["arguments"] == expected and content["result"] == expected
    assert content["arguments_complete"] is True
    assert ("truncated" in content) is bounded


@pytest.mark.parametrize(("policy", "bounded"), POLICIES)
def test_result_parts_bound(policy: dict[str, bool], bounded: bool) -> None:
    parts = [{"type": "text", "text": BIG}]
    fold = DisplayFold("run-t", **policy)
    records = fold.fold([tool("RESULT", "c1", BASE_TS, messageId="c1:result", content=parts, role="tool")])
    assert records[0].item is not None
    content = _content(fold, records[0].item.id)
    assert content["result_parts"] == ([] if bounded else parts)
    assert content.get("truncated", False) is bounded


@pytest.mark.parametrize(
    ("policy", "name", "omitted"),
    [
        ({}, "a13n.harness.context", True),
        ({"full_content": True}, "a13n.harness.context", True),
        ({"full_content": True}, "a13n.context.compaction_summary", False),
        ({"retain_content": True}, "a13n.harness.context", False),
    ],
)
def test_observation_value_bound(policy: dict[str, bool], name: str, omitted: bool) -> None:
    payload = {"schema_version": "1", "kind": "context", "payload": {"type": "x", "blob": "é" * 6000}}
    event = custom(name, payload, BASE_TS)
    assert json_size(event["value"]) > MAX_OBSERVATION_BYTES  # 6000 chars, but 36000 escaped JSON bytes
    fold = DisplayFold("run-t", **policy)
    [record] = fold.fold([event])
    assert record.item is not None and record.item.kind == "observation"
    content = _content(fold, record.item.id)
    assert content["name"] == name
    assert content["value"] == ({"omitted": True} if omitted else event["value"])


def test_small_observation_is_kept_whole() -> None:
    event = custom("a13n.harness.state", {"schema_version": "1", "kind": "state", "payload": {"a": 1}}, BASE_TS)
    fold = DisplayFold("run-t")
    [record] = fold.fold([event])
    assert record.item is not None
    assert _content(fold, record.item.id) == {"name": "a13n.harness.state", "value": event["value"]}


@pytest.mark.parametrize(("policy", "omitted"), [({}, True), ({"retain_content": True}, False)])
def test_streamed_arguments_fold_into_one_observation_until_the_bound(policy: dict[str, bool], omitted: bool) -> None:
    chunk = "a" * 20000
    fold = DisplayFold("run-t", **policy)
    records = fold.fold([args_delta(1, chunk, BASE_TS + n, sequence=n) for n in range(3)])
    ids = {record.item.id for record in records if record.item is not None}
    assert len(ids) == 1 and len(fold.items) == 1
    content = _content(fold, ids.pop())
    if omitted:
        assert content["value"] == {"omitted": True}
    else:
        assert content["value"]["event"]["delta"]["args_delta"] == chunk * 3


def test_streamed_arguments_make_no_item_with_full_content() -> None:
    fold = DisplayFold("run-t", full_content=True)
    records = fold.fold([args_delta(1, "{}", BASE_TS)])
    assert records[0].item is None and not fold.items
