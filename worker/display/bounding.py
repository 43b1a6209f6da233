"""Payload bounds of the display fold: what an item keeps of large texts, results and observations."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ag_ui.core import BaseEvent, TextPart, ToolCallArgsEvent, ToolCallResultEvent
from pydantic import JsonValue

from worker.observe import AguiEventProcessor

__all__ = [
    "MAX_FIELD_CHARS",
    "MAX_OBSERVATION_BYTES",
    "OMITTED",
    "ContentPolicy",
    "bound_event",
    "bounding_processor",
    "json_size",
]

# Characters an item keeps of a message text, tool arguments or a tool result.
MAX_FIELD_CHARS = 262144
# JSON size above which an observation keeps only its name.
MAX_OBSERVATION_BYTES = 32768
# The value an over-large observation keeps.
OMITTED: dict[str, JsonValue] = {"omitted": True}
_PARTS_OMITTED = "Result parts omitted: display size limit exceeded."


def json_size(value: object) -> int:
    """Length of the compact, ASCII-escaped JSON text of `value` (the measure every display bound uses)."""
    return len(json.dumps(value, separators=(",", ":")))


def bound_event(event: BaseEvent) -> BaseEvent:
    """Cut a TOOL_CALL_RESULT text or TOOL_CALL_ARGS delta to MAX_FIELD_CHARS + 1 characters, and replace an
    over-large result part list by one text part; the extra character lets the fold see the cut."""
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
        return self.unbounded or json_size(value) <= MAX_FIELD_CHARS

    def observation_value(self, value: JsonValue, *, summary: bool) -> JsonValue:
        """The value an observation keeps: OMITTED when it is over MAX_OBSERVATION_BYTES and not retained."""
        if self.retain_content or (self.full_content and summary):
            return value
        return dict(OMITTED) if json_size(value) > MAX_OBSERVATION_BYTES else value
