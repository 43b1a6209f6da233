"""The display fold on the native engine (`worker._native_core.DisplayFold`): `DisplayFold`'s records, items, exports
and errors, the same bytes; the observer (`events`) and the reading of source items stay Python."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import orjson

from worker._native import core
from worker.display._failures import failed_tool_call, published_failure
from worker.display.bounding import ContentPolicy, bounding_processor
from worker.display.fold import DisplayFold, _check_matches, _dicts
from worker.display.items import Item, ItemKind, ItemRef, Observed, StreamPosition
from worker.display.memory import MemorySource
from worker.display.snapshot import DisplayContinuation, DisplaySnapshot, Eviction
from worker.errors import ConfigError, WorkerError
from worker.observe import AguiEventProcessor, HarnessAguiStreamObserver, ObserverContinuation
from worker.wire import HarnessItem

__all__ = ["NativeDisplayFold", "native_engine"]


def native_engine(
    run_id: str, items: Sequence[Item], *, attempt: int, first: int, policy: ContentPolicy,
    continuation: DisplayContinuation | None, evicted: Eviction | None,
) -> Any:  # fmt: skip
    """The native engine of a fold made with these arguments; ConfigError for a continuation these types cannot
    hold (an integer beyond 64 bits)."""
    native = core()
    assert native is not None, "a native fold is made only where the native module is installed"
    full, retain = policy.full_content, policy.retain_content
    if continuation is None and not items and evicted is None:
        return native.DisplayFold(run_id, attempt=attempt, first=first, full_content=full, retain_content=retain)
    if continuation is None:
        continuation = DisplayContinuation.model_construct(
            run_id=run_id, position=StreamPosition(attempt=attempt, sequence=0),
            next_ordinal=first + len({item.id for item in items}), full_content=full, retain_content=retain,
        )  # fmt: skip
    snapshot = DisplaySnapshot.model_construct(items=list(items), continuation=continuation, evicted=evicted)
    engine = native.DisplayFold.restore(snapshot.__pydantic_serializer__.to_json(snapshot))
    if engine is None:
        raise ConfigError(f"display snapshot of run {run_id!r} holds an integer beyond 64 bits")
    return engine


class _Items(Mapping[str, Item]):
    """Read-only view of the engine's items by id, in ordinal order (each read back from its JSON)."""

    __slots__ = ("_engine",)

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getitem__(self, key: str) -> Item:
        return Item.model_validate_json(self._engine.item_json(key))

    def __iter__(self) -> Iterator[str]:
        return iter(self._engine.keys())

    def __len__(self) -> int:
        return len(self._engine)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._engine


