"""Decoding of pydantic-ai stream events into their normalized JSON dump (spec §1a.2, §1e.5)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError

from worker.errors import DecodeError
from worker.wire._fields import (
    REQUIRED,
    Shape,
    check_types,
    get_obj,
    get_str,
    get_str_or_none,
    kind_of,
    normalize,
)
from worker.wire._items import AgentEvent
from worker.wire._media import full_media, is_media, normalize_content

__all__ = ["CAPABILITY_ENVELOPE", "INPUT_SOURCES", "decode_agent_event", "decode_tool_call"]

_R = REQUIRED
_N: type = type(None)
_S, _SN = frozenset[type]({str}), frozenset[type]({str, _N})
_I, _IN = frozenset[type]({int}), frozenset[type]({int, _N})
_B, _BN = frozenset[type]({bool}), frozenset[type]({bool, _N})
_D, _DN = frozenset[type]({dict}), frozenset[type]({dict, _N})
_L, _LN = frozenset[type]({list}), frozenset[type]({list, _N})
_ARGS = frozenset[type]({str, dict, _N})
# The JSON types pydantic-ai / Harness declare for each field name (overridden per shape where they differ).
_TYPES: dict[str, frozenset[type]] = {
    "provider_name": _SN, "provider_details": _DN, "citations": _LN, "citations_delta": _LN, "id": _SN,
    "signature": _SN, "signature_delta": _SN, "tool_kind": _SN, "tool_name": _S, "tool_call_id": _S,
    "args": _ARGS, "args_delta": _ARGS, "tool_name_delta": _SN, "previous_part_kind": _SN, "next_part_kind": _SN,
    "args_valid": _BN, "index": _I, "item_id": _SN, "message": _S, "type": _SN, "code": _SN,
    "content_index": _IN, "state_restored": _B, "recoverable": _B, "capability_id": _SN, "enqueue_id": _S,
    "messages": _L, "parts": _L, "attempt": _IN, "max_retries": _IN, "cause": _S, "file_path": _S, "before": _S,
    "after": _S, "operation_id": _S, "summary": _S, "files": _L, "process_id": _SN, "phase": _S,
    "exit_code": _IN, "callback": _B, "input_id": _S, "source": _S, "name": _S, "kind": _S,
}
_OPTIONAL_IDS = {"tool_name": _SN, "tool_call_id": _SN}


def _types(**overrides: frozenset[type]) -> dict[str, frozenset[type]]:
    return {**_TYPES, **overrides}


_DATETIME = TypeAdapter(datetime)
_PROVIDER = (("provider_name", None), ("provider_details", None))
_TOOL_CALL = (("tool_name", _R), ("args", None), ("tool_call_id", _R), ("tool_kind", None), ("id", None))
_PARTS: dict[str, Shape] = {
    "text": Shape(("content", _R), ("id", None), *_PROVIDER, ("citations", None), ("part_kind", "text")),
    "thinking": Shape(("content", _R), ("id", None), ("signature", None), *_PROVIDER, ("part_kind", "thinking")),
    "tool-call": Shape(*_TOOL_CALL, *_PROVIDER, ("part_kind", "tool-call")),
    "builtin-tool-call": Shape(*_TOOL_CALL, *_PROVIDER, ("part_kind", "builtin-tool-call")),
    "builtin-tool-return": Shape(
        ("tool_name", _R), ("content", _R), ("tool_call_id", _R), ("tool_kind", None), ("metadata", None),
        ("timestamp", _R), ("outcome", "success"), *_PROVIDER, ("part_kind", "builtin-tool-return"),
    ),
    "tool-return": Shape(
        ("tool_name", _R), ("content", _R), ("tool_call_id", _R), ("tool_kind", None), ("metadata", None),
        ("timestamp", _R), ("outcome", "success"), ("retry", None), ("part_kind", "tool-return"),
    ),
    "file": Shape(("content", _R), ("id", None), *_PROVIDER, ("part_kind", "file")),
    "compaction": Shape(("content", _R), ("id", None), *_PROVIDER, ("part_kind", "compaction")),
}
_OPAQUE_PARTS = frozenset({"speech", "retry-prompt"})
_DELTAS: dict[str, Shape] = {
    "text": Shape(("content_delta", _R), *_PROVIDER, ("citations_delta", None), ("part_delta_kind", "text")),
    "thinking": Shape(
        ("content_delta", None), ("signature_delta", None), *_PROVIDER, ("part_delta_kind", "thinking"),
    ),
    "tool_call": Shape(
        ("tool_name_delta", None), ("args_delta", None), ("tool_call_id", None), *_PROVIDER,
        ("part_delta_kind", "tool_call"),
    ),
}
_EVENTS: dict[str, Shape] = {
    "part_start": Shape(("index", _R), ("part", _R), ("previous_part_kind", None), ("event_kind", "part_start")),
    "part_delta": Shape(("index", _R), ("delta", _R), ("event_kind", "part_delta")),
    "part_end": Shape(("index", _R), ("part", _R), ("next_part_kind", None), ("event_kind", "part_end")),
    "final_result": Shape(("tool_name", _R), ("tool_call_id", _R), ("event_kind", "final_result")),
    "function_tool_call": Shape(("part", _R), ("args_valid", None), ("event_kind", "function_tool_call")),
    "output_tool_call": Shape(("part", _R), ("args_valid", None), ("event_kind", "output_tool_call")),
    "function_tool_result": Shape(("part", _R), ("content", None), ("event_kind", "function_tool_result")),
    "output_tool_result": Shape(("part", _R), ("event_kind", "output_tool_result")),
    "enqueued_messages": Shape(
        ("enqueue_id", _R), ("messages", _R), ("parts", []), ("event_kind", "enqueued_messages")
    ),
    "deferred_tool_requests": Shape(("requests", _R), ("event_kind", "deferred_tool_requests")),
    "deferred_tool_results": Shape(("results", _R), ("event_kind", "deferred_tool_results")),
    "tool_availability_delta": Shape(("part", _R), ("event_kind", "tool_availability_delta")),
    "realtime_turn_complete": Shape(("event_kind", "realtime_turn_complete"),),
    "realtime_input_speech_start": Shape(("item_id", None), ("event_kind", "realtime_input_speech_start")),
    "realtime_input_speech_end": Shape(("item_id", None), ("event_kind", "realtime_input_speech_end")),
    "realtime_output_speech_start": Shape(("event_kind", "realtime_output_speech_start"),),
    "realtime_output_speech_end": Shape(("event_kind", "realtime_output_speech_end"),),
    "realtime_response_interrupted": Shape(("event_kind", "realtime_response_interrupted"),),
    "realtime_input_transcription_error": Shape(
        ("message", _R), ("type", None), ("code", None), ("item_id", None), ("content_index", None),
        ("event_kind", "realtime_input_transcription_error"),
    ),
    "realtime_session_reconnect": Shape(("state_restored", False), ("event_kind", "realtime_session_reconnect")),
    "realtime_session_error": Shape(
        ("message", _R), ("type", None), ("code", None), ("recoverable", True),
        ("event_kind", "realtime_session_error"),
    ),
}
CAPABILITY_ENVELOPE = (
    ("kind", ""), ("capability_id", None), ("tool_call_id", None), ("tool_name", None), ("event_kind", "capability"),
)
_CAPABILITY_PAYLOADS: dict[str, tuple[tuple[str, Any], ...]] = {
    "a13n.input.text": (("input_id", _R), ("source", _R), ("content", _R), ("metadata", None)),
    "a13n.input.media": (("input_id", _R), ("source", _R), ("content", _R), ("metadata", None)),
    "a13n.filesystem.edit_applied": (("file_path", _R), ("before", _R), ("after", _R)),
    "a13n.context.handoff_summary": (("operation_id", _R), ("summary", _R), ("files", _R)),
    "a13n.context.compaction_summary": (("operation_id", _R), ("summary", _R)),
    "a13n.context.restored": (("source", _R), ("operation_id", _R)),
    "a13n.shell.status": (("process_id", _R), ("phase", _R), ("exit_code", _R), ("callback", False)),
}
_ENVELOPE_NAMES = frozenset(name for name, _ in CAPABILITY_ENVELOPE)
_CAPABILITIES = {kind: Shape(*CAPABILITY_ENVELOPE, *fields) for kind, fields in _CAPABILITY_PAYLOADS.items()}
_CUSTOM_ENVELOPE = Shape(("name", ""), ("tool_call_id", None), ("tool_name", None), ("event_kind", "custom"))
_RETRY = Shape(("cause", _R), ("attempt", None), ("max_retries", None))
_DEFERRED_REQUESTS = Shape(("calls", []), ("approvals", []), ("metadata", {}))


def _typed(shape: Shape, **overrides: frozenset[type]) -> None:
    """Attach the admitted JSON types of the shape's fields."""
    shape.checks = Shape(*shape.fields, types=_types(**overrides)).checks


