"""Payload bounds of the display fold: what an item keeps of large texts, results and observations."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import orjson
from ag_ui.core import BaseEvent, TextPart, ToolCallArgsEvent, ToolCallResultEvent
from pydantic import JsonValue, ValidationError

from worker.display._json import loads_object
from worker.observe import AguiEventProcessor, encode_event, has_float

__all__ = [
    "MAX_FIELD_CHARS",
    "MAX_OBSERVATION_BYTES",
    "OMITTED",
    "ContentPolicy",
    "bound_event",
    "bound_event_json",
    "bounding_processor",
    "json_size",
    "json_size_in",
]

# Characters an item keeps of a message text, tool arguments or a tool result.
MAX_FIELD_CHARS: Final = 262144
# JSON size above which an observation keeps only its name.
MAX_OBSERVATION_BYTES: Final = 32768
# The value an over-large observation keeps.
OMITTED: Final[dict[str, JsonValue]] = {"omitted": True}
_PARTS_OMITTED: Final = "Result parts omitted: display size limit exceeded."


_ENCODER: Final = json.JSONEncoder(separators=(",", ":"))
# Each byte of UTF-8 text mapped to what escaping adds for the character it starts: a two-byte sequence becomes
# six characters (+4), a three-byte one six (+3), a four-byte one a surrogate pair of twelve (+8), DEL six (+5).
_GROWTH: Final = bytes(
    ord("2") if 0xC0 <= code <= 0xDF else ord("3") if 0xE0 <= code <= 0xEF else ord("4") if 0xF0 <= code <= 0xF7
    else ord("d") if code == 0x7F else ord(".")
    for code in range(256)
)  # fmt: skip


def _escaped_size(raw: bytes) -> int:
    """The ASCII-escaped length of JSON whose orjson UTF-8 text is `raw` (no floats in it)."""
    if raw.isascii():
        return len(raw) + 5 * raw.count(b"\x7f")
    grown = raw.translate(_GROWTH)
    return len(raw) + 4 * grown.count(b"2") + 3 * grown.count(b"3") + 8 * grown.count(b"4") + 5 * grown.count(b"d")


def _orjson_text(value: object) -> bytes | None:
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        return None


def json_size(value: object) -> int:
    """Length of the compact, ASCII-escaped JSON text of `value` (the measure every display bound uses).

    Without floats (whose spelling may differ), orjson's UTF-8 text gives it: its length plus what escaping adds
    per non-ASCII character and DEL; anything orjson cannot write is measured by the stdlib.
    """
    raw = None if has_float(value) else _orjson_text(value)
    return len(_ENCODER.encode(value)) if raw is None else _escaped_size(raw)


def json_size_in(value: object, text: bytes, padding: int) -> int:
    """`json_size(value)`, given `text`: orjson's UTF-8 text of `value` with `padding` bytes of ASCII text other than
    DEL around it (the JSON of an object holding it, say), which spares writing it again."""
    return json_size(value) if has_float(value) else _escaped_size(text) - padding


def json_size_exceeds(value: object, limit: int) -> bool:
    """`json_size(value) > limit`, answered from orjson's UTF-8 text when that decides it.

    Per character the escaped text is at most six times orjson's (a DEL escapes to six characters; a number is
    spelled at most two characters longer), and never shorter unless a float is spelled shorter.
    """
    raw = _orjson_text(value)
    if raw is None:
        return json_size(value) > limit
    if 6 * len(raw) <= limit:
        return False
    if has_float(value):
        return len(_ENCODER.encode(value)) > limit
    return len(raw) > limit or _escaped_size(raw) > limit


# Per event class: whether its instances may need a bound (TOOL_CALL_RESULT or TOOL_CALL_ARGS events); looked up by
# class, since a pydantic model's isinstance check costs a call into its metaclass.
_BOUNDED: Final[dict[type, bool]] = {}


def bound_event(event: BaseEvent) -> BaseEvent:
    """Cut a TOOL_CALL_RESULT text or TOOL_CALL_ARGS delta to MAX_FIELD_CHARS + 1 characters, and replace an
    over-large result part list by one text part; the extra character lets the fold see the cut."""
    cls = type(event)
    bounded = _BOUNDED.get(cls)
    if bounded is None:
        bounded = _BOUNDED[cls] = issubclass(cls, ToolCallResultEvent | ToolCallArgsEvent)
    if not bounded:
        return event
    if isinstance(event, ToolCallResultEvent):
        content = event.content
        if isinstance(content, str):
            if len(content) > MAX_FIELD_CHARS:
                return event.model_copy(update={"content": content[: MAX_FIELD_CHARS + 1]})
        elif len(event.model_dump_json()) > MAX_FIELD_CHARS:
            return event.model_copy(update={"content": [TextPart(text=_PARTS_OMITTED)]})
    elif isinstance(event, ToolCallArgsEvent) and len(event.delta) > MAX_FIELD_CHARS:
        return event.model_copy(update={"delta": event.delta[: MAX_FIELD_CHARS + 1]})
    return event


# A TOOL_CALL_RESULT published in at most this many bytes is within the bound `bound_event` measures: its
# `model_dump_json()` differs from the published text only in the spelling of field names and in unset fields,
# which keeps it well under eight times as long (tests/display/test_published_failures.py measures the widest
# parts).
_SURELY_UNBOUNDED_BYTES: Final = (MAX_FIELD_CHARS - 4096) // 8


def bound_event_json(event: dict[str, Any], size: int | None = None) -> dict[str, Any]:
    """`bound_event` for an event as its JSON object (as published): the same object when no bound applies, else the
    JSON object of the bounded event as published. `size`, when given, is the length of the published bytes."""
    kind = event.get("type")
    if kind == "TOOL_CALL_ARGS":
        delta = event.get("delta")
        if isinstance(delta, str) and len(delta) > MAX_FIELD_CHARS:
            return {**event, "delta": delta[: MAX_FIELD_CHARS + 1]}
    elif kind == "TOOL_CALL_RESULT":
        content = event.get("content")
        if isinstance(content, str):
            return {**event, "content": content[: MAX_FIELD_CHARS + 1]} if len(content) > MAX_FIELD_CHARS else event
        if size is not None and size <= _SURELY_UNBOUNDED_BYTES:
            return event
        try:
            model = ToolCallResultEvent.model_validate(event)
        except ValidationError:
            return event  # not one the observer made; the fold reads what it can
        bounded = bound_event(model)
        if bounded is not model:  # as the worker would have published the bounded event
            return loads_object(encode_event(bounded))
    return event


def bounding_processor(processor: AguiEventProcessor | None, *, bounded: bool) -> AguiEventProcessor:
    """The caller's processor (or identity) followed, when `bounded`, by `bound_event` on every kept event."""

    def process(source: Any, event: Any) -> Any:
        kept = event if processor is None else processor(source, event)
        if kept is None or not bounded:
            return kept
        return bound_event(kept)

    return process


@dataclass(frozen=True)
class ContentPolicy:
    """Which bounds apply: `full_content` or `retain_content` lift the field bounds; only `retain_content`
    keeps every observation value (`full_content` keeps only context summaries)."""

    full_content: bool = False
    retain_content: bool = False

    @property
    def unbounded(self) -> bool:
        return self.full_content or self.retain_content

    def put_text(self, content: dict[str, JsonValue], field: str, text: str) -> None:
        """Store `text` under `field`; when bounded and longer, cut to MAX_FIELD_CHARS with `truncated`."""
        if self.unbounded or len(text) <= MAX_FIELD_CHARS:
            content[field] = text
            return
        content[field] = text[:MAX_FIELD_CHARS]
        content["truncated"] = True

    def keeps_value(self, value: JsonValue) -> bool:
        """Whether a tool result value or part list fits (or need not fit) the field bound."""
        return self.unbounded or not json_size_exceeds(value, MAX_FIELD_CHARS)

    def bounds_observation(self, *, summary: bool) -> bool:
        """Whether an observation's value is bounded: it keeps OMITTED instead when over MAX_OBSERVATION_BYTES."""
        return not (self.retain_content or (self.full_content and summary))
