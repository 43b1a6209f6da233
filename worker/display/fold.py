"""DisplayFold: one run's AG-UI stream folded into stably identified display items, exported and restored exactly."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from worker._native import core as native
from worker.display._customs import CustomFolder
from worker.display._failures import failed_tool_call, published_failure
from worker.display._json import ORJSON_AGREES
from worker.display._ledger import FINISHED, Ledger, event_time
from worker.display._standard import check_event, fold_standard
from worker.display._view import ItemsView
from worker.display.bounding import ContentPolicy, bounding_processor
from worker.display.fragments import CustomEventAssembler
from worker.display.items import Item, ItemKind, ItemRef, Observed, StreamPosition
from worker.display.memory import MemorySource
from worker.display.snapshot import DisplayContinuation, DisplaySnapshot, Eviction
from worker.errors import ConfigError, WorkerError
from worker.observe import AguiEventProcessor, HarnessAguiStreamObserver, ObserverContinuation
from worker.wire import HarnessItem

__all__ = ["DisplayFold"]


class DisplayFold:
    """Folds each converted event exactly once; `export()` is a pure cut, and `restore(export())` plus an
    intact suffix yields the same records and items as the uninterrupted fold."""

    def __new__(cls, run_id: str, items: Sequence[Item] = (), **options: Any) -> DisplayFold:
        """The native engine's fold where the native module is installed (the same records, items and exports)."""
        if cls is DisplayFold and native() is not None:
            from worker.display._native_fold import NativeDisplayFold  # noqa: PLC0415

            return object.__new__(NativeDisplayFold)
        return object.__new__(cls)

    def __init__(
        self,
        run_id: str,
        items: Sequence[Item] = (),
        *,
        attempt: int = 0,
        first: int = 1,
        full_content: bool = False,
        retain_content: bool = False,
        processor: AguiEventProcessor | None = None,
        continuation: DisplayContinuation | None = None,
        evicted: Eviction | None = None,
    ) -> None:
        self._policy = ContentPolicy(full_content=full_content, retain_content=retain_content)
        self._ledger = Ledger(run_id, attempt, items, first, self._policy, evicted)
        self._process = bounding_processor(processor, bounded=not self._policy.unbounded)
        self._customs = CustomFolder(CustomEventAssembler(), None)
        if continuation is None:
            self._observer = HarnessAguiStreamObserver(processor=self._process, retain_events=False)
            return
        state = continuation.model_copy(deep=True)
        _check_matches(state, run_id=run_id, attempt=attempt, policy=self._policy)
        self._ledger.next_ordinal = state.next_ordinal
        self._ledger.sequence = state.position.sequence
        self._ledger.response_groups = state.response_groups
        self._ledger.memory_sources = state.memory_sources
        self._customs = CustomFolder(CustomEventAssembler.restore(state.fragments), state.arguments)
        self._observer = HarnessAguiStreamObserver.restore(state.observer, processor=self._process)

    @classmethod
    def restore(cls, snapshot: DisplaySnapshot, processor: AguiEventProcessor | None = None) -> DisplayFold:
        """The fold that continues from `snapshot`; `processor` must be the one the exporting fold used."""
        state = snapshot.continuation
        return cls(
            state.run_id,
            snapshot.items,
            attempt=state.position.attempt,
            full_content=state.full_content,
            retain_content=state.retain_content,
            processor=processor,
            continuation=state,
            evicted=snapshot.evicted,
        )

    @property
    def run_id(self) -> str:
        return self._ledger.run_id

    @property
    def attempt(self) -> int:
        return self._ledger.attempt

    @property
    def position(self) -> StreamPosition:
        """The attempt and the sequence of the last folded event."""
        return self._ledger.position

    @property
    def items(self) -> Mapping[str, Item]:
        """Read-only view of the items held, by id, in first-seen order."""
        return ItemsView(self._ledger.entries)

    def keep_finished_as_json(self) -> None:
        """Keep only the JSON of each item finished from now on (written at once): the same snapshots, fewer live
        objects for a fold that builds no record per event; reading such an item back costs a parse."""
        self._ledger.finished_as_json = True

    @property
    def evicted(self) -> Eviction | None:
        """What `evict` removed so far (None when nothing was)."""
        return self._ledger.eviction()

    def events(self, source: HarnessItem) -> list[dict[str, Any]]:
        """Observe one source item and return its AG-UI events as the JSON dicts the stream carries."""
        return [event.model_dump(mode="json", by_alias=True) for event in self._observer.observe(source)]

    def fold(self, events: Iterable[Mapping[str, Any]], source: HarnessItem | None = None) -> list[Observed]:
        """Give each event the next sequence and fold it; when `source` is a tool result the observer did not
        present, that call's item fails and the last record reports it. A malformed event refuses the batch."""
        ledger = self._ledger
        batch = _dicts(events)
        for event in batch:
            check_event(event)
        records: list[Observed] = []
        for event in batch:
            ledger.sequence += 1
            key = self._fold_one(event)
            ref = None if key is None else ledger.ref(key)
            if ref is not None and event["type"] == "TEXT_MESSAGE_END":
                ref = _with_memory(ref, ledger.entries[ref.id].contents())
            records.append(Observed(sequence=ledger.sequence, event=dict(event), item=ref))
        if records and source is not None:
            failed = self._fail_tool_call(failed_tool_call(source), records[-1].event)
            if failed is not None:
                records[-1] = records[-1].model_copy(update={"item": ledger.ref(failed)})
        return records

    def apply(
        self, events: Iterable[Mapping[str, Any]], source: HarnessItem | None = None, *, published: bool = False,
        failed: tuple[str, str, str] | None = None, encoded: Sequence[bytes] | None = None,
    ) -> None:  # fmt: skip
        """`fold` without building records: the same items and continuation. With `published` (events read back
        from an output topic, with no source items) each whole non-success tool-result CUSTOM fails its call as
        `source=` would have; give such events one source item's worth at a time or fewer. `failed` stands in for
        `source` where only `failed_tool_call(source)` is at hand. `encoded`, when given, is each event's JSON
        text as published, which the fold reads only where orjson writes its JSON (`ORJSON_AGREES`): then it is
        what orjson writes for that very dict.

        The fold keeps the event dicts' values in its items: callers must not change them afterwards."""
        ledger = self._ledger
        batch = _dicts(events)
        for event in batch:
            check_event(event)
        if encoded is not None and len(encoded) != len(batch):
            raise WorkerError(f"display fold got {len(batch)} events but {len(encoded)} encoded values")
        customs = self._customs
        for index, event in enumerate(batch):
            ledger.sequence += 1
            self._fold_one(event, encoded[index] if encoded is not None else None)
            if published and customs.completed is not None:
                self._fail_tool_call(published_failure(customs.completed), event)
        if batch and source is not None:
            failed = failed_tool_call(source)
        if batch and failed is not None:
            self._fail_tool_call(failed, batch[-1])

    def _fold_one(self, event: dict[str, Any], published: bytes | None = None) -> str | None:
        if event["type"] == "CUSTOM":
            return self._customs.fold(self._ledger, event, published)
        self._customs.completed = None
        return fold_standard(self._ledger, event, published)

    def _fail_tool_call(self, failed: tuple[str, str, str] | None, last: dict[str, Any]) -> str | None:
        if failed is None:
            return None
        call_id, message, run_id = failed
        root = self._observer.run_id or self._ledger.run_id
        key = self._ledger.key("tool_call", call_id, run_id if run_id != root else None)
        if key not in self._ledger.entries:
            if key in self._ledger.evicted_ids:
                self._ledger.refuse()
            return None
        content = self._ledger.content_of(key)
        content["failure"] = {"code": "tool_failed", "message": message}
        return self._ledger.put(key, "tool_call", "failed", content, event_time(last))

    def evictable(self, *, ended: bool = False) -> list[str]:
        """Ids of the items `evict` may remove, in ordinal order: every finished item except an argument stream
        the next event could still extend; every item at all once the run has `ended`."""
        entries = self._ledger.entries
        if ended:
            return list(entries)
        held = self._customs.arguments
        growing = held.key if held is not None and held.sequence == self._ledger.sequence else None
        return [key for key, entry in entries.items() if entry.state in FINISHED and key != growing]

    def evict(self, item_ids: Iterable[str], *, ended: bool = False) -> int:
        """Remove items for good (each must be `evictable`), keeping the ordinal count; a later event addressing
        one is refused and counted in `evicted.refused`. Returns how many were removed."""
        keys = list(item_ids)
        allowed = set(self.evictable(ended=ended))
        refused = [key for key in keys if key not in allowed]
        if refused:
            raise ConfigError(f"display items {refused[:3]} cannot be evicted: not finished or not held")
        return self._ledger.evict(keys)

    def export(self) -> DisplaySnapshot:
        """A detached cut of every item and the continuation; open items stay open."""
        items = [entry.item() for entry in self._ledger.entries.values()]
        snapshot = DisplaySnapshot(items=items, continuation=self.export_continuation(), evicted=self.evicted)
        return snapshot.model_copy(deep=True)

    def export_json(
        self, observer: ObserverContinuation | None = None, *, observer_json: bytes | None = None
    ) -> bytes:
        """`export().model_dump_json()` as bytes, built from each item's JSON kept since its last change; with
        `observer` (or `observer_json`, its JSON as the model writes it), that continuation stands in for the fold's
        own observer's."""
        ledger = self._ledger
        parts = [b'{"items":', ledger.items_json(), b',"continuation":',
                 self._continuation_json(observer, observer_json)]  # fmt: skip
        eviction = ledger.eviction()
        if eviction is not None:
            parts += (b',"evicted":', eviction.__pydantic_serializer__.to_json(eviction))
        parts.append(b"}")
        return b"".join(parts)

    def _continuation_json(self, observer: ObserverContinuation | None, observer_json: bytes | None) -> bytes:
        """The continuation's JSON as its model writes it: by hand for the usual parts, through the model when
        retained content or pending fragments are in it."""
        ledger = self._ledger
        assembler = self._customs.assembler
        if self._policy.retain_content or assembler.pending or not ORJSON_AGREES:
            if observer is None and observer_json is not None:
                observer = ObserverContinuation.model_validate_json(observer_json)
            continuation = self._continuation(observer)
            return continuation.__pydantic_serializer__.to_json(continuation)
        if observer is not None:
            observed = observer.__pydantic_serializer__.to_json(observer)
        else:  # the observer's data written by orjson, which writes what its model would (ORJSON_AGREES)
            observed = observer_json if observer_json is not None else orjson.dumps(self._observer.export_data())
        held = self._customs.arguments
        return b"".join((
            b'{"run_id":', orjson.dumps(ledger.run_id),
            b',"position":{"attempt":%d,"sequence":%d},"next_ordinal":%d,"full_content":'
            % (ledger.attempt, ledger.sequence, ledger.next_ordinal),
            b"true" if self._policy.full_content else b"false",
            b',"response_groups":', orjson.dumps(ledger.response_groups),
            b',"memory_sources":' + ledger.memory_json() if ledger.memory_sources else b"",
            b',"arguments":',
            b"null" if held is None else held.to_json(),
            b',"fragments":{"pending":{},"gap":%s,"max_bytes":%d,"max_pending":%d}'
            % (b"true" if assembler.gap else b"false", assembler.max_bytes, assembler.max_pending),
            b',"observer":', observed, b"}",
        ))  # fmt: skip

    def item_json(self, item_id: str) -> bytes:
        """The JSON of one held item, as `export_json` writes it."""
        return self._ledger.entries[item_id].to_json()

    def item_kind(self, item_id: str) -> ItemKind:
        """The kind of one held item."""
        return self._ledger.entries[item_id].kind

    def export_continuation(self) -> DisplayContinuation:
        """A detached copy of the parser state alone, without the items."""
        return self._continuation(None).model_copy(deep=True)

    def _continuation(self, observer: ObserverContinuation | None) -> DisplayContinuation:
        ledger = self._ledger
        return DisplayContinuation(
            run_id=ledger.run_id,
            position=ledger.position,
            next_ordinal=ledger.next_ordinal,
            full_content=self._policy.full_content,
            retain_content=self._policy.retain_content,
            response_groups=ledger.response_groups,
            memory_sources=ledger.memory_sources,
            arguments=None if self._customs.arguments is None else self._customs.arguments.export(),
            fragments=self._customs.assembler.export(),
            observer=self._observer.export() if observer is None else observer,
        )


