"""One source item of one run to AG-UI events (spec §1b.1, §1b.2, §1b.4, §1b.5); state changes go to a Draft."""

from __future__ import annotations

import re
from typing import Any

from ag_ui.core import BaseEvent, CustomEvent, RunStartedEvent, ToolCallResultEvent

from worker.observe._content import execution_value, public_value, tool_result_content
from worker.observe._events import new_event
from worker.observe._parts import part_delta, part_end, part_start
from worker.observe._state import Draft
from worker.wire import AgentEvent, ExtensionEvent, HarnessEvent, HarnessItem

__all__ = ["convert_event", "harness_custom", "source_value"]

_TOOL_EXTRA_NAME = re.compile(r"^[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*$")
_TOOL_EXTRA_KEYS = frozenset({"type", "tool_call_id", "tool_name", "tool_id", "name", "value"})
_PART_EVENTS = {"part_start": part_start, "part_delta": part_delta, "part_end": part_end}


def source_value(item: HarnessItem, event: Any) -> dict[str, Any]:
    """The CUSTOM value / rawEvent prefix identifying the source item."""
    return {
        "thread_id": item.thread_id,
        "run_id": item.run_id,
        "sequence": item.sequence,
        "occurred_at": item.occurred_iso,
        "event": event,
    }


def _bounded_str(payload: dict[str, Any], key: str) -> bool:
    value = payload.get(key)
    return isinstance(value, str) and 1 <= len(value) <= 256


def _tool_extra_name(payload: Any) -> str | None:
    """The `name` of a valid ToolExtraEventPayload, else None."""
    if not isinstance(payload, dict) or not payload.keys() <= _TOOL_EXTRA_KEYS or "value" not in payload:
        return None
    if payload.get("type", "tool_extra") != "tool_extra":
        return None
    if not all(_bounded_str(payload, key) for key in ("tool_call_id", "tool_name", "tool_id")):
        return None
    name = payload.get("name")
    if not isinstance(name, str) or len(name) > 256 or not _TOOL_EXTRA_NAME.match(name):
        return None
    return name


def harness_custom(item: HarnessItem, ts: int, event: ExtensionEvent) -> CustomEvent:
    """CUSTOM `a13n.harness.<kind>` (or `.tool.<name>`) carrying the redacted extension event."""
    name = f"a13n.harness.{event.kind}"
    if event.kind == "tool":
        tool_name = _tool_extra_name(event.payload)
        if tool_name is not None:
            name = f"{name}.{tool_name}"
    return new_event(CustomEvent, timestamp=ts, name=name, value=source_value(item, event.dump()))


def _fallback(item: HarnessItem, ts: int, kind: str, event: dict[str, Any]) -> CustomEvent:
    return new_event(CustomEvent, timestamp=ts, name=f"a13n.pydantic_ai.{kind}", value=source_value(item, event))


def _tool_result(item: HarnessEvent, ts: int, kind: str, event: dict[str, Any]) -> BaseEvent:
    part = event["part"]
    if part["part_kind"] == "tool-return" and part["outcome"] == "success":
        call_id = part["tool_call_id"]
        return new_event(
            ToolCallResultEvent,
            timestamp=ts,
            message_id=f"{call_id}:result",
            tool_call_id=call_id,
            content=tool_result_content(execution_value(part["content"], part["metadata"])),
            role="tool",
        )
    if part["part_kind"] == "tool-return":
        part = {**part, "content": public_value(execution_value(part["content"], part["metadata"]))}
    projected = {**event, "part": part}
    if kind == "function_tool_result":
        projected["content"] = None
    return _fallback(item, ts, kind, projected)


def _input(item: HarnessEvent, ts: int, event: dict[str, Any]) -> CustomEvent:
    source = event["source"]
    media = event["kind"] == "a13n.input.media"
    return new_event(
        CustomEvent,
        timestamp=ts,
        name="a13n.input.media" if media else f"a13n.input.{source}",
        metadata=event["metadata"],
        value=source_value(
            item,
            {
                "input_id": event["input_id"],
                "source": source,
                "content": event["content"],
                "message_id": f"{item.run_id}:input:{item.sequence}",
                "role": "user" if source in ("user", "steering") else "system",
            },
        ),
    )


def _request_index(event: ExtensionEvent, draft: Draft) -> None:
    payload = event.payload
    if event.kind == "lifecycle" and isinstance(payload, dict) and payload.get("type") == "model_request_started":
        index = payload.get("request_index")
        if isinstance(index, int) and index >= 0:
            draft.request_index = payload["request_index"]  # as sent, not the narrowed int: `true` stays True


def convert_event(item: HarnessEvent, ts: int, draft: Draft) -> list[BaseEvent]:
    """Events for one non-terminal item; parts state changes are staged in `draft`."""
    source = item.event
    if isinstance(source, ExtensionEvent):
        payload = source.payload
        if source.kind == "lifecycle" and isinstance(payload, dict) and payload.get("type") == "run_started":
            return [new_event(RunStartedEvent, timestamp=ts, thread_id=item.thread_id, run_id=item.run_id,
                              protocol_version="1.0")]
        _request_index(source, draft)
        return [harness_custom(item, ts, source)]
    assert isinstance(source, AgentEvent)
    kind, data = source.event_kind, source.data
    handler = _PART_EVENTS.get(kind)
    if handler is not None:
        return handler(item.run_id, ts, data, draft) or [_fallback(item, ts, kind, data)]
    if kind == "capability":
        if data["kind"] in ("a13n.input.text", "a13n.input.media"):
            return [_input(item, ts, data)]
        return [new_event(CustomEvent, timestamp=ts, name=data["kind"], value=source_value(item, data))]
    if kind in {"function_tool_result", "output_tool_result"}:
        return [_tool_result(item, ts, kind, data)]
    if kind == "enqueued_messages":
        reduced: dict[str, Any] = {"event_kind": kind, "enqueue_id": data["enqueue_id"]}
        return [_fallback(item, ts, kind, reduced)]
    if kind == "deferred_tool_results":
        results = data["results"]
        reduced = {"event_kind": kind, "call_ids": list(results["calls"]), "approval_ids": list(results["approvals"])}
        return [_fallback(item, ts, kind, reduced)]
    return [_fallback(item, ts, kind, data)]
