"""The partition's table: its open streams, and the bounded memory of streams that ended."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

from worker._value import Value
from worker.display.projection import DisplayProjection
from worker.stream._core import StreamObserver

__all__ = ["EVENT_TOO_LARGE_CODE", "SOURCE_GAP_CODE", "EndedStreams", "OpenStream"]

SOURCE_GAP_CODE = "source_gap"  # RUN_ERROR code of a stream closed by a sequence gap
EVENT_TOO_LARGE_CODE = "event_too_large"  # RUN_ERROR code of a stream closed by an event over the record limit


class OpenStream(Value):
    """One open root stream. `last` maps each run of the stream to its last accepted sequence (-1: a child
    announced, none of its items seen yet); `widest` is the longest value it accepted. `observer is None` (and
    `last` empty) once a RUN_ERROR with code `closed_by` closed the stream, which then waits for its terminal.
    `display` is the stream's display projection while the display topic is on and the stream converts (its
    `next_seq` is `n`), else None."""

    __slots__ = ("closed_by", "display", "first_offset", "last", "n", "observer", "thread_id", "widest")
    _FIELDS = ("observer", "first_offset", "thread_id", "n", "last", "widest", "closed_by", "display")

    def __init__(  # noqa: PLR0917  # positional, as __reduce__ rebuilds it
        self, observer: StreamObserver | None, first_offset: int, thread_id: str, n: int = 0,
        last: dict[str, int] | None = None, widest: int = 0, closed_by: str | None = None,
        display: DisplayProjection | None = None,
    ) -> None:  # fmt: skip
        self.observer = observer
        self.first_offset = first_offset
        self.thread_id = thread_id
        self.n = n
        self.last: dict[str, int] = {} if last is None else last
        self.widest = widest
        self.closed_by = closed_by
        self.display = display

    def __reduce__(self) -> tuple[type[OpenStream], tuple[object, ...]]:
        return OpenStream, (self.observer, self.first_offset, self.thread_id, self.n, self.last, self.widest,
                            self.closed_by, self.display)  # fmt: skip


class EndedStreams:
    """Ended stream keys with their last root sequence and the offset that ended them, oldest first; beyond
    `capacity` the oldest is forgotten. A key stored again keeps its place in that order."""

    __slots__ = ("_entries", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def recall(self, key: str) -> int | None:
        """The last root sequence of ended stream `key`, or None when it is not remembered."""
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def get(self, key: str) -> tuple[int, int] | None:
        """(last root sequence, offset that ended it) of `key`, or None."""
        return self._entries.get(key)

    def remember(self, key: str, sequence: int, at: int) -> tuple[str, int] | None:
        """Store `key` as ended at offset `at`; returns the key forgotten to make room, and the offset that had
        ended it (`key` itself when the capacity is 0), or None."""
        entries = self._entries
        entry = entries.get(key)
        entries[key] = (sequence, at if entry is None else entry[1])
        if len(entries) > self.capacity:
            old, (_, old_at) = entries.popitem(last=False)
            return old, old_at
        return None

    def items(self) -> Iterator[tuple[str, int, int]]:
        """(key, last root sequence, offset that ended it), oldest first."""
        for key, (sequence, at) in self._entries.items():
            yield key, sequence, at