for _shape in (*_PARTS.values(), *_EVENTS.values(), _RETRY):
    _typed(_shape)
_typed(_PARTS["text"], content=_S)
_typed(_PARTS["thinking"], content=_S)
_typed(_DELTAS["text"], content_delta=_S)
_typed(_DELTAS["thinking"], content_delta=_SN)
_typed(_DELTAS["tool_call"], tool_call_id=_SN)
_typed(_EVENTS["final_result"], **_OPTIONAL_IDS)
_typed(_CUSTOM_ENVELOPE, **_OPTIONAL_IDS)
_typed(_DEFERRED_REQUESTS, calls=_L, approvals=_L, metadata=_D)
for _kind, _shape in _CAPABILITIES.items():
    _typed(_shape, **_OPTIONAL_IDS, content=_S if _kind == "a13n.input.text" else _D)
_TOOL_CALL_KINDS = frozenset({"tool-call", "builtin-tool-call"})
INPUT_SOURCES = frozenset({"user", "steering", "context", "recovery", "async_subagent", "background_process"})
_TOOL_CONTENT = "a13n.tool-content"
_NEIGHBOUR_KINDS = frozenset(
    {"text", "thinking", "tool-call", "builtin-tool-call", "builtin-tool-return", "compaction", "file", "speech"}
)
_OUTCOMES = frozenset({"success", "failed", "denied", "interrupted", "retried"})
_RETRY_CAUSES = frozenset({"validation_error", "model_retry", "unknown_tool", "unavailable_tool"})


