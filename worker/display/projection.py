"""A root run's display projection: its published AG-UI events folded into the display records (the run's
`DisplaySnapshot`, compacted by run id) that a late-joining UI starts from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

import orjson
from ag_ui.core import BaseEvent
from pydantic import ValidationError

from worker._framing import Headers, framed_size, varint_size
from worker._native import core as native
from worker._value import FrozenValue
from worker.contract import SEQ, THREAD_ID
from worker.display._failures import failed_tool_call
from worker.display._json import loads_object
from worker.display.bounding import bound_event_json
from worker.display.cadence import DisplayCadence
from worker.display.fold import DisplayFold
from worker.display.snapshot import DisplaySnapshot
from worker.errors import AguiObservationError, ConfigError, WorkerError
from worker.observe import encode_event
from worker.wire import HarnessItem

if TYPE_CHECKING:
    from worker.display._native_projection import NativeDisplayProjection

__all__ = [
    "DEFAULT_DISPLAY_INTERVAL_MS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MIN_DISPLAY_BYTES",
    "Accepted",
    "DisplayProjection",
    "DisplayRecord",
    "ExportsContinuation",
    "record_overhead",
]

DEFAULT_DISPLAY_INTERVAL_MS = 5000  # as the worker's --display-interval-ms
# Kafka's default max.message.bytes of a topic.
DEFAULT_MAX_MESSAGE_BYTES = 1048588
MIN_DISPLAY_BYTES = 1024  # the smallest display-record limit a projection accepts
_STATE_FORMAT = 1
# Bytes kept free while choosing items to evict, for the growth of the eviction note itself.
_NOTE_SLACK = 256


def record_overhead(key: bytes, headers: Headers, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> int:
    """Bytes a record of `key` and `headers` adds to a value of at most `max_bytes` in a one-record batch, at most:
    its `framed_size` with an empty value, the value's length written at the widest it can be."""
    return framed_size(key, b"", headers) - 1 + varint_size(max_bytes)


class ExportsContinuation(Protocol):
    """An observer whose continuation a display record carries (`HarnessAguiStreamObserver`): `export_data()` is
    its `ObserverContinuation` as JSON data."""

    def export_data(self) -> dict[str, object]: ...


class DisplayRecord(FrozenValue):
    """One record for the display topic: key = root run id, value = the run's snapshot JSON, headers `agui-seq`
    (the n of the last event folded in) and `thread-id`; `evicted` counts the items paged out since the previous
    record."""

    __slots__ = ("agui_seq", "evicted", "headers", "key", "value")
    _FIELDS = ("key", "value", "headers", "agui_seq", "evicted")

    def __init__(self, key: bytes, value: bytes, headers: Headers, agui_seq: int, evicted: int) -> None:
        self.key: Final = key
        self.value: Final = value
        self.headers: Final = headers
        self.agui_seq: Final = agui_seq
        self.evicted: Final = evicted

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return DisplayRecord, (self.key, self.value, self.headers, self.agui_seq, self.evicted)


