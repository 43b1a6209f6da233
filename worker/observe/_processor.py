"""Enforcement of the processor contract: only the listed mutable fields may change (spec §1c)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from ag_ui.core import BaseEvent, CustomEvent, Event, EventType
from pydantic import TypeAdapter, ValidationError

from worker.errors import AguiObservationError
from worker.wire import HarnessItem

__all__ = ["AguiEventProcessor", "validate_replacement"]

AguiEventProcessor = Callable[[HarnessItem, Any], Any]
_EVENT: TypeAdapter[Any] = TypeAdapter(cast(Any, Event))  # Event is an Annotated union, not a class
_CORRELATION = ("thread_id", "run_id", "sequence", "occurred_at")
_MUTABLE: dict[Any, frozenset[str]] = {
    EventType.TEXT_MESSAGE_CONTENT: frozenset({"delta"}),
    EventType.REASONING_MESSAGE_CONTENT: frozenset({"delta"}),
    EventType.REASONING_ENCRYPTED_VALUE: frozenset({"encrypted_value"}),
    EventType.TOOL_CALL_ARGS: frozenset({"delta"}),
    EventType.TOOL_CALL_RESULT: frozenset({"content"}),
    EventType.RUN_FINISHED: frozenset({"result"}),
    EventType.RUN_ERROR: frozenset({"message"}),
}


def validate_replacement(original: BaseEvent, candidate: object) -> BaseEvent:
    """Return a detached, re-validated replacement, or raise AguiObservationError naming the violation."""
    if not isinstance(candidate, BaseEvent):
        raise AguiObservationError(
            f"The event processor returned a non-AG-UI value (got {type(candidate).__name__})"
        )
    try:
        replacement: BaseEvent = _EVENT.validate_python(candidate.model_dump(mode="python"), strict=True)
    except (ValidationError, ValueError) as exc:
        raise AguiObservationError("The event processor returned an invalid AG-UI event") from exc
    if replacement.type != original.type:
        raise AguiObservationError(
            f"The event processor changed the AG-UI event type ({original.type.value} to {replacement.type.value})"
        )
    before, after = original.model_dump(mode="python"), replacement.model_dump(mode="python")
    mutable = _MUTABLE.get(original.type, frozenset())
    for name in [*before, *(key for key in after if key not in before)]:
        if name not in mutable and (name not in before or name not in after or before[name] != after[name]):
            raise AguiObservationError(f"The event processor changed structural field {name}")
    _check_correlation(original, replacement)
    return replacement.model_copy(deep=True)


def _check_correlation(original: BaseEvent, replacement: BaseEvent) -> None:
    if isinstance(original, CustomEvent) and isinstance(replacement, CustomEvent):
        before, after = original.value, replacement.value
    else:
        before, after = original.raw_event, replacement.raw_event
    if not isinstance(before, dict) or not isinstance(after, dict):
        return
    for name in _CORRELATION:
        if name in before and after.get(name) != before[name]:
            raise AguiObservationError(f"The event processor changed {name} source correlation")