def _dicts(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The events as dicts (a compiled fold reads a dict's fields directly, any other mapping through its methods);
    a list of dicts is itself (read, never changed), without the generic iteration an `Iterable` costs compiled."""
    if isinstance(events, list):
        given: list[Any] = events
        for event in given:
            if type(event) is not dict:
                return [item if type(item) is dict else dict(item) for item in given]
        return given
    return [event if type(event) is dict else dict(event) for event in events]


def _with_memory(ref: ItemRef, content: Mapping[str, Any]) -> ItemRef:
    """An END reference carries the memory sources its message was answered with."""
    sources = content.get("memory_sources")
    if not isinstance(sources, list):
        return ref
    parsed = tuple(MemorySource.model_validate(source) for source in sources)
    return ref.model_copy(update={"memory_sources": parsed})


def _check_matches(state: DisplayContinuation, *, run_id: str, attempt: int, policy: ContentPolicy) -> None:
    if state.run_id != run_id:
        raise ConfigError(f"display continuation run_id {state.run_id!r} does not match the fold's {run_id!r}")
    if state.position.attempt != attempt:
        raise ConfigError(f"display continuation attempt {state.position.attempt} does not match the fold's {attempt}")
    if state.full_content != policy.full_content or state.retain_content != policy.retain_content:
        raise ConfigError(
            "display continuation content policy "
            f"(full_content={state.full_content}, retain_content={state.retain_content}) does not match the "
            f"fold's (full_content={policy.full_content}, retain_content={policy.retain_content})"
        )
