"""The display projection on the native engine (`worker._native_core.DisplayProjection`): `DisplayProjection`'s
records, exported state and errors, the same bytes; the events are folded in Rust from their record values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from ag_ui.core import BaseEvent

from worker._framing import Headers
from worker._native import core
from worker.contract import SEQ, THREAD_ID
from worker.display._failures import failed_tool_call
from worker.display.cadence import DisplayCadence
from worker.display.fold import DisplayFold
from worker.display.projection import (
    DEFAULT_DISPLAY_INTERVAL_MS,
    DEFAULT_MAX_MESSAGE_BYTES,
    MIN_DISPLAY_BYTES,
    Accepted,
    DisplayProjection,
    DisplayRecord,
    ExportsContinuation,
    _utf8,
)
from worker.display.snapshot import DisplaySnapshot
from worker.errors import ConfigError
from worker.observe import HarnessAguiStreamObserver, encode_event
from worker.wire import HarnessItem

__all__ = ["NativeAccepted", "NativeDisplayProjection"]


class NativeAccepted(Accepted):
    """Accepted events the engine folded: `token` names what `complete` gives out (0: nothing)."""

    __slots__ = ("token",)

    def __init__(self, token: int, count: int, due: int | None, ended: bool) -> None:
        self.token = token
        self.count = count
        self.due = due
        self.ended = ended
        self.settled = not token


class NativeDisplayProjection(DisplayProjection):
    """`DisplayProjection` folding in Rust; made by `DisplayProjection(...)` where the native module is installed."""

    __slots__ = ("_engine",)

    def __init__(
        self, run_id: str, thread_id: str, *, interval_ms: int = DEFAULT_DISPLAY_INTERVAL_MS,
        max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:  # fmt: skip
        if interval_ms < 0:
            DisplayCadence(run_id, interval_ms)  # refuses it as the reference does
        if max_bytes < MIN_DISPLAY_BYTES:
            raise ConfigError(
                f"display max_bytes must be >= {MIN_DISPLAY_BYTES} (the topic's max.message.bytes), got {max_bytes}"
            )
        native = core()
        assert native is not None, "a native projection is made only where the native module is installed"
        self._engine: Any = native.DisplayProjection(run_id, thread_id, interval_ms, max_bytes)

    @classmethod
    def restored(  # noqa: PLR0917  # the exported state's fields, in its order
        cls, snapshot: DisplaySnapshot, thread_id: str, interval_ms: int, max_bytes: int, next_seq: int,
        published: int, attempted: int, anchor_ms: int, skipped: int, withheld: int,
    ) -> NativeDisplayProjection:  # fmt: skip
        """The projection continuing a state the reference read; ConfigError when these types cannot hold it."""
        native = core()
        assert native is not None, "a native projection is made only where the native module is installed"
        run_id = snapshot.continuation.run_id
        projection = cls(run_id, thread_id, interval_ms=interval_ms, max_bytes=max_bytes)
        observer = orjson.dumps(HarnessAguiStreamObserver.restore(snapshot.continuation.observer).export_data())
        engine = native.DisplayProjection.restore(
            snapshot.__pydantic_serializer__.to_json(snapshot), observer, thread_id, interval_ms, max_bytes,
            next_seq, published, attempted, anchor_ms, skipped, withheld,
        )  # fmt: skip
        if engine is None:
            raise ConfigError(f"display state of run {run_id!r} holds an integer beyond 64 bits")
        projection._engine = engine
        return projection

    @classmethod
    def restore(cls, state: Mapping[str, Any]) -> DisplayProjection:
        """`DisplayProjection.restore`: the native projection while the native module is installed."""
        return DisplayProjection.restore(state)

    @property
    def run_id(self) -> str:
        run_id: str = self._engine.run_id
        return run_id

    @property
    def thread_id(self) -> str:
        thread_id: str = self._engine.thread_id
        return thread_id

    @property
    def next_seq(self) -> int:
        next_seq: int = self._engine.next_seq
        return next_seq

    @property
    def published_seq(self) -> int:
        published: int = self._engine.published_seq
        return published

    @property
    def skipped(self) -> int:
        skipped: int = self._engine.skipped
        return skipped

    @property
    def withheld(self) -> int:
        withheld: int = self._engine.withheld
        return withheld

    @property
    def fold(self) -> DisplayFold:
        """A detached copy of the fold (its changes do not reach the projection)."""
        return DisplayFold.restore(DisplaySnapshot.model_validate_json(self._engine.fold_json()))

    def heap_bytes(self) -> int:
        """Bytes the engine holds on the heap for this projection (the allocator's blocks)."""
        held: int = self._engine.heap_bytes()
        return held

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
        """`DisplayProjection.accept`; a core that makes no event objects gives their number for `events`, their
        values in `encoded` and the source item's failed tool call in `failed`."""
        count = events if isinstance(events, int) else len(events)
        if not isinstance(events, int) and encoded is None and (data is None or None in data):
            encoded = [encode_event(event) for event in events]
        if not count:
            failed = None
        elif source is not None:
            failed = failed_tool_call(source)
        values = encoded if encoded is None or isinstance(encoded, list) else list(encoded)
        objects = list(data) if encoded is None and data else None
        token, due = self._engine.accept(count, first_seq, timestamp_ms, ended, failed, values, objects, observer,
                                         isinstance(events, int))  # fmt: skip
        return NativeAccepted(token, count, due, ended)

    def offer(  # noqa: PLR0917  # positional: called for every source record
        self, count: int, first_seq: int, timestamp_ms: int, values: list[bytes] | None, ended: bool,
        source: object, observer: object,
    ) -> NativeAccepted | None:  # fmt: skip
        """`DisplayProjection.offer` in one call of the engine, which reads a native item's failed tool call and a
        native observer's continuation itself."""
        found = self._engine.offer(count, first_seq, timestamp_ms, ended, values, source, observer)
        return None if found is None else NativeAccepted(found[0], count, found[1], ended)

    def complete(self, accepted: Accepted) -> DisplayRecord | None:
        assert isinstance(accepted, NativeAccepted), "accepted by this projection"
        if not accepted.token:
            return None
        done = self._engine.complete(accepted.token)
        if done is None:
            return None
        value, last, evicted = done
        headers: Headers = ((SEQ, str(last).encode()), (THREAD_ID, _utf8(self._engine.thread_id)))
        return DisplayRecord(_utf8(self._engine.run_id), value, headers, last, evicted)

    def follow(self, observer: object) -> None:
        """A native `observer` keeps each item's events from now on, for the engine to fold in place."""
        self._engine.follow(observer)

    def skip(self, first_seq: int, count: int) -> None:
        self._engine.skip(first_seq, count)

    def export_json(self) -> bytes:
        exported: bytes = self._engine.export_json()
        return exported
