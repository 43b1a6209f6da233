"""Folding of CUSTOM events: authored inputs, tool observations, streamed arguments, plain observations."""

from __future__ import annotations

import json
from datetime import datetime
from json.encoder import encode_basestring_ascii
from typing import Any, Final

import orjson
from pydantic import JsonValue

from worker.display._json import ORJSON_AGREES
from worker.display._ledger import Ledger, event_time, scope_of
from worker.display.bounding import MAX_OBSERVATION_BYTES, OMITTED, json_size, json_size_in
from worker.display.fragments import CustomEventAssembler
from worker.display.items import ItemState
from worker.display.memory import memory_sources
from worker.display.snapshot import ArgumentStream
from worker.observe import FRAGMENT_EVENT_NAME

__all__ = ["AUTHORED_INPUT_EVENT_NAMES", "CustomFolder"]

# Constants are Final: compiled, a Final name is read directly instead of looked up in the module's globals.
AUTHORED_INPUT_EVENT_NAMES: Final = frozenset({"a13n.input.user", "a13n.input.steering"})
_MEDIA_INPUT: Final = "a13n.input.media"
_AUTHORED_SOURCES: Final = frozenset({"user", "steering"})
_LIFECYCLE: Final = "a13n.harness.lifecycle"
_CONTEXT: Final = "a13n.harness.context"
_PART_DELTA: Final = "a13n.pydantic_ai.part_delta"
_PART_EVENTS: Final = frozenset({"a13n.pydantic_ai.part_start", "a13n.pydantic_ai.part_end", _PART_DELTA})
_TOOL_RESULTS: Final = frozenset({"a13n.pydantic_ai.function_tool_result", "a13n.pydantic_ai.output_tool_result"})
_EDIT_APPLIED: Final = "a13n.filesystem.edit_applied"
_TOOL_IMAGES: Final = frozenset({"a13n.tool_images", "a13n.harness-ui.tool_images"})
_MCP_APPS: Final = frozenset({"a13n.harness-ui.mcp_apps", "a13n.mcp_apps"})
_SUPPLEMENTS: Final = frozenset({_EDIT_APPLIED, *_TOOL_IMAGES, *_MCP_APPS})
_SUMMARIES: Final = frozenset({"a13n.context.handoff_summary", "a13n.context.compaction_summary"})
_NATIVE_PARTS: Final = frozenset({"builtin-tool-call", "builtin-tool-return"})
_FAILED_OUTCOMES: Final = frozenset({"failed", "denied", "interrupted"})
_CUSTOM_HEAD: Final = b'{"type":"CUSTOM","timestamp":'  # a published CUSTOM event's JSON up to its timestamp
_ARGUMENTS_NAME: Final = b',"name":"%s","value":' % _PART_DELTA.encode()  # after an argument delta's timestamp


def _argument_delta(event: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], str] | None:
    """For a streamed tool-call argument observation (a CUSTOM `_PART_DELTA`): its value, the part delta event in it,
    that event's delta, and the text it appends."""
    value = event.get("value")
    source = value.get("event") if isinstance(value, dict) else None
    delta = source.get("delta") if isinstance(source, dict) else None
    if not isinstance(delta, dict) or delta.get("part_delta_kind") != "tool_call":
        return None
    text = delta.get("args_delta")
    if not isinstance(text, str) or delta.get("tool_name_delta"):
        return None
    assert isinstance(value, dict) and isinstance(source, dict)
    return value, source, delta, text


def _stream_of(value: dict[str, Any], source: dict[str, Any], delta: dict[str, Any]) -> JsonValue:
    """The part an argument delta continues: the delta event without its text, and the thread and run it came from."""
    identity = {**source, "delta": {**delta, "args_delta": None}}
    return [_PART_DELTA, value.get("thread_id"), value.get("run_id"), identity]


def _same(held: object, given: object) -> bool:
    return held is given or held == given


