"""DisplayFold: one run's AG-UI stream folded into stably identified display items, with exact checkpoints."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from worker.display._customs import CustomFolder
from worker.display._failures import failed_tool_call
from worker.display._ledger import Ledger, event_time
from worker.display._standard import check_event, fold_standard
from worker.display.bounding import ContentPolicy, bounding_processor
from worker.display.fragments import CustomEventAssembler
from worker.display.items import Item, ItemRef, Observed, StreamPosition
from worker.display.memory import MemorySource
from worker.display.snapshot import DisplayContinuation, DisplaySnapshot
from worker.errors import ConfigError
from worker.observe import AguiEventProcessor, HarnessAguiStreamObserver
from worker.wire import HarnessItem

__all__ = ["DisplayFold"]


class DisplayFold:
    """Folds each converted event exactly once; `export()` is a pure cut, and `restore(export())` plus an
    intact suffix yields the same records and items as the uninterrupted fold."""

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
    ) -> None:
        self._policy = ContentPolicy(full_content=full_content, retain_content=retain_content)
        self._ledger = Ledger(run_id, attempt, items, first, self._policy)
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
        """Read-only view of the items by id, in first-seen order."""
        return MappingProxyType(self._ledger.items)

    def events(self, source: HarnessItem) -> list[dict[str, Any]]:
        """Observe one source item and return its AG-UI events as the JSON dicts the stream carries."""
        return [event.model_dump(mode="json", by_alias=True) for event in self._observer.observe(source)]

    def fold(self, events: Iterable[Mapping[str, Any]], source: HarnessItem | None = None) -> list[Observed]:
        """Give each event the next sequence and fold it; when `source` is a tool result the observer did not
        present, that call's item fails and the last record reports it. A malformed event refuses the batch."""
        ledger = self._ledger
        batch = list(events)
        for event in batch:
            check_event(event)
        records: list[Observed] = []
        for event in batch:
            ledger.sequence += 1
            ref = self._fold_one(event)
            if ref is not None and event["type"] == "TEXT_MESSAGE_END":
                ref = _with_memory(ref, ledger.items[ref.id])
            records.append(Observed(sequence=ledger.sequence, event=dict(event), item=ref))
        if records and source is not None:
            failed = self._fail_tool_call(source, records[-1].event)
            if failed is not None:
                records[-1] = records[-1].model_copy(update={"item": failed})
        return records

    def _fold_one(self, event: Mapping[str, Any]) -> ItemRef | None:
        if event["type"] == "CUSTOM":
            return self._customs.fold(self._ledger, event)
        return fold_standard(self._ledger, event)

    def _fail_tool_call(self, source: HarnessItem, last: Mapping[str, Any]) -> ItemRef | None:
        failed = failed_tool_call(source)
        if failed is None:
            return None
        call_id, message, run_id = failed
        subagent = run_id if run_id != self._observer.run_id else None
        key = self._ledger.key("tool_call", call_id, subagent)
        if key not in self._ledger.items:
            return None
        content = self._ledger.content_of(key)
        content["failure"] = {"code": "tool_failed", "message": message}
        return self._ledger.put(key, "tool_call", "failed", content, event_time(last))

    def export(self) -> DisplaySnapshot:
        """A detached cut of every item and the continuation; open items stay open."""
        items = list(self._ledger.items.values())
        return DisplaySnapshot(items=items, continuation=self.export_continuation()).model_copy(deep=True)

    def capture_delta(self) -> DisplaySnapshot:
        """The items changed since the previous capture (by ordinal) with the current continuation."""
        ledger = self._ledger
        items = sorted((ledger.items[key] for key in ledger.changed), key=lambda item: item.ordinal)
        snapshot = DisplaySnapshot(items=items, continuation=self.export_continuation())
        ledger.changed.clear()
        return snapshot.model_copy(deep=True)

    def export_continuation(self) -> DisplayContinuation:
        """A detached copy of the parser state alone, without the items."""
        ledger = self._ledger
        continuation = DisplayContinuation(
            run_id=ledger.run_id,
            position=ledger.position,
            next_ordinal=ledger.next_ordinal,
            full_content=self._policy.full_content,
            retain_content=self._policy.retain_content,
            response_groups=ledger.response_groups,
            memory_sources=ledger.memory_sources,
            arguments=self._customs.arguments,
            fragments=self._customs.assembler.export(),
            observer=self._observer.export(),
        )
        return continuation.model_copy(deep=True)


def _with_memory(ref: ItemRef, item: Item) -> ItemRef:
    """An END reference carries the memory sources its message was answered with."""
    sources = item.content.get("memory_sources")
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