class NativeDisplayFold(DisplayFold):
    """`DisplayFold` folding in Rust; made by `DisplayFold(...)` where the native module is installed."""

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
        self._process = bounding_processor(processor, bounded=not self._policy.unbounded)
        if continuation is None:
            self._observer = HarnessAguiStreamObserver(processor=self._process, retain_events=False)
        else:
            _check_matches(continuation, run_id=run_id, attempt=attempt, policy=self._policy)
            self._observer = HarnessAguiStreamObserver.restore(continuation.observer, processor=self._process)
        self._engine = native_engine(run_id, items, attempt=attempt, first=first, policy=self._policy,
                                     continuation=continuation, evicted=evicted)  # fmt: skip

    @property
    def run_id(self) -> str:
        run_id: str = self._engine.run_id
        return run_id

    @property
    def attempt(self) -> int:
        attempt: int = self._engine.attempt
        return attempt

    @property
    def position(self) -> StreamPosition:
        return StreamPosition(attempt=self._engine.attempt, sequence=self._engine.sequence)

    @property
    def items(self) -> Mapping[str, Item]:
        return _Items(self._engine)

    def keep_finished_as_json(self) -> None:
        """The native fold always keeps a finished item as its JSON alone."""

    @property
    def evicted(self) -> Eviction | None:
        found = self._engine.evicted_json()
        return None if found is None else Eviction.model_validate_json(found)

    def _root(self) -> str:
        return self._observer.run_id or self.run_id

    def fold(self, events: Iterable[Mapping[str, Any]], source: HarnessItem | None = None) -> list[Observed]:
        engine = self._engine
        batch = _dicts(events)
        root = self._root()
        engine.check(batch)
        records: list[Observed] = []
        for event in batch:
            (key,) = engine.apply([event], None, root)
            records.append(Observed(sequence=engine.sequence, event=dict(event), item=self._ref(key, event)))
        failed = failed_tool_call(source) if records and source is not None else None
        if failed is not None:
            key = engine.fail_tool_call(failed, records[-1].event, root)
            if key is not None:
                records[-1] = records[-1].model_copy(update={"item": self._ref(key, None)})
        return records

    def _ref(self, key: str | None, event: Mapping[str, Any] | None) -> ItemRef | None:
        if key is None:
            return None
        kind, state, ordinal, group, failure, sources = self._engine.reference(key)
        ref = ItemRef(
            id=key, kind=kind, state=state, ordinal=ordinal, response_group=group if isinstance(group, str) else None,
            failure=failure if isinstance(failure, dict) else None,
        )  # fmt: skip
        if event is not None and event["type"] == "TEXT_MESSAGE_END" and isinstance(sources, list):
            parsed = tuple(MemorySource.model_validate(found) for found in sources)
            ref = ref.model_copy(update={"memory_sources": parsed})
        return ref

    def apply(
        self, events: Iterable[Mapping[str, Any]], source: HarnessItem | None = None, *, published: bool = False,
        failed: tuple[str, str, str] | None = None, encoded: Sequence[bytes] | None = None,
    ) -> None:  # fmt: skip
        engine = self._engine
        batch = _dicts(events)
        engine.check(batch)
        if encoded is not None and len(encoded) != len(batch):
            raise WorkerError(f"display fold got {len(batch)} events but {len(encoded)} encoded values")
        if batch and source is not None:
            failed = failed_tool_call(source)
        root = self._root()
        if not published:
            engine.apply(batch, failed if batch else None, root)
            return
        for event in batch:
            engine.apply([event], None, root, True)
            whole = engine.take_completed_result()
            found = None if whole is None else published_failure(whole)
            if found is not None:
                engine.fail_tool_call(found, event, root)
        if batch and failed is not None:
            engine.fail_tool_call(failed, batch[-1], root)

    def evictable(self, *, ended: bool = False) -> list[str]:
        evictable: list[str] = self._engine.evictable(ended)
        return evictable

    def evict(self, item_ids: Iterable[str], *, ended: bool = False) -> int:
        removed: int = self._engine.evict(list(item_ids), ended)
        return removed

    def export(self) -> DisplaySnapshot:
        return DisplaySnapshot.model_validate_json(self.export_json())

    def export_json(
        self, observer: ObserverContinuation | None = None, *, observer_json: bytes | None = None
    ) -> bytes:
        exported: bytes = self._engine.export(self._observer_json(observer, observer_json))
        return exported

    def _observer_json(self, observer: ObserverContinuation | None, observer_json: bytes | None) -> bytes:
        """The observer continuation's JSON as its model writes it: the one given, else the fold's own observer's."""
        if observer is not None:
            return observer.__pydantic_serializer__.to_json(observer)
        if observer_json is not None:
            return observer_json
        return orjson.dumps(self._observer.export_data())

    def item_json(self, item_id: str) -> bytes:
        found: bytes = self._engine.item_json(item_id)
        return found

    def item_kind(self, item_id: str) -> ItemKind:
        kind: ItemKind = self._engine.item_kind(item_id)
        return kind

    def export_continuation(self) -> DisplayContinuation:
        return DisplayContinuation.model_validate_json(self._engine.continuation(self._observer_json(None, None)))