def _part(
    event: dict[str, Any], path: str, allowed: frozenset[str] | None = None, default_kind: str | None = None
) -> dict[str, Any]:
    return _normalize_part(get_obj(event, "part", path), f"{path}.part", allowed, default_kind)


def _normalize_part(
    part: dict[str, Any], path: str, allowed: frozenset[str] | None = None, default_kind: str | None = None
) -> dict[str, Any]:
    if default_kind is not None and "part_kind" not in part:
        part = {**part, "part_kind": default_kind}
    kind = get_str(part, "part_kind", path)
    if allowed is not None and kind not in allowed:
        raise DecodeError(f"{path}.part_kind", f"unexpected part kind {kind!r}")
    if kind in _OPAQUE_PARTS:
        return part
    fields = _PARTS.get(kind)
    if fields is None:
        raise DecodeError(f"{path}.part_kind", f"unknown part kind {kind!r}")
    part = normalize(part, fields, path)  # checks every declared field's JSON type
    if kind == "text":
        _citations(part, "citations", path)
    elif kind in {"tool-return", "builtin-tool-return"}:
        part = _tool_return(part, path)
        if kind == "builtin-tool-return":
            content = normalize_content(part["content"])
            part = part if content is part["content"] else {**part, "content": content}
    elif kind == "file":
        content = part["content"]
        if not is_media(content) or content.get("kind") != "binary":
            raise DecodeError(f"{path}.content", "expected binary content {data (base64), media_type, kind}")
        part = {**part, "content": full_media(content)}
    return part


def _deferred_requests(event: dict[str, Any], path: str) -> dict[str, Any]:
    requests = normalize(get_obj(event, "requests", path), _DEFERRED_REQUESTS, f"{path}.requests")
    out = dict(requests)
    for group in ("calls", "approvals"):
        calls = requests[group]
        if not isinstance(calls, list):
            raise DecodeError(f"{path}.requests.{group}", f"expected an array, got {kind_of(calls)}")
        out[group] = [decode_tool_call(call, f"{path}.requests.{group}[{i}]") for i, call in enumerate(calls)]
    if not isinstance(requests["metadata"], dict):
        raise DecodeError(f"{path}.requests.metadata", f"expected an object, got {kind_of(requests['metadata'])}")
    return {**event, "requests": out}


