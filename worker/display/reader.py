"""The reading side of the display topic: a run's latest display record continued with its later AG-UI events."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from worker.display._json import loads_object
from worker.display.bounding import bound_event_json
from worker.display.fold import DisplayFold
from worker.display.items import Item
from worker.display.snapshot import DisplaySnapshot, Eviction
from worker.errors import AguiObservationError, ConfigError, DisplayGapError

__all__ = ["DisplayReader", "read_display"]

EventValue = bytes | str | Mapping[str, Any]


def _event(value: EventValue) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else loads_object(value)


class DisplayReader:
    """One run's display as a UI backend keeps it: restored from the run's latest display record (or empty when
    it has none), then fed the run's output records in agui-seq order. Its items equal those `convert --display`
    has after the same events; a record already covered is skipped, a missing one refused.
    """

    __slots__ = ("_fold", "_next", "_skipped")

    def __init__(self, run_id: str, record: bytes | str | None = None, agui_seq: int | None = None) -> None:
        """`record` and `agui_seq` are the display record's value and header; with no record, the reader starts
        at the run's first event (agui-seq 0)."""
        if record is None:
            self._fold = DisplayFold(run_id)
            self._next = 0
        else:
            if agui_seq is None or agui_seq < 0:
                raise ConfigError(f"a display record of run {run_id} needs its agui-seq header, got {agui_seq!r}")
            snapshot = DisplaySnapshot.model_validate_json(record)
            if snapshot.continuation.run_id != run_id:
                raise ConfigError(
                    f"display record of run {snapshot.continuation.run_id!r} given for run {run_id!r}"
                )
            self._fold = DisplayFold.restore(snapshot)
            self._next = agui_seq + 1
        self._skipped = 0

    @property
    def run_id(self) -> str:
        return self._fold.run_id

    @property
    def next_seq(self) -> int:
        """The agui-seq of the output record this reader folds next."""
        return self._next

    @property
    def skipped(self) -> int:
        """Output records the fold refused as malformed AG-UI events."""
        return self._skipped

    @property
    def items(self) -> list[Item]:
        """The display items, in ordinal order (detached models)."""
        return list(self._fold.items.values())

    @property
    def evicted(self) -> Eviction | None:
        """What the display record's writer evicted before (earlier items this display no longer holds)."""
        return self._fold.evicted

    def snapshot(self) -> DisplaySnapshot:
        """The display as a snapshot, as the writer would publish it after the same events."""
        return self._fold.export()

    def feed(self, agui_seq: int, value: EventValue) -> bool:
        """Fold the run's output record `agui_seq` (its value: the AG-UI event JSON); False when it was already
        covered. DisplayGapError when it lies past `next_seq`."""
        if agui_seq < self._next:
            return False
        if agui_seq > self._next:
            raise DisplayGapError(self.run_id, self._next, agui_seq)
        try:
            self._fold.apply([bound_event_json(_event(value))], published=True)
        except AguiObservationError:
            self._skipped += 1
        self._next += 1
        return True


def read_display(
    run_id: str, record: bytes | str | None, agui_seq: int | None, events: Iterable[tuple[int, EventValue]]
) -> list[Item]:
    """The display items of run `run_id` from its latest display record (value and agui-seq header; None when it
    has none) and its output records `(agui-seq, value)` from there on, in order."""
    reader = DisplayReader(run_id, record, agui_seq)
    for seq, value in events:
        reader.feed(seq, value)
    return reader.items
