"""Folding of CUSTOM events: authored inputs, tool observations, streamed arguments, plain observations."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from datetime import datetime
from json.encoder import encode_basestring_ascii
from typing import Any

import orjson
from ag_ui.core import CustomEvent
from pydantic import JsonValue

from worker.display._json import ORJSON_AGREES, loads_object
from worker.display._ledger import Ledger, event_time, scope_of, stamp_time
from worker.display.bounding import MAX_OBSERVATION_BYTES, OMITTED, ContentPolicy, json_size
from worker.display.fragments import CustomEventAssembler
from worker.display.items import ItemState
from worker.display.memory import memory_sources
from worker.display.snapshot import ArgumentStream
from worker.observe import FRAGMENT_EVENT_NAME

__all__ = ["ARGUMENTS", "AUTHORED_INPUT_EVENT_NAMES", "PLAIN", "CustomFolder", "custom_plan"]

AUTHORED_INPUT_EVENT_NAMES = frozenset({"a13n.input.user", "a13n.input.steering"})
_MEDIA_INPUT = "a13n.input.media"
_AUTHORED_SOURCES = frozenset({"user", "steering"})
_PART_DELTA = "a13n.pydantic_ai.part_delta"
_PART_EVENTS = frozenset({"a13n.pydantic_ai.part_start", "a13n.pydantic_ai.part_end", _PART_DELTA})
_TOOL_RESULTS = frozenset({"a13n.pydantic_ai.function_tool_result", "a13n.pydantic_ai.output_tool_result"})
_EDIT_APPLIED = "a13n.filesystem.edit_applied"
_TOOL_IMAGES = frozenset({"a13n.tool_images", "a13n.harness-ui.tool_images"})
_MCP_APPS = frozenset({"a13n.harness-ui.mcp_apps", "a13n.mcp_apps"})
_SUPPLEMENTS = frozenset({_EDIT_APPLIED, *_TOOL_IMAGES, *_MCP_APPS})
_SUMMARIES = frozenset({"a13n.context.handoff_summary", "a13n.context.compaction_summary"})
_NATIVE_PARTS = frozenset({"builtin-tool-call", "builtin-tool-return"})
_FAILED_OUTCOMES = frozenset({"failed", "denied", "interrupted"})


def _argument_delta(event: Mapping[str, Any]) -> tuple[JsonValue, str] | None:
    """For a streamed tool-call argument observation: the part it continues and the text it appends."""
    if event.get("type") != "CUSTOM" or event.get("name") != _PART_DELTA:
        return None
    value = event.get("value")
    source = value.get("event") if isinstance(value, dict) else None
    delta = source.get("delta") if isinstance(source, dict) else None
    if not isinstance(delta, dict) or delta.get("part_delta_kind") != "tool_call":
        return None
    text = delta.get("args_delta")
    if not isinstance(text, str) or delta.get("tool_name_delta"):
        return None
    assert isinstance(value, dict) and isinstance(source, dict)
    identity = {**source, "delta": {**delta, "args_delta": None}}
    return [_PART_DELTA, value.get("thread_id"), value.get("run_id"), identity], text


def _nested(value: object, field: str) -> dict[str, JsonValue] | None:
    found = value.get(field) if isinstance(value, dict) else None
    return found if isinstance(found, dict) else None


class HeldArguments:
    """The open argument stream as the folder holds it (`ArgumentStream` is its exported form)."""

    __slots__ = ("at", "event", "key", "sequence", "size", "stream")

    def __init__(  # noqa: PLR0917  # ArgumentStream's fields, in its order
        self, stream: JsonValue, key: str, at: datetime, sequence: int, event: dict[str, Any] | None, size: int
    ) -> None:
        self.stream = stream
        self.key = key
        self.at = at
        self.sequence = sequence
        self.event = event
        self.size = size

    @classmethod
    def of(cls, exported: ArgumentStream) -> HeldArguments:
        """The held stream of an exported one (whose values it takes over)."""
        return cls(exported.stream, exported.key, exported.at, exported.sequence, exported.event, exported.size)

    def to_json(self) -> bytes:
        """`export().model_dump_json()` as bytes (orjson writes the same text for these fields when it agrees)."""
        if ORJSON_AGREES:
            fields = {"stream": self.stream, "key": self.key, "at": self.at, "sequence": self.sequence,
                      "event": self.event, "size": self.size}  # fmt: skip
            with contextlib.suppress(TypeError, orjson.JSONEncodeError):
                return orjson.dumps(fields, option=orjson.OPT_UTC_Z)
        exported = self.export()
        return exported.__pydantic_serializer__.to_json(exported)

    def export(self) -> ArgumentStream:
        """The exported form; it shares values with this stream until copied."""
        return ArgumentStream(
            stream=self.stream, key=self.key, at=self.at, sequence=self.sequence, event=self.event, size=self.size
        )


# Types the fast path compares as the parsed JSON would: an argument stream's identity holds only these.
_SCALARS = frozenset({str, int, float, bool, type(None)})
# Names whose fold is more than an observation (or may be): they always go through the parsed event.
_NOT_PLAIN = frozenset({
    FRAGMENT_EVENT_NAME, *AUTHORED_INPUT_EVENT_NAMES, _MEDIA_INPUT, "a13n.harness.context", *_TOOL_RESULTS,
    *_SUPPLEMENTS,
})  # fmt: skip
_LIFECYCLE = "a13n.harness.lifecycle"
PLAIN = 1  # a CUSTOM event folded as one completed observation
ARGUMENTS = 2  # a streamed tool-call argument delta
_MISSING = object()


def _opaque(value: object) -> bool:
    """Whether the fast path cannot tell what `value` parses as (anything but plain JSON data)."""
    kind = type(value)
    return kind is not dict and kind is not list and kind not in _SCALARS


def _field(value: object, name: str) -> object:
    """`value[name]` of a dict; None for anything else or a missing name."""
    return value.get(name) if type(value) is dict else None


def custom_plan(event: CustomEvent, encoded: bytes, policy: ContentPolicy) -> tuple[int, bytes]:
    """How `CustomFolder.fold_encoded` folds the event whose JSON text is `encoded` (PLAIN with the observation's
    content JSON, ARGUMENTS), or (0, b"") when only the parsed event can be folded. Reads no fold state."""
    fields = event.__dict__
    name, value = fields["name"], fields["value"]
    if (policy.unbounded or type(name) is not str or name in _NOT_PLAIN or fields["raw_event"] is not None
            or fields["metadata"] is not None or event.__pydantic_extra__):  # fmt: skip
        return 0, b""
    source = _field(value, "event")
    part = _field(source, "part")
    inner = _field(source, "delta" if name == _PART_DELTA else "payload")
    if _opaque(value) or _opaque(source) or _opaque(part) or _opaque(inner):
        return 0, b""
    tag = _field(part, "part_kind")
    if not _plain_text(tag) or (type(tag) is str and tag in _NATIVE_PARTS):
        return 0, b""
    tag = _field(inner, "part_delta_kind" if name == _PART_DELTA else "type")
    if not _plain_text(tag):
        return 0, b""
    if name == _PART_DELTA and tag == "tool_call":
        return ARGUMENTS, b""
    stamp = fields["timestamp"]
    head = b'{"type":"CUSTOM"'
    if stamp is not None:
        if type(stamp) is not int:
            return 0, b""
        head += b',"timestamp":%d' % stamp
    subagent, subagent_json = fields["subagent_run_id"], b""
    if subagent is not None:
        if type(subagent) is not str:
            return 0, b""
        subagent_json = b',"subagentRunId":' + orjson.dumps(subagent)
    name_json = orjson.dumps(name)
    head += subagent_json + b',"name":' + name_json + b',"value":'
    if not encoded.startswith(head) or not encoded.endswith(b"}"):
        return 0, b""
    text = encoded[len(head) : -1]
    if 6 * len(text) > MAX_OBSERVATION_BYTES:  # may be over the bound: measured on the parsed value
        return 0, b""
    return PLAIN, b"".join((b'{"name":', name_json, b',"value":', text, subagent_json, b"}"))


def _plain_text(value: object) -> bool:
    """Whether `value` compares with text as its parsed form would (no str subclass such as an enum)."""
    return not isinstance(value, str) or type(value) is str


class CustomFolder:
    """Folds CUSTOM events after fragment reassembly; holds the assembler and the open argument stream."""

    def __init__(self, assembler: CustomEventAssembler, arguments: ArgumentStream | None) -> None:
        self.assembler = assembler
        self.arguments = None if arguments is None else HeldArguments.of(arguments)
        self.completed: Mapping[str, Any] | None = None  # the whole CUSTOM event the last `fold` completed

    def fold(self, ledger: Ledger, event: Mapping[str, Any]) -> str | None:
        self.completed = None
        streamed = _argument_delta(event)
        if streamed is not None:
            return None if ledger.policy.full_content else self._fold_arguments(ledger, event, *streamed)
        whole = self.assembler.accept(event)
        if whole is None:
            return None
        self.completed = whole
        name = whole.get("name")
        value: JsonValue = whole.get("value")
        source = _nested(value, "event")
        payload = _nested(source, "payload")
        scope = scope_of(whole.get("subagentRunId"))
        request_started = payload is not None and payload.get("type") == "model_request_started"
        if name == "a13n.harness.lifecycle" and request_started:
            ledger.response_groups[scope] = f"{ledger.run_id}:{ledger.attempt}:{ledger.sequence}"
        if name == "a13n.harness.context" and payload is not None:
            self._note_memory(ledger, scope, payload)
        media = name == _MEDIA_INPUT and source is not None and source.get("source") in _AUTHORED_SOURCES
        authored = name in AUTHORED_INPUT_EVENT_NAMES or media
        if authored and source is not None and "message_id" in source and "content" in source:
            return self._fold_input(ledger, whole, source, media=media)
        if source is not None:
            handled, key = self._fold_tool(ledger, whole, source)
            if handled:
                return key
        if ledger.policy.full_content and name in _PART_EVENTS:
            return None
        content: dict[str, JsonValue] = {
            "name": str(name),
            "value": ledger.policy.observation_value(value, summary=name in _SUMMARIES),
        }
        for field in ("metadata", "subagentRunId"):
            if field in whole:
                content[field] = whole[field]
        return ledger.put(ledger.observation_key(), "observation", "completed", content, event_time(event))

    def fold_encoded(self, ledger: Ledger, event: CustomEvent, plan: int, content: bytes, encoded: bytes) -> str | None:
        """`fold` of the event's JSON text `encoded` for a `custom_plan` other than 0, from the model and the plan's
        content JSON: the same item and state, parsing only an argument delta that starts a stream."""
        self.completed = None
        if plan == ARGUMENTS:
            held = self.arguments
            value: dict[str, Any] = event.value
            source = value["event"]
            delta = source["delta"]
            text = delta.get("args_delta")
            continues = held is not None and held.sequence == ledger.sequence - 1 and type(text) is str
            if continues and held is not None and isinstance(text, str) and not delta.get("tool_name_delta") \
                    and _same_stream(held.stream, value, source, delta):  # fmt: skip
                subagent = _MISSING if event.subagent_run_id is None else event.subagent_run_id
                return self._append_arguments(ledger, held, text, subagent)
            return self.fold(ledger, loads_object(encoded))
        if event.name == _LIFECYCLE:
            payload = _nested(_nested(event.value, "event"), "payload")
            if payload is not None and payload.get("type") == "model_request_started":
                scope = scope_of(event.subagent_run_id)
                ledger.response_groups[scope] = f"{ledger.run_id}:{ledger.attempt}:{ledger.sequence}"
        return ledger.put_json(ledger.observation_key(), "observation", content, stamp_time(event.timestamp))

    @staticmethod
    def _note_memory(ledger: Ledger, scope: str, payload: dict[str, JsonValue]) -> None:
        """New sources replace the earlier ones of the same kinds in that scope."""
        fresh = memory_sources(payload)
        if fresh is None:
            return
        kinds = {source.kind for source in fresh}
        kept = tuple(source for source in ledger.memory_sources.get(scope, ()) if source.kind not in kinds)
        ledger.memory_sources[scope] = (*kept, *fresh)

    @staticmethod
    def _fold_input(
        ledger: Ledger, whole: Mapping[str, Any], source: dict[str, JsonValue], *, media: bool
    ) -> str | None:
        message_id = str(source["message_id"])
        content: dict[str, JsonValue] = {"messageId": message_id, "role": "user"}
        for field in ("subagentRunId", "metadata"):
            if field in whole:
                content[field] = whole[field]
        if media:
            content["input_media"] = source["content"]
        else:
            ledger.policy.put_text(content, "text", str(source["content"]))
        content["input_source"] = source.get("source", "user")
        content["input_group"] = source.get("input_id")
        key = ledger.key("text_message", message_id, whole.get("subagentRunId"))
        return ledger.put(key, "text_message", "completed", content, event_time(whole))

    @staticmethod
    def _fold_tool(ledger: Ledger, whole: Mapping[str, Any], source: dict[str, JsonValue]) -> tuple[bool, str | None]:
        """Native tool parts, unpresented tool results and tool supplements update their tool-call item: (True, its
        id, or None when it was evicted); (False, None) for any other event."""
        name = whole.get("name")
        part = _nested(source, "part")
        kind = part.get("part_kind") if part is not None else None
        native = isinstance(kind, str) and kind in _NATIVE_PARTS
        if native or name in _TOOL_RESULTS:
            origin = part
        elif name in _SUPPLEMENTS:
            origin = source
        else:
            return False, None
        call_id = origin.get("tool_call_id") if origin is not None else None
        if origin is None or not isinstance(call_id, str):
            return False, None
        subagent = whole.get("subagentRunId")
        provider = str(origin.get("provider_name") or "provider") if native else None
        key = ledger.key("tool_call", f"native:{provider}:{call_id}" if native else call_id, subagent)
        content = ledger.content_of(key)
        content["toolCallId"] = call_id
        if isinstance(subagent, str):
            content["subagentRunId"] = subagent
        if provider:
            content["provider"] = provider
        if "tool_name" in origin:
            content["toolCallName"] = origin["tool_name"]
        group = ledger.group(scope_of(subagent))
        if group is not None:
            content.setdefault("responseGroup", group)
        state = ledger.state_of(key)
        if name == _EDIT_APPLIED:
            content["applied_edit"] = {field: origin.get(field) for field in ("file_path", "before", "after")}
        elif name in _TOOL_IMAGES:
            content["tool_images"] = origin.get("images", [])
            content["tool_image_unavailable"] = origin.get("unavailable", False)
        elif name in _MCP_APPS:
            content["mcp_apps"] = origin.get("apps", [])
        elif origin.get("part_kind") == "builtin-tool-call":
            args = origin.get("args")
            compact = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
            text = args if isinstance(args, str) else compact
            ledger.policy.put_text(content, "arguments", text)
            content["arguments_complete"] = True
        else:
            state = _put_outcome(ledger, content, origin)
        return True, ledger.put(key, "tool_call", state, content, event_time(whole))

    def _fold_arguments(self, ledger: Ledger, event: Mapping[str, Any], stream: JsonValue, text: str) -> str | None:
        """Consecutive argument deltas of one part share one observation: the first delta's, growing."""
        held = self.arguments
        subagent = event.get("subagentRunId", _MISSING)
        if held is not None and held.stream == stream and held.sequence == ledger.sequence - 1:
            return self._append_arguments(ledger, held, text, subagent)
        first = _held_copy(event)
        held = HeldArguments(stream, ledger.observation_key(), event_time(event), ledger.sequence, first,
                             json_size(first["value"]))  # fmt: skip
        self.arguments = held
        return _put_arguments(ledger, held, subagent)

    @staticmethod
    def _append_arguments(ledger: Ledger, held: HeldArguments, text: str, subagent: object) -> str | None:
        if held.event is not None:
            held.event["value"]["event"]["delta"]["args_delta"] += text
            # Escaping is per character, so the JSON grows by the escaped text without its quotes.
            held.size += len(encode_basestring_ascii(text)) - 2
        return _put_arguments(ledger, held, subagent)


