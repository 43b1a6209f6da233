"""Part events (start, delta, end) to AG-UI message and tool-call events (spec §1b.3)."""

from __future__ import annotations

from typing import Any

from ag_ui.core import (
    BaseEvent,
    ReasoningEncryptedValueEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)

from worker.errors import AguiObservationError
from worker.observe._events import new_event
from worker.observe._json import sorted_json
from worker.observe._state import CursorKind, Draft, PartCursor

__all__ = ["close_parts", "part_delta", "part_end", "part_start"]

_KIND_CHANGED = "Pydantic part kind changed before its end event"
_IDENTITY_CHANGED = "Pydantic part identity changed before its end event"
_TOOL_CHANGED = "Pydantic tool-call identity changed before its end event"
_SUFFIX = {"text": "text", "reasoning": "reasoning", "tool_call": "tool"}


def _part_id(run_id: str, draft: Draft, index: int, kind: str) -> str:
    return f"{run_id}:request-{draft.request_index}:part-{index}:{kind}"


def _signature(ts: int, message_id: str, value: str) -> ReasoningEncryptedValueEvent:
    return new_event(ReasoningEncryptedValueEvent, timestamp=ts, subtype="message", entity_id=message_id,
                     encrypted_value=value)


def part_start(run_id: str, ts: int, event: dict[str, Any], draft: Draft) -> list[BaseEvent]:
    """Open a cursor for text, thinking and tool-call parts; it overwrites any cursor at that index."""
    part, index = event["part"], event["index"]
    kind = part["part_kind"]
    if kind == "text":
        message_id = part["id"] or _part_id(run_id, draft, index, "text")
        content = part["content"]
        draft.writable_parts()[index] = PartCursor("text", message_id, emitted_content=bool(content))
        out: list[BaseEvent] = [new_event(TextMessageStartEvent, timestamp=ts, message_id=message_id, role="assistant")]
        if content:
            out.append(new_event(TextMessageContentEvent, timestamp=ts, message_id=message_id, delta=content))
        return out
    if kind == "thinking":
        message_id = _part_id(run_id, draft, index, "reasoning")
        content, signature = part["content"], part["signature"]
        draft.writable_parts()[index] = PartCursor(
            "reasoning", message_id, emitted_content=bool(content), emitted_signature=bool(signature)
        )
        out = [new_event(ReasoningMessageStartEvent, timestamp=ts, message_id=message_id, role="reasoning")]
        if content:
            out.append(new_event(ReasoningMessageContentEvent, timestamp=ts, message_id=message_id, delta=content))
        if signature:
            out.append(_signature(ts, message_id, signature))
        return out
    if kind in {"tool-call", "builtin-tool-call"}:
        draft.writable_parts()[index] = PartCursor("tool_call", part["tool_call_id"], part["tool_name"])
    return []


def _open(run_id: str, draft: Draft, index: int, kind: CursorKind, part_id: str | None = None) -> PartCursor:
    cursor = PartCursor(kind, part_id or _part_id(run_id, draft, index, _SUFFIX[kind]))
    draft.writable_parts()[index] = cursor
    return cursor


def part_delta(run_id: str, ts: int, event: dict[str, Any], draft: Draft) -> list[BaseEvent]:
    """Stream text and reasoning deltas; tool-call deltas only update the cursor."""
    delta, index = event["delta"], event["index"]
    kind = delta["part_delta_kind"]
    existing = draft.parts.get(index)
    if kind == "text":
        text = delta["content_delta"]
        if not text:
            return []
        out: list[BaseEvent] = []
        if existing is None:
            existing = _open(run_id, draft, index, "text")
            out.append(new_event(TextMessageStartEvent, timestamp=ts, message_id=existing.part_id, role="assistant"))
        elif existing.kind != "text":
            raise AguiObservationError(_KIND_CHANGED)
        out.append(new_event(TextMessageContentEvent, timestamp=ts, message_id=existing.part_id, delta=text))
        if not existing.emitted_content:
            draft.writable_parts()[index] = _with(existing, content=True)
        return out
    if kind == "thinking":
        out = []
        if existing is None:
            existing = _open(run_id, draft, index, "reasoning")
            out.append(
                new_event(ReasoningMessageStartEvent, timestamp=ts, message_id=existing.part_id, role="reasoning")
            )
        elif existing.kind != "reasoning":
            raise AguiObservationError(_KIND_CHANGED)
        text, signature = delta["content_delta"], delta["signature_delta"]
        cursor = existing
        if text:
            out.append(new_event(ReasoningMessageContentEvent, timestamp=ts, message_id=cursor.part_id, delta=text))
            cursor = _with(cursor, content=True)
        if signature:
            out.append(_signature(ts, cursor.part_id, signature))
            cursor = _with(cursor, signature=True)
        if cursor is not existing:
            draft.writable_parts()[index] = cursor
        return out
    if kind == "tool_call":
        call_id = delta["tool_call_id"]
        if existing is None:
            existing = _open(run_id, draft, index, "tool_call", call_id)
        elif existing.kind != "tool_call":
            raise AguiObservationError(_KIND_CHANGED)
        elif call_id and call_id != existing.part_id:
            raise AguiObservationError(_TOOL_CHANGED)
        name = delta["tool_name_delta"]
        if name:
            draft.writable_parts()[index] = _with(existing, tool_name=f"{existing.tool_name or ''}{name}")
    return []


