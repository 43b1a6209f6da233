"""The fold's own observer path: bounded AG-UI events for huge values, failed tool results from the source item."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.display._synthetic import BIG
from tests.display._synthetic import HTTP_IMAGE as IMAGE
from worker.display import MAX_FIELD_CHARS, DisplayFold, item_id
from worker.wire import HarnessItem, decode_item

RUN = "run-bounds"


def _item(sequence: int, event: dict[str, Any]) -> HarnessItem:
    envelope = {
        "thread_id": "thread_bounds",
        "run_id": RUN,
        "sequence": sequence,
        "occurred_at": f"2025-06-01T12:00:{sequence:02d}Z",
        "event": event,
    }
    return decode_item(json.dumps(envelope))


def _tool_call_end(args: str) -> HarnessItem:
    part = {
        "tool_name": "write",
        "args": args,
        "tool_call_id": "call_1",
        "tool_kind": None,
        "id": None,
        "provider_name": None,
        "provider_details": None,
        "part_kind": "tool-call",
    }
    return _item(1, {"index": 0, "part": part, "next_part_kind": None, "event_kind": "part_end"})


def _tool_result(content: Any, outcome: str) -> HarnessItem:
    part = {
        "tool_name": "write",
        "content": content,
        "tool_call_id": "call_1",
        "tool_kind": None,
        "metadata": None,
        "timestamp": "2025-06-01T12:00:02Z",
        "outcome": outcome,
        "retry": None,
        "part_kind": "tool-return",
    }
    return _item(2, {"part": part, "content": None, "event_kind": "function_tool_result"})


def _events_and_records(fold: DisplayFold, item: HarnessItem) -> tuple[list[dict[str, Any]], list[Any]]:
    events = fold.events(item)
    return events, fold.fold(events, source=item)


@pytest.mark.parametrize(
    ("policy", "bounded"),
    [({}, True), ({"full_content": True}, False), ({"retain_content": True}, False)],
)
def test_observed_args_and_result_are_bounded_unless_content_is_kept(policy: dict[str, bool], bounded: bool) -> None:
    fold = DisplayFold(RUN, **policy)
    events, _ = _events_and_records(fold, _tool_call_end(BIG))
    [args] = [event for event in events if event["type"] == "TOOL_CALL_ARGS"]
    assert args["delta"] == (BIG[: MAX_FIELD_CHARS + 1] if bounded else BIG)
    events, records = _events_and_records(fold, _tool_result(BIG, "success"))
    [result] = [event for event in events if event["type"] == "TOOL_CALL_RESULT"]
    assert result["content"] == (BIG[: MAX_FIELD_CHARS + 1] if bounded else BIG)
    content = fold.items[item_id(RUN, "tool_call", "call_1")].content
    kept = BIG[:MAX_FIELD_CHARS] if bounded else BIG
    assert (content["arguments"], content["result"]) == (kept, kept)
    assert content.get("truncated", False) is bounded
    assert records[-1].item is not None and records[-1].item.state == "completed"


def test_failed_tool_result_with_media_reports_its_parts_as_json() -> None:
    fold = DisplayFold(RUN)
    _events_and_records(fold, _tool_call_end('{"path": "/a"}'))
    events, records = _events_and_records(fold, _tool_result([IMAGE, "caption"], "failed"))
    assert [event["name"] for event in events] == ["a13n.pydantic_ai.function_tool_result"]
    ref = records[-1].item
    assert ref is not None and ref.id == item_id(RUN, "tool_call", "call_1")
    parts = [
        {"type": "image", "source": {"type": "url", "value": IMAGE["url"], "mimeType": "image/png"}},
        {"type": "text", "text": "caption"},
    ]
    assert ref.state == "failed"
    assert ref.failure == {"code": "tool_failed", "message": json.dumps(parts)}
    content = fold.items[ref.id].content
    assert (content["outcome"], content["retry"]) == ("failed", False)


def test_failed_tool_result_message_is_cut_to_4096_characters() -> None:
    fold = DisplayFold(RUN)
    _events_and_records(fold, _tool_call_end("{}"))
    _, records = _events_and_records(fold, _tool_result("z" * 5000, "denied"))
    ref = records[-1].item
    assert ref is not None and ref.failure == {"code": "tool_failed", "message": "z" * 4096}


def test_failure_needs_an_existing_tool_item_and_a_record() -> None:
    fold = DisplayFold(RUN, processor=lambda source, event: None)  # drops every event
    _events_and_records(fold, _tool_call_end("{}"))
    events, records = _events_and_records(fold, _tool_result("no", "failed"))
    assert events == [] and records == [] and not fold.items


def test_processor_runs_before_the_bounds() -> None:
    seen: list[int] = []

    def count_args(source: HarnessItem, event: Any) -> Any:
        if getattr(event, "delta", None) is not None:
            seen.append(len(event.delta))
        return event

    fold = DisplayFold(RUN, processor=count_args)
    events = fold.events(_tool_call_end(BIG))
    assert seen == [len(BIG)]
    assert [len(event["delta"]) for event in events if "delta" in event] == [MAX_FIELD_CHARS + 1]