def _continues(stream: JsonValue, value: dict[str, Any], source: dict[str, Any], delta: dict[str, Any]) -> bool:
    """`stream == _stream_of(value, source, delta)`: the thread and run compared first, then the part's identity as
    one comparison of dicts (done in C, which a field-by-field loop of compiled code is not)."""
    if not isinstance(stream, list) or len(stream) != 4 or stream[0] != _PART_DELTA:
        return False
    if not (_same(stream[1], value.get("thread_id")) and _same(stream[2], value.get("run_id"))):
        return False
    identity: object = stream[3]
    return identity == {**source, "delta": {**delta, "args_delta": None}}


def _nested(value: JsonValue, field: str) -> dict[str, JsonValue] | None:
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
            try:  # a plain try: a suppress() context costs a call in and out
                return orjson.dumps(fields, option=orjson.OPT_UTC_Z)
            except (TypeError, orjson.JSONEncodeError):
                pass  # written through the model below
        exported = self.export()
        return exported.__pydantic_serializer__.to_json(exported)

    def export(self) -> ArgumentStream:
        """The exported form; it shares values with this stream until copied."""
        return ArgumentStream(
            stream=self.stream, key=self.key, at=self.at, sequence=self.sequence, event=self.event, size=self.size
        )


class CustomFolder:
    """Folds CUSTOM events after fragment reassembly; holds the assembler and the open argument stream."""

    def __init__(self, assembler: CustomEventAssembler, arguments: ArgumentStream | None) -> None:
        self.assembler = assembler
        self.arguments = None if arguments is None else HeldArguments.of(arguments)
        self.completed: dict[str, Any] | None = None  # the whole CUSTOM event the last `fold` completed

    def fold(self, ledger: Ledger, event: dict[str, Any], published: bytes | None = None) -> str | None:
        """Fold one CUSTOM event and return its item's id; `published` is the event's JSON as published, when at
        hand (orjson's text of this very dict)."""
        self.completed = None
        found = event.get("name")
        name = found if isinstance(found, str) else None  # any other name is no name the fold knows
        if name == _PART_DELTA:
            streamed = _argument_delta(event)
            if streamed is not None:
                return None if ledger.policy.full_content else self._fold_arguments(ledger, event, streamed, published)
        whole = event
        if name == FRAGMENT_EVENT_NAME:
            assembled = self.assembler.accept(event)
            if assembled is None:
                return None
            whole = assembled
            found = whole.get("name")
            name = found if isinstance(found, str) else None
        self.completed = whole
        value: JsonValue = whole.get("value")
        source = _nested(value, "event")
        if source is not None:
            media = name == _MEDIA_INPUT and source.get("source") in _AUTHORED_SOURCES
            if name in (_LIFECYCLE, _CONTEXT):
                self._note_context(ledger, name, whole, source)
            elif (media or name in AUTHORED_INPUT_EVENT_NAMES) and "message_id" in source and "content" in source:
                return self._fold_input(ledger, whole, source, media=media)
            handled, key = self._fold_tool(ledger, name, whole, source)
            if handled:
                return key
        if ledger.policy.full_content and name in _PART_EVENTS:
            return None
        content: dict[str, JsonValue] = {"name": name if name is not None else str(found), "value": value}
        for field in ("metadata", "subagentRunId"):
            if field in whole:
                content[field] = whole[field]
        bounded = ledger.policy.bounds_observation(summary=name in _SUMMARIES)
        text = None
        if published is not None and whole is event and name is not None and len(event) == 4 and "value" in event:
            text = _content_json(published)
        return ledger.observe(content, event_time(event), bounded=bounded, content_json=text)

    @staticmethod
    def _note_context(ledger: Ledger, name: str, whole: dict[str, Any], source: dict[str, JsonValue]) -> None:
        """A model request's start opens a response group in its scope; a context observation notes memory."""
        payload = _nested(source, "payload")
        if payload is None:
            return
        scope = scope_of(whole.get("subagentRunId"))
        if name == _CONTEXT:
            CustomFolder._note_memory(ledger, scope, payload)
        elif payload.get("type") == "model_request_started":
            ledger.response_groups[scope] = f"{ledger.run_id}:{ledger.attempt}:{ledger.sequence}"

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
        ledger: Ledger, whole: dict[str, Any], source: dict[str, JsonValue], *, media: bool
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
    def _fold_tool(
        ledger: Ledger, name: str | None, whole: dict[str, Any], source: dict[str, JsonValue]
    ) -> tuple[bool, str | None]:
        """Native tool parts, unpresented tool results and tool supplements update their tool-call item: (True, its
        id, or None when it was evicted); (False, None) for any other event."""
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
            text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, separators=(",", ":"))
            ledger.policy.put_text(content, "arguments", text)
            content["arguments_complete"] = True
        else:
            state = _put_outcome(ledger, content, origin)
        return True, ledger.put(key, "tool_call", state, content, whole)

    def _fold_arguments(
        self, ledger: Ledger, event: dict[str, Any],
        streamed: tuple[dict[str, Any], dict[str, Any], dict[str, Any], str], published: bytes | None,
    ) -> str | None:  # fmt: skip
        """Consecutive argument deltas of one part share one observation: the first delta's, growing. The item holds
        the stream's own value (written anew with each delta, which is the only change it sees)."""
        value, source, delta, text = streamed
        held = self.arguments
        if held is not None and held.sequence == ledger.sequence - 1 and _continues(held.stream, value, source, delta):
            if held.event is not None:
                held.event["value"]["event"]["delta"]["args_delta"] += text
                # Escaping is per character, so the JSON grows by the escaped text without its quotes.
                held.size += len(encode_basestring_ascii(text)) - 2
        else:
            first = _held_copy(event)
            held = HeldArguments(_stream_of(value, source, delta), ledger.observation_key(), event_time(event),
                                 ledger.sequence, first, _value_size(event, published))  # fmt: skip
            self.arguments = held
        held.sequence = ledger.sequence
        if not ledger.policy.retain_content and held.size > MAX_OBSERVATION_BYTES:
            held.event = None
        content: dict[str, JsonValue] = {
            "name": _PART_DELTA, "value": held.event["value"] if held.event is not None else dict(OMITTED)
        }
        if "subagentRunId" in event:
            content["subagentRunId"] = event["subagentRunId"]
        return ledger.put(held.key, "observation", "completed", content, held.at, growing=True)


