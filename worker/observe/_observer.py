"""HarnessAguiObserver: atomic per-item conversion of one run to AG-UI events, with resume and export (spec §1c)."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable
from typing import Self

from ag_ui.core import BaseEvent, CustomEvent

from worker.errors import AguiObservationError
from worker.observe._continuation import ObserverContinuation, StateModel
from worker.observe._convert import convert_event
from worker.observe._fragments import FRAGMENT_LIMIT_BYTES, fragment_custom_event
from worker.observe._parts import close_parts
from worker.observe._processor import AguiEventProcessor, validate_replacement
from worker.observe._state import Draft, RunState, state_data
from worker.observe._terminal import terminal_event
from worker.wire import HarnessEvent, HarnessItem, HarnessRunResultEvent, timestamp_ms

__all__ = ["HarnessAguiObserver"]

Commit = Callable[[], None]
# A CUSTOM re-serializes its source record: JSON numbers can grow 4.5x ("1e15"), redaction and defaults
# add little, so a record this short cannot yield a CUSTOM over the 48 KiB fragmentation limit.
_SURELY_SMALL = (FRAGMENT_LIMIT_BYTES - 4096) // 5
_ITEM_TYPES = (HarnessEvent, HarnessRunResultEvent)


class HarnessAguiObserver:
    """Converts one run's items; a failing observe leaves no trace (state, journal and binding unchanged)."""

    __slots__ = ("_events", "_processor", "_resumed", "_resuming", "_retain", "_run_id", "_state", "_thread_id")

    def __init__(self, *, processor: AguiEventProcessor | None = None, retain_events: bool = True) -> None:
        self._processor = processor
        self._retain = retain_events
        self._thread_id: str | None = None
        self._run_id: str | None = None
        self._state = RunState()
        self._events: list[BaseEvent] = []
        self._resuming = False
        self._resumed = False

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # Positional state pickles faster than the attribute dict a compiled class would otherwise use.
        return _unpickle, (type(self), (self._processor, self._retain, self._thread_id, self._run_id, self._state,
                                         self._events, self._resuming, self._resumed))

    @property
    def thread_id(self) -> str | None:
        """The bound thread id, or None before the first item."""
        return self._thread_id

    @property
    def run_id(self) -> str | None:
        """The bound (root) run id, or None before the first item."""
        return self._run_id

    @property
    def event_count(self) -> int:
        """Frames in the journal; always 0 with retain_events=False."""
        return len(self._events)

    def observe(self, item: object) -> tuple[BaseEvent, ...]:
        """Convert one Harness item and commit it atomically; returns its frames (TypeError for anything else)."""
        if self._resuming:
            raise AguiObservationError("Cannot observe while observer resumption is in progress")
        if not isinstance(item, _ITEM_TYPES):
            raise TypeError(f"item must be a HarnessEvent or HarnessRunResultEvent, got {type(item).__name__}")
        self._check_correlation(item)
        events, commit = self._convert(item, timestamp_ms(item))
        processor = self._processor
        if processor is not None:
            processed: list[BaseEvent] = []
            for event in events:
                candidate = processor(item, event.model_copy(deep=True))
                if candidate is not None:
                    processed.append(validate_replacement(event, candidate))
            events = processed
        if 0 < item.wire_size <= _SURELY_SMALL:
            frames = events
        else:
            frames = []
            for index, event in enumerate(events):
                if isinstance(event, CustomEvent):
                    identity = f"{item.thread_id}:{item.run_id}:{item.sequence}:{index}"
                    frames.extend(fragment_custom_event(event, identity=identity))
                else:
                    frames.append(event)
        commit()
        if self._thread_id is None:
            self._thread_id = item.thread_id
        if self._run_id is None:
            self._run_id = item.run_id
        if self._retain:
            self._events.extend(frames)
            return tuple(event.model_copy(deep=True) for event in frames)
        return tuple(frames)

    def _check_correlation(self, item: HarnessItem) -> None:
        if self._thread_id is not None and item.thread_id != self._thread_id:
            raise AguiObservationError(
                f"Harness Thread correlation changed within one observer ({self._thread_id} to {item.thread_id})"
            )
        if self._run_id is not None and item.run_id != self._run_id:
            raise AguiObservationError(
                f"Harness Run correlation changed within one observer ({self._run_id} to {item.run_id})"
            )

    def _convert(self, item: HarnessItem, ts: int) -> tuple[list[BaseEvent], Commit]:
        draft = Draft(self._state)
        return convert_run_item(item, ts, draft), draft.commit

    def snapshot(self, *, start: int = 0, stop: int | None = None) -> tuple[BaseEvent, ...]:
        """Detached journal frames [start, stop)."""
        if not self._retain:
            raise AguiObservationError("Snapshots require retain_events=True")
        end = len(self._events) if stop is None else stop
        if start < 0 or end < start or end > len(self._events):
            raise ValueError(f"snapshot range [{start}, {end}) is outside the {len(self._events)} journal frames")
        return tuple(event.model_copy(deep=True) for event in self._events[start:end])

    def export(self) -> ObserverContinuation:
        """The conversion state (no journal) as a JSON-serializable continuation."""
        if self._resuming:
            raise AguiObservationError("Cannot export while observer resumption is in progress")
        return ObserverContinuation(thread_id=self._thread_id, run_id=self._run_id, state=StateModel.of(self._state))

    def export_data(self) -> dict[str, object]:
        """The continuation as JSON data, equal to `export().model_dump(mode="json")`, built without pydantic."""
        if self._resuming:
            raise AguiObservationError("Cannot export while observer resumption is in progress")
        return {"thread_id": self._thread_id, "run_id": self._run_id, "state": state_data(self._state)}

    @classmethod
    def restore(cls, continuation: ObserverContinuation, *, processor: AguiEventProcessor | None = None) -> Self:
        """An observer (retain_events=False, counted as resumed) continuing from `continuation`."""
        observer = cls(processor=processor, retain_events=False)
        observer._thread_id, observer._run_id = continuation.thread_id, continuation.run_id
        observer._state = continuation.state.to_state()
        observer._resumed = True
        return observer

    async def resume(self, history: AsyncIterable[HarnessItem]) -> None:
        """Rebuild this fresh observer from history without returning events; on failure it stays fresh."""
        if not isinstance(history, AsyncIterable):
            raise TypeError(f"history must be an async iterable of Harness items, got {type(history).__name__}")
        if self._resuming:
            raise AguiObservationError("Observer resumption is already in progress")
        if self._resumed or self._thread_id is not None or self._run_id is not None:
            raise AguiObservationError("Observer resumption requires a fresh observer")
        staged = type(self)(processor=self._processor, retain_events=self._retain)
        self._resuming = True
        try:
            async for item in history:
                staged.observe(item)
            self._thread_id, self._run_id = staged._thread_id, staged._run_id
            self._state, self._events = staged._state, staged._events
            self._resumed = True
        finally:
            self._resuming = False


_Pickled = tuple[AguiEventProcessor | None, bool, str | None, str | None, RunState, list[BaseEvent], bool, bool]


def _unpickle(cls: type[HarnessAguiObserver], fields: _Pickled) -> HarnessAguiObserver:
    processor, retain, thread_id, run_id, state, events, resuming, resumed = fields
    observer = cls(processor=processor, retain_events=retain)
    observer._thread_id, observer._run_id, observer._state, observer._events = thread_id, run_id, state, events
    observer._resuming, observer._resumed = resuming, resumed
    return observer


def convert_run_item(item: HarnessItem, ts: int, draft: Draft) -> list[BaseEvent]:
    """The events of one item against one run's draft state."""
    if isinstance(item, HarnessRunResultEvent):
        events = close_parts(ts, draft)
        events.append(terminal_event(item, ts))
        return events
    return convert_event(item, ts, draft)


