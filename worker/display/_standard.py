"""Folding of the standard AG-UI events: messages, reasoning, tool calls, and run/subagent lifecycle."""

from __future__ import annotations

from typing import Any, Final

from pydantic import JsonValue

from worker.display._ledger import Ledger, event_time, scope_of
from worker.display.items import ItemKind, ItemState
from worker.errors import AguiObservationError

# Event type -> (item kind, field naming the item's source id).
_SOURCES: Final[dict[str, tuple[ItemKind, str]]] = {
    "TEXT_MESSAGE_START": ("text_message", "messageId"),
    "TEXT_MESSAGE_CONTENT": ("text_message", "messageId"),
    "TEXT_MESSAGE_END": ("text_message", "messageId"),
    "REASONING_MESSAGE_START": ("reasoning_message", "messageId"),
    "REASONING_MESSAGE_CONTENT": ("reasoning_message", "messageId"),
    "REASONING_MESSAGE_END": ("reasoning_message", "messageId"),
    "REASONING_ENCRYPTED_VALUE": ("reasoning_message", "entityId"),
    "TOOL_CALL_START": ("tool_call", "toolCallId"),
    "TOOL_CALL_ARGS": ("tool_call", "toolCallId"),
    "TOOL_CALL_END": ("tool_call", "toolCallId"),
    "TOOL_CALL_RESULT": ("tool_call", "toolCallId"),
}
# Events whose `delta` appends to an accumulated content field.
_APPENDS: Final = {
    "TEXT_MESSAGE_CONTENT": "text",
    "REASONING_MESSAGE_CONTENT": "text",
    "TOOL_CALL_ARGS": "arguments",
}
# The fields besides its item's id of a delta event that changes nothing but its item's text.
_DELTA_FIELDS: Final = frozenset({"type", "timestamp", "delta"})
# Events that complete their item.
_COMPLETES: Final = frozenset({"TEXT_MESSAGE_END", "REASONING_MESSAGE_END", "TOOL_CALL_RESULT"})
# Event fields an item's content mirrors (a variable-length tuple type: compiled, it is read by index).
_MIRRORED: Final[tuple[str, ...]] = (
    "messageId",
    "role",
    "toolCallId",
    "toolCallName",
    "parentMessageId",
    "metadata",
    "subagentRunId",
    "responseGroup",
)
# Events that each become one completed observation holding the whole event.
LIFECYCLE_EVENTS: Final = frozenset(
    {"RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "SUBAGENT_STARTED", "SUBAGENT_FINISHED", "SUBAGENT_ERROR"}
)


def check_event(event: dict[str, Any]) -> None:
    """Refuse, before anything is folded, an event lacking a field the fold reads."""
    kind_name = event.get("type")
    if not isinstance(kind_name, str):
        raise AguiObservationError(f"display fold got an event without a string type: {kind_name!r}")
    source = _SOURCES.get(kind_name)
    if source is not None and not isinstance(event.get(source[1]), str):
        raise AguiObservationError(f"display fold got a {kind_name} event whose {source[1]} is not a string")
    if kind_name in _APPENDS and not isinstance(event.get("delta"), str):
        raise AguiObservationError(f"display fold got a {kind_name} event whose delta is not a string")


def fold_standard(ledger: Ledger, event: dict[str, Any], published: bytes | None = None) -> str | None:
    """Fold one non-CUSTOM event into its item and return the item's id; None for an event type the display does
    not track or an item that was evicted. `published`, when given, is orjson's JSON of `event`."""
    kind_name = event["type"]
    field = _APPENDS.get(kind_name)
    if field is not None:
        grown = _grown(ledger, event, kind_name, field)
        if grown is not None:
            return grown
    if kind_name in LIFECYCLE_EVENTS:
        whole: dict[str, JsonValue] = dict(event)
        return ledger.observe(whole, event_time(event), bounded=False, content_json=published)
    source = _SOURCES.get(kind_name)
    if source is None:
        return None
    kind, id_field = source
    key = ledger.key(kind, str(event[id_field]), event.get("subagentRunId"))
    content = ledger.content_of(key)
    for name in _MIRRORED:
        if name in event:
            content[name] = event[name]
    scope = scope_of(content.get("subagentRunId"))
    group = ledger.group(scope)
    if group is not None and "responseGroup" not in content:
        content["responseGroup"] = group
    if kind_name == "TEXT_MESSAGE_END" and content.get("role") == "assistant":
        sources = ledger.memory_sources.get(scope)
        if sources is not None:
            content["memory_sources"] = [source.model_dump(mode="json") for source in sources]
    if kind_name == "TOOL_CALL_END":
        content["arguments_complete"] = True
    if field is not None:
        ledger.policy.put_text(content, field, str(content.get(field, "")) + event["delta"])
    if kind_name == "REASONING_ENCRYPTED_VALUE":
        content["encrypted_value"] = event.get("encryptedValue")
    if kind_name == "TOOL_CALL_RESULT":
        _put_result(ledger, content, event.get("content", ""))
    state: ItemState = "completed" if kind_name in _COMPLETES else ledger.state_of(key)
    return ledger.put(key, kind, state, content, event)


def _grown(ledger: Ledger, event: dict[str, Any], kind_name: str, field: str) -> str | None:
    """A delta that only appends to an open item's text, as the whole fold below would: the item's id; None when
    anything else could change (a new, finished or evicted item, or a field beyond the id and the delta)."""
    kind, id_field = _SOURCES[kind_name]
    for name in event:
        if name != id_field and name not in _DELTA_FIELDS:
            return None
    key = ledger.key(kind, str(event[id_field]))
    content = ledger.open_content(key)
    if content is None or content.get(id_field) != event[id_field]:
        return None
    if "responseGroup" not in content and ledger.group(scope_of(content.get("subagentRunId"))) is not None:
        return None
    ledger.policy.put_text(content, field, str(content.get(field, "")) + event["delta"])
    ledger.touch(key)
    return key


def _put_result(ledger: Ledger, content: dict[str, JsonValue], result: JsonValue) -> None:
    if not isinstance(result, list):
        ledger.policy.put_text(content, "result", str(result))
        return
    kept: list[JsonValue] = result if ledger.policy.keeps_value(result) else []
    content["result_parts"] = kept
    if not kept:
        content["truncated"] = True