def _tool_return(part: dict[str, Any], path: str) -> dict[str, Any]:
    metadata = part["metadata"]
    if isinstance(metadata, dict) and _TOOL_CONTENT in metadata:
        _check_tool_content(part["content"], metadata[_TOOL_CONTENT], f"{path}.metadata")
    outcome = part["outcome"]
    if not isinstance(outcome, str) or outcome not in _OUTCOMES:
        raise DecodeError(f"{path}.outcome", f"expected one of {sorted(_OUTCOMES)}, got {outcome!r}")
    try:
        stamp = _DATETIME.dump_python(_DATETIME.validate_python(part["timestamp"]), mode="json")
    except ValidationError as exc:
        raise DecodeError(f"{path}.timestamp", f"invalid datetime {part['timestamp']!r}") from exc
    retry = part.get("retry")
    if retry is not None:
        if not isinstance(retry, dict):
            raise DecodeError(f"{path}.retry", f"expected an object or null, got {kind_of(retry)}")
        retry = normalize(retry, _RETRY, f"{path}.retry")
        if not isinstance(retry["cause"], str) or retry["cause"] not in _RETRY_CAUSES:
            raise DecodeError(f"{path}.retry.cause", f"unknown retry cause {retry['cause']!r}")
    if stamp != part["timestamp"] or retry is not part.get("retry"):
        part = {**part, "timestamp": stamp}
        if part["part_kind"] == "tool-return":
            part["retry"] = retry
    return part


def decode_tool_call(call: object, path: str) -> dict[str, Any]:
    """A ToolCallPart in its normalized dump (as inside deferred tool requests)."""
    if not isinstance(call, dict):
        raise DecodeError(path, f"expected a tool call object, got {kind_of(call)}")
    return _normalize_part(call, path, _TOOL_CALL_KINDS, "tool-call")


def _check_tool_content(content: Any, marker: Any, path: str) -> None:
    """The Harness result marker must point at an element of the part's content list."""
    where = f"{path}.{_TOOL_CONTENT}"
    index = marker.get("result_index") if isinstance(marker, dict) else None
    if not isinstance(index, int) or isinstance(index, bool):
        raise DecodeError(f"{where}.result_index", f"expected an integer, got {kind_of(index)}")
    if not isinstance(content, list) or not -len(content) <= index < len(content):
        size = len(content) if isinstance(content, list) else kind_of(content)
        raise DecodeError(f"{where}.result_index", f"index {index} is outside the content ({size})")


def _delta(event: dict[str, Any], path: str) -> dict[str, Any]:
    delta = get_obj(event, "delta", path)
    path = f"{path}.delta"
    kind = get_str(delta, "part_delta_kind", path)
    if kind == "speech":
        return delta
    fields = _DELTAS.get(kind)
    if fields is None:
        raise DecodeError(f"{path}.part_delta_kind", f"unknown part delta kind {kind!r}")
    delta = normalize(delta, fields, path)  # checks every declared field's JSON type
    if kind == "text":
        _citations(delta, "citations_delta", path)
    return delta


def _citations(obj: dict[str, Any], key: str, path: str) -> None:
    """Citations are objects (pydantic-ai Citation: sources, anchor)."""
    for i, citation in enumerate(obj[key] or ()):
        if not isinstance(citation, dict):
            raise DecodeError(f"{path}.{key}[{i}]", f"expected an object, got {kind_of(citation)}")


def _capability(event: dict[str, Any], path: str) -> dict[str, Any]:
    kind = get_str(event, "kind", path)
    get_str_or_none(event, "capability_id", path)
    get_str_or_none(event, "tool_call_id", path)
    get_str_or_none(event, "tool_name", path)
    payload_fields = _CAPABILITIES.get(kind)
    if payload_fields is None:
        extra = {key: value for key, value in event.items() if key not in _ENVELOPE_NAMES}
        envelope = {name: event.get(name, default) for name, default in CAPABILITY_ENVELOPE}
        return {**extra, **envelope} if extra else {**envelope, "data": None}
    out = normalize(event, payload_fields, path)
    if kind.startswith("a13n.input."):
        source = out["source"]
        if not isinstance(source, str) or source not in INPUT_SOURCES:
            raise DecodeError(f"{path}.source", f"unknown input source {source!r}")
        get_str(out, "input_id", path)
        media = kind == "a13n.input.media"
        content = out["content"]
        if not isinstance(content, dict if media else str):
            raise DecodeError(f"{path}.content", f"unexpected content type {kind_of(content)}")
        metadata = out["metadata"]
        if "metadata" not in event:  # absent: the event's own default (media events default to media=true)
            metadata = {"media": media}
        elif not isinstance(metadata, dict):
            raise DecodeError(f"{path}.metadata", f"expected an object, got {kind_of(metadata)}")
        out = {**out, "metadata": _content_metadata(metadata, f"{path}.metadata")}
    return out


