"""AG-UI event processors that tests name as `tests.processors:<name>` (`--processor`, `default_core`).

Each is deterministic, as the processor hook requires; each misbehaves only on items it can recognise by
their run id, so the same processor serves a whole corpus.
"""

from __future__ import annotations

from typing import Any

from ag_ui.core import BaseEvent, EventType

BUGGY_SUFFIX = "-buggy"  # runs whose id ends so hit the injected bug ...
BUGGY_SEQUENCE = 5  # ... on their item of this sequence (a TEXT_MESSAGE_CONTENT in s01_hello)
UNENCODABLE_SUFFIX = "-unencodable"  # runs whose RUN_FINISHED gets a result JSON cannot hold
NOT_CALLABLE = 42


def buggy(item: Any, event: BaseEvent) -> BaseEvent:
    """Keeps every event, but raises ValueError on one item of each `-buggy` run: a conversion bug."""
    if item.run_id.endswith(BUGGY_SUFFIX) and item.sequence == BUGGY_SEQUENCE:
        raise ValueError(f"injected conversion bug at {item.run_id} sequence {item.sequence}")
    return event


def unencodable(item: Any, event: BaseEvent) -> BaseEvent:
    """Puts an object no JSON encoder writes into the RUN_FINISHED result of `-unencodable` runs."""
    if event.type == EventType.RUN_FINISHED and item.run_id.endswith(UNENCODABLE_SUFFIX):
        return event.model_copy(update={"result": object()})
    return event


def shout(item: Any, event: BaseEvent) -> BaseEvent:
    """Upper-cases text deltas: a visible, deterministic edit of a mutable field."""
    if event.type == EventType.TEXT_MESSAGE_CONTENT:
        return event.model_copy(update={"delta": event.delta.upper()})  # type: ignore[attr-defined]
    return event