def _after_timestamp(published: bytes, follows: bytes) -> int:
    """Where `follows` starts in the JSON of a CUSTOM event that orjson wrote, when it comes right after the event's
    type and non-negative integer timestamp; -1 otherwise."""
    if not published.startswith(_CUSTOM_HEAD):
        return -1
    at = published.find(follows, len(_CUSTOM_HEAD))
    return at if at > 0 and published[len(_CUSTOM_HEAD) : at].isdigit() else -1


def _content_json(published: bytes) -> bytes | None:
    """The JSON of the observation content `{"name": N, "value": V}`, cut from the JSON of the four-field event
    `{"type":"CUSTOM","timestamp":T,"name":N,"value":V}` that orjson wrote; None for any other text."""
    at = _after_timestamp(published, b',"name":')
    return None if at < 0 else b"{" + published[at + 1 :]


def _value_size(event: dict[str, Any], published: bytes | None) -> int:
    """`json_size` of the value of a four-field argument delta event, measured in `published` (orjson's JSON of the
    event) when that is at hand: its value is the text between the name and the closing brace."""
    value = event["value"]
    if ORJSON_AGREES and published is not None and len(event) == 4:
        at = _after_timestamp(published, _ARGUMENTS_NAME)
        if at > 0:
            return json_size_in(value, published, at + len(_ARGUMENTS_NAME) + 1)
    return json_size(value)


def _held_copy(event: dict[str, Any]) -> dict[str, Any]:
    """The event with fresh dicts along the path to `value.event.delta`, where the stream grows it in place."""
    value = event["value"]
    source = value["event"]
    return {**event, "value": {**value, "event": {**source, "delta": dict(source["delta"])}}}


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