def _content_metadata(metadata: dict[str, Any], path: str) -> dict[str, Any]:
    display = metadata.get("display", True)
    source_id = metadata.get("source_id")
    flag = metadata.get("media", False)
    if not isinstance(display, bool) or not isinstance(flag, bool):
        raise DecodeError(path, "display and media must be booleans")
    if source_id is not None and not isinstance(source_id, str):
        raise DecodeError(f"{path}.source_id", f"expected a string or null, got {kind_of(source_id)}")
    rest = {k: v for k, v in metadata.items() if k not in ("display", "source_id", "media")}
    return {"display": display, "source_id": source_id, "media": flag, **rest}


def _custom(event: dict[str, Any], path: str) -> dict[str, Any]:
    if "name" in event:
        get_str(event, "name", path)
    get_str_or_none(event, "tool_call_id", path)
    get_str_or_none(event, "tool_name", path)
    names = _CUSTOM_ENVELOPE.names
    extra = {key: value for key, value in event.items() if key not in names}
    return {**normalize({k: v for k, v in event.items() if k in names}, _CUSTOM_ENVELOPE, path),
            "data": extra or None}


def _check(kind: str, event: dict[str, Any], path: str) -> dict[str, Any]:
    """Kind-specific checks of a normalized event (whose own field types are already checked)."""
    if kind == "part_delta":
        return {**event, "delta": d} if (d := _delta(event, path)) is not event["delta"] else event
    if kind in {"part_start", "part_end"}:
        neighbour = "previous_part_kind" if kind == "part_start" else "next_part_kind"
        if event[neighbour] is not None and event[neighbour] not in _NEIGHBOUR_KINDS:
            raise DecodeError(f"{path}.{neighbour}", f"unknown part kind {event[neighbour]!r}")
        part = _part(event, path)
    elif kind in ("function_tool_call", "output_tool_call"):
        part = _part(event, path, _TOOL_CALL_KINDS)
    elif kind in ("function_tool_result", "output_tool_result"):
        part = _part(event, path, default_kind="tool-return")
    elif kind == "tool_availability_delta":
        part = _part(event, path)
    elif kind == "deferred_tool_results":
        results = get_obj(event, "results", path)
        get_obj(results, "calls", f"{path}.results")
        get_obj(results, "approvals", f"{path}.results")
        return event
    elif kind == "deferred_tool_requests":
        return _deferred_requests(event, path)
    else:
        return event
    return {**event, "part": part} if part is not event["part"] else event


_SPECIAL: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    "capability": _capability,
    "custom": _custom,
}


def _fast_delta(event: dict[str, Any], path: str) -> bool:
    """True for an already-normalized part delta (the bulk of a stream), after checking its field types."""
    if tuple(event) != _EVENTS["part_delta"].names or type(event["index"]) is not int:
        return False
    delta = event["delta"]
    if type(delta) is not dict:
        return False
    kind = delta.get("part_delta_kind")
    shape = _DELTAS.get(kind) if type(kind) is str else None
    if shape is None or tuple(delta) != shape.names:
        return False
    check_types(delta, shape, f"{path}.delta")
    if kind == "text" and delta["citations_delta"]:
        _citations(delta, "citations_delta", f"{path}.delta")
    return True


def decode_agent_event(event: dict[str, Any], path: str) -> AgentEvent:
    """Validate a pydantic-ai stream event and return it in the reference's re-dumped form."""
    if event.get("event_kind") == "part_delta" and _fast_delta(event, path):
        return AgentEvent("part_delta", event)
    kind = get_str(event, "event_kind", path)
    special = _SPECIAL.get(kind)
    if special is not None:
        return AgentEvent(kind, special(event, path))
    fields = _EVENTS.get(kind)
    if fields is None:
        raise DecodeError(f"{path}.event_kind", f"unknown event kind {kind!r}")
    return AgentEvent(kind, _check(kind, normalize(event, fields, path), path))
