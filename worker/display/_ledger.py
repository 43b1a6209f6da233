"""The fold's item ledger: items by id in first-seen order, dense ordinals, position, per-scope context."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import JsonValue

from worker.display.bounding import ContentPolicy
from worker.display.items import Item, ItemKind, ItemRef, ItemState, StreamPosition, item_id
from worker.display.memory import MemorySource

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FINISHED: frozenset[ItemState] = frozenset({"completed", "failed"})
ROOT_SCOPE = "root"


def event_time(event: Mapping[str, Any]) -> datetime:
    """The event's own epoch-millisecond `timestamp` as a UTC datetime; the epoch when it carries none."""
    stamp = event.get("timestamp")
    return _EPOCH + timedelta(milliseconds=stamp) if isinstance(stamp, int) else _EPOCH


def scope_of(subagent_run_id: object) -> str:
    """The context scope of an event: its subagent run id, or the root."""
    return subagent_run_id if isinstance(subagent_run_id, str) and subagent_run_id else ROOT_SCOPE


class Ledger:
    """Owns every item; `put` replaces an item whole, keeping its ordinal, first stream id and start time."""

    def __init__(self, run_id: str, attempt: int, items: Iterable[Item], first: int, policy: ContentPolicy) -> None:
        self.run_id = run_id
        self.attempt = attempt
        self.policy = policy
        self.items: dict[str, Item] = {item.id: item.model_copy(deep=True) for item in items}
        self.next_ordinal = first + len(self.items)
        self.sequence = 0
        self.response_groups: dict[str, str] = {}
        self.memory_sources: dict[str, tuple[MemorySource, ...]] = {}
        self.changed: set[str] = set(self.items)

    @property
    def position(self) -> StreamPosition:
        return StreamPosition(attempt=self.attempt, sequence=self.sequence)

    def key(self, kind: ItemKind, source_id: str, subagent_run_id: object = None) -> str:
        """The id of the item of `kind` for `source_id`, qualified by a subagent run id when there is one."""
        scoped = f"{subagent_run_id}:{source_id}" if subagent_run_id else source_id
        return item_id(self.run_id, kind, scoped)

    def observation_key(self) -> str:
        """The id of an observation made by the event at the current position."""
        return item_id(self.run_id, "observation", f"{self.attempt}:{self.sequence}")

    def content_of(self, key: str) -> dict[str, JsonValue]:
        """A shallow copy of an item's content (empty for a new item)."""
        found = self.items.get(key)
        return dict(found.content) if found is not None else {}

    def state_of(self, key: str) -> ItemState:
        found = self.items.get(key)
        return found.state if found is not None else "in_progress"

    def group(self, scope: str) -> str | None:
        return self.response_groups.get(scope)

    def put(self, key: str, kind: ItemKind, state: ItemState, content: dict[str, JsonValue], at: datetime) -> ItemRef:
        here = f"{self.attempt}-{self.sequence}"
        before = self.items.get(key)
        if before is None:
            ordinal, first_id, started = self.next_ordinal, here, at
            self.next_ordinal += 1
            refs = {}
        else:
            ordinal, first_id, started = before.ordinal, before.first_stream_id, before.started_at
            refs = before.content_refs
        self.items[key] = Item(
            id=key,
            ordinal=ordinal,
            kind=kind,
            state=state,
            first_stream_id=first_id,
            last_stream_id=here,
            started_at=started,
            ended_at=at if state in _FINISHED else None,
            content=content,
            content_refs=refs,
        )
        self.changed.add(key)
        group = content.get("responseGroup")
        failure = content.get("failure")
        return ItemRef(
            id=key,
            kind=kind,
            state=state,
            ordinal=ordinal,
            response_group=group if isinstance(group, str) else None,
            failure=failure if isinstance(failure, dict) else None,
        )