def _put_arguments(ledger: Ledger, held: HeldArguments, subagent: object) -> str | None:
    """The held stream's observation as it stands after the delta at the ledger's position (`subagent` is the
    delta's `subagentRunId`, or _MISSING)."""
    held.sequence = ledger.sequence
    if not ledger.policy.retain_content and held.size > MAX_OBSERVATION_BYTES:
        held.event = None
    value: JsonValue = _detached_delta(held.event["value"]) if held.event is not None else dict(OMITTED)
    content: dict[str, JsonValue] = {"name": _PART_DELTA, "value": value}
    if subagent is not _MISSING:
        content["subagentRunId"] = subagent  # type: ignore[assignment]  # a JSON value of the event
    return ledger.put(held.key, "observation", "completed", content, held.at, growing=True)


def _same_stream(stream: JsonValue, value: dict[str, Any], source: dict[str, Any], delta: dict[str, Any]) -> bool:
    """Whether `stream` is the identity `_argument_delta` gives the delta in `value` (a model's value), compared
    without building it; False whenever a field is not plain scalar data (the parsed event decides then)."""
    if not isinstance(stream, list) or len(stream) != 4 or stream[0] != _PART_DELTA:
        return False
    thread, run, identity = value.get("thread_id"), value.get("run_id"), stream[3]
    if type(thread) not in _SCALARS or type(run) not in _SCALARS or stream[1] != thread or stream[2] != run:
        return False
    if not isinstance(identity, dict) or len(identity) != len(source):
        return False
    for key, item in source.items():
        if key != "delta" and (type(item) not in _SCALARS or identity.get(key, _MISSING) != item):
            return False
    held = identity.get("delta")
    if not isinstance(held, dict) or len(held) != len(delta):
        return False
    for key, item in delta.items():
        if key == "args_delta":
            if held.get(key, _MISSING) is not None:
                return False
        elif type(item) not in _SCALARS or held.get(key, _MISSING) != item:
            return False
    return True


def _held_copy(event: Mapping[str, Any]) -> dict[str, Any]:
    """The event with fresh dicts along the path to `value.event.delta`, where the stream grows it in place."""
    value = event["value"]
    source = value["event"]
    return {**event, "value": {**value, "event": {**source, "delta": dict(source["delta"])}}}


def _detached_delta(value: dict[str, Any]) -> dict[str, Any]:
    """`value` with fresh dicts along the path to `event.delta.args_delta`, the only place a held argument stream
    changes: the item keeps this copy while the stream keeps growing its own."""
    source = value["event"]
    return {**value, "event": {**source, "delta": dict(source["delta"])}}


def _put_outcome(ledger: Ledger, content: dict[str, JsonValue], part: dict[str, JsonValue]) -> ItemState:
    """Record a tool result the observer did not present; retries and failed outcomes fail the call."""
    result = part.get("content")
    if ledger.policy.keeps_value(result):
        content["value"] = result
    else:
        content["truncated"] = True
    outcome = part.get("outcome")
    content["outcome"] = outcome
    retry = part.get("part_kind") == "retry-prompt" or outcome == "retried"
    content["retry"] = retry
    return "failed" if retry or outcome in _FAILED_OUTCOMES else "completed"