def _published(
    count: int, events: Sequence[BaseEvent], encoded: Sequence[bytes] | None,
    data: Sequence[dict[str, Any] | None] | None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The JSON object of each of the `count` events' record values, bounded as `convert --display` bounds it: its
    `data` when given, else its `encoded` value (or, when neither is, the event's encoding) parsed."""
    out: list[dict[str, Any]] = []
    for index in range(count):
        event = data[index] if data is not None else None
        value = encoded[index] if encoded is not None else None
        if event is None:
            event = loads_object(value if value is not None else encode_event(events[index]))
        out.append(bound_event_json(event, None if value is None else len(value)))
    return out


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "backslashreplace")


def _state_json(  # noqa: PLR0917  # the exported state's fields, in its order
    thread_id: str, max_bytes: int, cadence: DisplayCadence, published: int, skipped: int, withheld: int, fold: bytes
) -> bytes:
    """A projection's exported state: its cadence, what it published and skipped, and its fold."""
    return b"".join((
        b'{"format":%d,"thread_id":' % _STATE_FORMAT, orjson.dumps(thread_id),
        b',"interval_ms":%d,"max_bytes":%d,"next_seq":%d,"published_seq":%d,"attempted_seq":%d,"anchor_ms":%d,'
        b'"skipped":%d,"withheld":%d,"fold":' % (cadence.interval_ms, max_bytes, cadence.next_seq, published,
                                                 cadence.attempted_seq, cadence.anchor_ms, skipped, withheld),
        fold, b"}",
    ))  # fmt: skip


class Accepted:
    """Events a projection has numbered and not yet folded (`DisplayProjection.accept`): `count` of them, `due` the
    agui-seq of the record due after them (None when none is), `continuation` the observer's JSON when that record
    was decided. The event objects themselves are kept only when neither their values nor their JSON objects
    stand in for them, so a batch waiting for its folds holds no more than the folds read. `settled`: `complete`
    has nothing left to fold, give out or count (never here: the reference folds in `complete`)."""

    __slots__ = ("continuation", "count", "data", "due", "encoded", "ended", "events", "failed", "settled")

    def __init__(  # noqa: PLR0917  # accept's values, in its order
        self, events: Sequence[BaseEvent] | int, encoded: Sequence[bytes] | None,
        data: Sequence[dict[str, Any] | None] | None, failed: tuple[str, str, str] | None, due: int | None,
        continuation: bytes | None, ended: bool,
    ) -> None:  # fmt: skip
        self.count = events if isinstance(events, int) else len(events)
        self.events: Sequence[BaseEvent] = ()
        if not isinstance(events, int) and encoded is None and (data is None or None in data):
            self.events = events
        self.encoded = encoded
        self.data = data
        self.failed = failed
        self.due = due
        self.continuation = continuation
        self.ended = ended
        self.settled = False


class DisplayProjection:
    """The display fold of one root run, fed every AG-UI event the worker publishes for it, in order.

    Everything it returns is a function of those events, their source items and the source timestamps given: a
    replay or a `restore(export())` followed by the same calls returns the same records. When a record is due is
    `DisplayCadence`'s rule, which looks at event numbers and timestamps only. A record never exceeds `max_bytes`:
    finished items are evicted oldest first to fit, and a snapshot that cannot fit is withheld and counted.
    """

    __slots__ = (
        "_cadence",
        "_fold",
        "_headers_key",
        "_max_bytes",
        "_published",
        "_skipped",
        "_thread_bytes",
        "_thread_id",
        "_withheld",
    )  # fmt: skip

    def __new__(cls, run_id: str, thread_id: str, **options: int) -> DisplayProjection:
        """The native engine's projection where the native module is installed (the same records and state)."""
        if cls is DisplayProjection and native() is not None:
            return object.__new__(_native_type())
        return object.__new__(cls)

    def __init__(
        self, run_id: str, thread_id: str, *, interval_ms: int = DEFAULT_DISPLAY_INTERVAL_MS,
        max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:  # fmt: skip
        self._cadence = DisplayCadence(run_id, interval_ms)
        if max_bytes < MIN_DISPLAY_BYTES:
            raise ConfigError(
                f"display max_bytes must be >= {MIN_DISPLAY_BYTES} (the topic's max.message.bytes), got {max_bytes}"
            )
        self._fold = DisplayFold(run_id)
        self._fold.keep_finished_as_json()
        self._thread_id = thread_id
        self._thread_bytes = _utf8(thread_id)
        self._headers_key = _utf8(run_id)
        self._max_bytes = max_bytes
        self._published = -1  # agui-seq of the last record returned
        self._skipped = 0
        self._withheld = 0

    @property
    def run_id(self) -> str:
        return self._fold.run_id

    @property
    def thread_id(self) -> str:
        return self._thread_id

    @property
    def next_seq(self) -> int:
        """The n the next offered event must have."""
        return self._cadence.next_seq

    @property
    def published_seq(self) -> int:
        """agui-seq of the last record returned (-1 before the first)."""
        return self._published

    @property
    def skipped(self) -> int:
        """Batches the fold refused as malformed (as `convert --display` reports an error line for them)."""
        return self._skipped

    @property
    def withheld(self) -> int:
        """Due records not returned because the snapshot could not fit `max_bytes` even with every finished item
        evicted (the next is due at the next interval, or with the run's last events)."""
        return self._withheld

    @property
    def fold(self) -> DisplayFold:
        """The fold itself (read it; feeding it directly breaks the projection's sequence)."""
        return self._fold

    def accept(
        self,
        events: Sequence[BaseEvent] | int,
        first_seq: int,
        *,
        timestamp_ms: int,
        ended: bool,
        source: HarnessItem | None = None,
        encoded: Sequence[bytes] | None = None,
        data: Sequence[dict[str, Any] | None] | None = None,
        observer: ExportsContinuation | None = None,
        failed: tuple[str, str, str] | None = None,
    ) -> Accepted:
        """Take the events the worker publishes for one source record (n = `first_seq`, `first_seq` + 1, ...):
        number them and decide whether a display record is due after them, taking the observer's continuation as
        it stands now; `complete` folds them, in the order accepted, and all before the projection is exported.

        `source` is the item they came from (None for an event the worker made itself, such as a gap's RUN_ERROR),
        `timestamp_ms` the source record's timestamp, `ended` whether nothing more will be published for the run,
        `encoded` the events' output record values when at hand, `data` their JSON objects when at hand (each equal
        to what parsing its value gives; None for one to be parsed), `observer` the run's observer, whose
        continuation the record then carries (as `convert --display` prints it). A core that makes no event objects
        (the native one) gives their number for `events`, their values in `encoded`, and the source item's failed
        tool call in `failed` (what `failed_tool_call(source)` gives). The projection keeps the sequences given
        until they are completed: callers must not change them."""
        cadence = self._cadence
        cadence.expect(first_seq)
        count = events if isinstance(events, int) else len(events)
        if isinstance(events, int) and count and encoded is None:
            raise WorkerError(f"display projection got {count} events without their values")
        if encoded is not None and len(encoded) != count:
            raise WorkerError(f"display projection got {count} events but {len(encoded)} encoded values")
        if data is not None and len(data) != count:
            raise WorkerError(f"display projection got {count} events but {len(data)} JSON objects")
        cadence.advance(first_seq, count)
        due = cadence.due(timestamp_ms, ended=ended)
        continuation = None if due is None or observer is None else orjson.dumps(observer.export_data())
        if not count:
            failed = None
        elif source is not None:
            failed = failed_tool_call(source)
        return Accepted(events, encoded, data, failed, due, continuation, ended)

    def offer(  # noqa: PLR0917  # positional: called for every source record
        self, count: int, first_seq: int, timestamp_ms: int, values: list[bytes] | None, ended: bool,
        source: object, observer: object,
    ) -> Accepted | None:  # fmt: skip
        """`accept` of the `count` events a core that makes no event objects made of `source` (None for an event the
        worker made), their record values `values`, the source item telling its failed tool call itself
        (`failed_tool_call`); with `values` None they were never published and are passed over (`skip`). None when
        `complete` would give out and count nothing."""
        if values is None:
            self.skip(first_seq, count)
            first_seq, count = first_seq + count, 0
        failed = getattr(source, "failed_tool_call", None) if count and source is not None else None
        continuation = cast(ExportsContinuation, observer) if hasattr(observer, "export_data") else None
        accepted = self.accept(count, first_seq, timestamp_ms=timestamp_ms, ended=ended,
                               encoded=values if count else None, observer=continuation, failed=failed)  # fmt: skip
        return None if accepted.settled else accepted

    def complete(self, accepted: Accepted) -> DisplayRecord | None:
        """Fold accepted events and return the display record due after them, if any."""
        if accepted.count:
            try:
                self._fold.apply(_published(accepted.count, accepted.events, accepted.encoded, accepted.data),
                                 encoded=accepted.encoded, failed=accepted.failed)  # fmt: skip
            except AguiObservationError:
                self._skipped += 1
        last = accepted.due
        if last is None:
            return None
        continuation = accepted.continuation
        headers: Headers = ((SEQ, str(last).encode()), (THREAD_ID, self._thread_bytes))
        budget = self._max_bytes - record_overhead(self._headers_key, headers, self._max_bytes)
        value = self._fold.export_json(observer_json=continuation)
        evicted = 0
        if len(value) > budget:
            value, evicted = self._page(value, budget, continuation, ended=accepted.ended)
        if len(value) > budget:
            self._withheld += 1
            return None
        self._published = last
        return DisplayRecord(self._headers_key, value, headers, last, evicted)

    def _page(self, value: bytes, budget: int, continuation: bytes | None, *, ended: bool) -> tuple[bytes, int]:
        """Evict finished items, oldest first, until the snapshot fits `budget`; evict none when even all of them
        would not make it fit (the record is then withheld)."""
        fold = self._fold
        savings = []
        for key in fold.evictable(ended=ended):
            kept = 0 if fold.item_kind(key) == "observation" else len(key) + 3  # the id stays in the note
            savings.append((key, len(fold.item_json(key)) + 1 - kept))
        if len(value) - sum(saving for _, saving in savings) + _NOTE_SLACK > budget:
            return value, 0
        evicted = 0
        index = 0
        while len(value) > budget and index < len(savings):
            excess = len(value) - budget + _NOTE_SLACK
            chosen: list[str] = []
            while index < len(savings) and excess > 0:
                key, saving = savings[index]
                index += 1
                excess -= saving
                chosen.append(key)
            evicted += fold.evict(chosen, ended=ended)
            value = fold.export_json(observer_json=continuation)
        return value, evicted

    def follow(self, observer: object) -> None:
        """`observer` makes the events this projection is fed (the reference keeps nothing for it)."""

    def skip(self, first_seq: int, count: int) -> None:
        """Pass over `count` events from n = `first_seq` that were never published (their encoding failed, or a
        RUN_ERROR was too large): they are not folded, and the next event offered is n = `first_seq + count`."""
        self._cadence.advance(first_seq, count)

    def export(self) -> dict[str, Any]:
        """The projection's whole state as a JSON-serialisable dict (fold and cadence); `restore` reads it."""
        return loads_object(self.export_json())

    def export_json(self) -> bytes:
        """`export()` as JSON text, written without building the dict: the fold's snapshot JSON is embedded."""
        return _state_json(self._thread_id, self._max_bytes, self._cadence, self._published, self._skipped,
                           self._withheld, self._fold.export_json())

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # Through the exported state: `restore(export())` is exact, and the fold's parts need not pickle.
        return _unpickle, (self.export_json(),)

    @classmethod
    def restore(cls, state: Mapping[str, Any]) -> DisplayProjection:
        """The projection that continues exactly where the exported one stood; ConfigError for a state it cannot
        read (an unknown format version included)."""
        version = state.get("format")
        if version != _STATE_FORMAT:
            raise ConfigError(f"display projection state has format {version!r}; this worker reads {_STATE_FORMAT}")
        try:
            snapshot = DisplaySnapshot.model_validate(state["fold"])
            thread_id = str(state["thread_id"])
            interval_ms, max_bytes = int(state["interval_ms"]), int(state["max_bytes"])
            published = int(state["published_seq"])
            # States written before `attempted_seq` existed: the last due record was the last one published.
            counts = (int(state["next_seq"]), published, int(state.get("attempted_seq", published)),
                      int(state["anchor_ms"]), int(state["skipped"]), int(state["withheld"]))  # fmt: skip
            if cls is DisplayProjection and native() is not None:
                return _native_type().restored(snapshot, thread_id, interval_ms, max_bytes, *counts)
            projection = cls(snapshot.continuation.run_id, thread_id, interval_ms=interval_ms, max_bytes=max_bytes)
            projection._fold = DisplayFold.restore(snapshot)
            projection._fold.keep_finished_as_json()
            next_seq, projection._published, attempted, anchor, projection._skipped, projection._withheld = counts
            projection._cadence = DisplayCadence(
                projection.run_id, interval_ms, next_seq=next_seq, attempted_seq=attempted, anchor_ms=anchor
            )
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            raise ConfigError(f"display projection state is not readable: {type(exc).__name__}: {exc}") from exc
        return projection


_NATIVE_TYPE: list[type[NativeDisplayProjection]] = []


def _native_type() -> type[NativeDisplayProjection]:
    """`NativeDisplayProjection`, imported once, at the first projection (its module imports this one): an import
    statement run for every projection costs more than making it."""
    if not _NATIVE_TYPE:
        from worker.display._native_projection import NativeDisplayProjection  # noqa: PLC0415

        _NATIVE_TYPE.append(NativeDisplayProjection)
    return _NATIVE_TYPE[0]


def _unpickle(state: bytes) -> DisplayProjection:
    return DisplayProjection.restore(loads_object(state))