def _with(
    cursor: PartCursor, *, tool_name: str | None = None, content: bool = False, signature: bool = False
) -> PartCursor:
    """`cursor` with a new tool name and/or content or signature now emitted (flags only ever turn on); built
    directly, cheaper than `dataclasses.replace`."""
    return PartCursor(cursor.kind, cursor.part_id, cursor.tool_name if tool_name is None else tool_name,
                      cursor.emitted_content or content, cursor.emitted_signature or signature)


def _ending(existing: PartCursor | None, kind: CursorKind, part_id: str) -> PartCursor | None:
    if existing is None:
        return None
    if existing.kind != kind:
        raise AguiObservationError(_KIND_CHANGED)
    if existing.part_id != part_id:
        raise AguiObservationError(_IDENTITY_CHANGED)
    return existing


def part_end(run_id: str, ts: int, event: dict[str, Any], draft: Draft) -> list[BaseEvent]:
    """Close the cursor at the index (always popped), emitting whatever was not streamed yet."""
    part, index = event["part"], event["index"]
    existing = draft.parts.get(index)
    if existing is not None:
        draft.writable_parts().pop(index)
    kind = part["part_kind"]
    if kind == "text":
        message_id = part["id"] or (existing.part_id if existing is not None else None)
        message_id = message_id or _part_id(run_id, draft, index, "text")
        cursor = _ending(existing, "text", message_id)
        out: list[BaseEvent] = []
        if cursor is None:
            out.append(new_event(TextMessageStartEvent, timestamp=ts, message_id=message_id, role="assistant"))
        content = part["content"]
        if content and (cursor is None or not cursor.emitted_content):
            out.append(new_event(TextMessageContentEvent, timestamp=ts, message_id=message_id, delta=content))
        out.append(new_event(TextMessageEndEvent, timestamp=ts, message_id=message_id))
        return out
    if kind == "thinking":
        message_id = existing.part_id if existing is not None else _part_id(run_id, draft, index, "reasoning")
        cursor = _ending(existing, "reasoning", message_id)
        out = []
        if cursor is None:
            out.append(new_event(ReasoningMessageStartEvent, timestamp=ts, message_id=message_id, role="reasoning"))
        content, signature = part["content"], part["signature"]
        if content and (cursor is None or not cursor.emitted_content):
            out.append(new_event(ReasoningMessageContentEvent, timestamp=ts, message_id=message_id, delta=content))
        if signature and (cursor is None or not cursor.emitted_signature):
            out.append(_signature(ts, message_id, signature))
        out.append(new_event(ReasoningMessageEndEvent, timestamp=ts, message_id=message_id))
        return out
    if kind == "tool-call":
        call_id = existing.part_id if existing is not None else part["tool_call_id"]
        _ending(existing, "tool_call", call_id)
        out = [new_event(ToolCallStartEvent, timestamp=ts, tool_call_id=call_id, tool_call_name=part["tool_name"])]
        args = part["args"]
        if args is not None:
            text = args if isinstance(args, str) else sorted_json(args)
            out.append(new_event(ToolCallArgsEvent, timestamp=ts, tool_call_id=call_id, delta=text))
        out.append(new_event(ToolCallEndEvent, timestamp=ts, tool_call_id=call_id))
        return out
    return []


def close_parts(ts: int, draft: Draft) -> list[BaseEvent]:
    """End every open text and reasoning cursor in insertion order; tool cursors are discarded."""
    out: list[BaseEvent] = []
    for cursor in draft.parts.values():
        if cursor.kind == "text":
            out.append(new_event(TextMessageEndEvent, timestamp=ts, message_id=cursor.part_id))
        elif cursor.kind == "reasoning":
            out.append(new_event(ReasoningMessageEndEvent, timestamp=ts, message_id=cursor.part_id))
    if draft.parts:
        draft.parts = {}
        draft.written = True
    return out
