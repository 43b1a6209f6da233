"""Folding of the standard AG-UI events: messages, reasoning, tool calls, and run/subagent lifecycle."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from ag_ui.core import BaseEvent, ReasoningMessageContentEvent, TextMessageContentEvent
from pydantic import JsonValue

from worker.display._ledger import Ledger, event_time, scope_of, stamp_time
from worker.display.items import ItemKind, ItemState
from worker.errors import AguiObservationError

# Event type -> (item kind, field naming the item's source id).
_SOURCES: dict[str, tuple[ItemKind, str]] = {
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
_APPENDS = {
    "TEXT_MESSAGE_CONTENT": "text",
    "REASONING_MESSAGE_CONTENT": "text",
    "TOOL_CALL_ARGS": "arguments",
}
# Events that complete their item.
_COMPLETES = frozenset({"TEXT_MESSAGE_END", "REASONING_MESSAGE_END", "TOOL_CALL_RESULT"})
# Event fields an item's content mirrors.
_MIRRORED = (
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
LIFECYCLE_EVENTS = frozenset(
    {"RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "SUBAGENT_STARTED", "SUBAGENT_FINISHED", "SUBAGENT_ERROR"}
)


def check_event(event: Mapping[str, Any]) -> None:
    """Refuse, before anything is folded, an event lacking a field the fold reads."""
    kind_name = event.get("type")
    if not isinstance(kind_name, str):
        raise AguiObservationError(f"display fold got an event without a string type: {kind_name!r}")
    source = _SOURCES.get(kind_name)
    if source is not None and not isinstance(event.get(source[1]), str):
        raise AguiObservationError(f"display fold got a {kind_name} event whose {source[1]} is not a string")
    if kind_name in _APPENDS and not isinstance(event.get("delta"), str):
        raise AguiObservationError(f"display fold got a {kind_name} event whose delta is not a string")


def fold_standard(ledger: Ledger, event: Mapping[str, Any]) -> str | None:
    """Fold one non-CUSTOM event into its item and return the item's id; None for an event type the display does
    not track or an item that was evicted."""
    kind_name = event["type"]
    if kind_name in LIFECYCLE_EVENTS:
        whole: dict[str, JsonValue] = dict(event)
        return ledger.put(ledger.observation_key(), "observation", "completed", whole, event_time(event))
    source = _SOURCES.get(kind_name)
    if source is None:
        return None
    kind, id_field = source
    key = ledger.key(kind, str(event[id_field]), event.get("subagentRunId"))
    content = ledger.content_of(key)
    content.update({name: event[name] for name in _MIRRORED if name in event})
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
    field = _APPENDS.get(kind_name)
    if field is not None:
        ledger.policy.put_text(content, field, str(content.get(field, "")) + event["delta"])
    if kind_name == "REASONING_ENCRYPTED_VALUE":
        content["encrypted_value"] = event.get("encryptedValue")
    if kind_name == "TOOL_CALL_RESULT":
        _put_result(ledger, content, event.get("content", ""))
    state: ItemState = "completed" if kind_name in _COMPLETES else ledger.state_of(key)
    return ledger.put(key, kind, state, content, event_time(event))


# Message content events folded from their models: event class -> item kind.
_APPENDED: dict[type[BaseEvent], ItemKind] = {
    TextMessageContentEvent: "text_message",
    ReasoningMessageContentEvent: "reasoning_message",
}
_LIFECYCLE_MEMBERS: dict[int, tuple[object, bool]] = {}
LIFECYCLE = 1  # an event folded as one completed observation holding the whole event
APPEND = 2  # a message content delta


def standard_plan(event: BaseEvent) -> int:
    """How `fold_standard_encoded` folds the event (LIFECYCLE, APPEND), or 0 when only its parsed JSON can be
    folded. Reads no fold state."""
    if _is_lifecycle(event.type):
        return LIFECYCLE
    if type(event) in _APPENDED and not event.__pydantic_extra__:
        fields = event.__dict__
        plain = fields["raw_event"] is None and fields["metadata"] is None and fields["subagent_run_id"] is None
        if plain and type(fields["message_id"]) is str and type(fields["delta"]) is str:
            return APPEND
    return 0


def _is_lifecycle(kind: object) -> bool:
    """Whether an event's `type` names a LIFECYCLE_EVENTS event; an enum member's answer is remembered by identity
    (members live as long as their class, and hashing one costs a Python call)."""
    found = _LIFECYCLE_MEMBERS.get(id(kind))
    if found is not None and found[0] is kind:
        return found[1]
    if not isinstance(kind, Enum):
        return type(kind) is str and kind in LIFECYCLE_EVENTS
    value = kind.value
    answer = type(value) is str and value in LIFECYCLE_EVENTS
    _LIFECYCLE_MEMBERS[id(kind)] = (kind, answer)
    return answer


def fold_standard_encoded(ledger: Ledger, event: BaseEvent, plan: int, encoded: bytes) -> str | None:
    """`fold_standard` of the event's JSON text `encoded` for a `standard_plan` other than 0, from the model (and,
    for LIFECYCLE, `encoded` as the content JSON): the same item."""
    at = stamp_time(event.timestamp)
    if plan == LIFECYCLE:
        return ledger.put_json(ledger.observation_key(), "observation", encoded, at)
    fields = event.__dict__
    kind = _APPENDED[type(event)]
    key = ledger.key(kind, fields["message_id"])
    content = ledger.content_of(key)
    content["messageId"] = fields["message_id"]
    group = ledger.group(scope_of(content.get("subagentRunId")))
    if group is not None and "responseGroup" not in content:
        content["responseGroup"] = group
    ledger.policy.put_text(content, "text", str(content.get("text", "")) + fields["delta"])
    return ledger.put(key, kind, ledger.state_of(key), content, at)


def _put_result(ledger: Ledger, content: dict[str, JsonValue], result: JsonValue) -> None:
    if not isinstance(result, list):
        ledger.policy.put_text(content, "result", str(result))
        return
    kept: list[JsonValue] = result if ledger.policy.keeps_value(result) else []
    content["result_parts"] = kept
    if not kept:
        content["truncated"] = True
