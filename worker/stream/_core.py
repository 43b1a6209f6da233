"""The conversion-core functions a partition uses, bundled so tests can inject small fakes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ag_ui.core import BaseEvent

from worker.observe import HarnessAguiStreamObserver, encode_event
from worker.wire import decode_item, is_terminal, timestamp_ms

__all__ = ["StreamCore", "StreamObserver", "WireItem", "default_core"]


class WireItem(Protocol):
    """What the partition logic reads from a decoded source item."""

    @property
    def thread_id(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def sequence(self) -> int: ...


class StreamObserver(Protocol):
    """One root stream's observer: `observe` is atomic, raising leaves it unchanged."""

    def observe(self, item: Any, /) -> tuple[BaseEvent, ...]: ...


@dataclass(frozen=True, slots=True)
class StreamCore:
    """Decode, classify, observe and encode; every function must be deterministic."""

    decode: Callable[[bytes], WireItem]
    timestamp_ms: Callable[[Any], int]
    is_terminal: Callable[[Any], bool]
    new_observer: Callable[[], StreamObserver]
    encode_event: Callable[[BaseEvent], bytes]


def default_core() -> StreamCore:
    """Return the real core: `worker.wire` decoding and the stream observer without an event log."""
    def new_observer() -> StreamObserver:
        return HarnessAguiStreamObserver(retain_events=False)

    return StreamCore(
        decode=decode_item,
        timestamp_ms=timestamp_ms,
        is_terminal=is_terminal,
        new_observer=new_observer,
        encode_event=encode_event,
    )
