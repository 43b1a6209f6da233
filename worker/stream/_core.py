"""The conversion-core functions a partition uses, bundled so tests can inject small fakes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from types import ModuleType
from typing import Any, Protocol, cast

from ag_ui.core import BaseEvent

from worker._native import core as native_module
from worker.observe import (
    AguiEventProcessor,
    HarnessAguiStreamObserver,
    ObserverContinuation,
    announced_child,
    encode_event,
    encode_event_data,
)
from worker.stream._hook import encodable
from worker.stream._records import OutboundRecord
from worker.wire import decode_item, is_terminal, timestamp_ms

__all__ = ["StreamCore", "StreamObserver", "WireItem", "default_core", "reference_core"]

# Bounds on the encoded size of one event of the real core, derived from its conversion rules: an event copies
# fields of its own item (numbers can grow 4.5x as "1e15" is spelt 1000000000000000.0, JSON text embedded in a
# string doubles its quotes and backslashes, redaction and normalised defaults add a few bytes per source field,
# a few ids appear twice), so well within 16x the item's value; it may also carry one part id stored from an
# earlier item of its stream, at most that item's size. A terminal item's interrupts can repeat one metadata
# object per deferred call, so no bound of its size holds: its events are always measured.
_EVENT_GROWTH = 16
_EVENT_SLACK = 8192


class WireItem(Protocol):
    """What the partition logic reads from a decoded source item."""

    @property
    def thread_id(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def sequence(self) -> int: ...


# (observer, item, (key, partition, offset), first, publish, limit, values)
#   -> (count, records, values, over, is_terminal(item), announced_run(item))
ObserveRecords = Callable[
    [Any, Any, tuple[bytes | None, int, int], int, bool, int | None, bool],
    tuple[int, tuple[OutboundRecord, ...], list[bytes] | None, tuple[int, int, str] | None, bool, str | None],
]


class StreamObserver(Protocol):
    """One root stream's observer: `observe` is atomic, raising leaves it unchanged."""

    def observe(self, item: Any, /) -> tuple[BaseEvent, ...]: ...


@dataclass(frozen=True, slots=True)
class StreamCore:
    """Decode, classify, observe and encode; every function must be deterministic.

    `export_observer` returns an observer's continuation as JSON data and `restore_observer` builds an
    observer from such data (raising ValueError or TypeError when it cannot); `encode_data` gives what
    `encode_event` gives and the JSON object those bytes parse back into (None when only parsing them tells), for
    the display (None: the display parses what `encode_event` gives); `announced_run` names the child
    run an accepted item announces in its stream, or None; `event_bound(item, widest)` bounds the encoded size
    of every event the item yields in a stream whose earlier accepted values were at most `widest` bytes, or is
    None when only encoding the events tells. A core that encodes as it observes (the native one) gives
    `observe_records(observer, item, (key, partition, offset), first, publish, limit, values)`, observing atomically
    as `observe` does, with no event objects: `(count, records, values, over, terminal, announced)`, the number of
    events, their output records as `output_records` builds them for that source record, numbered from `first`
    (empty unless `publish`, or when one is over), their values when `values` is true (else None), `(index, size,
    event type)` of the first record whose `record_size` is over `limit` (None: none is, or no limit), and the item's
    `is_terminal` and `announced_run`; `encode_event` then serves only the events the partition state makes itself.
    """

    decode: Callable[[bytes], WireItem]
    timestamp_ms: Callable[[Any], int]
    is_terminal: Callable[[Any], bool]
    new_observer: Callable[[], StreamObserver]
    encode_event: Callable[[BaseEvent], bytes]
    export_observer: Callable[[StreamObserver], object]
    restore_observer: Callable[[Any], StreamObserver]
    announced_run: Callable[[Any], str | None]
    event_bound: Callable[[Any, int], int | None]
    encode_data: Callable[[BaseEvent], tuple[bytes, dict[str, Any] | None]] | None = None
    observe_records: ObserveRecords | None = None


def _export_observer(observer: StreamObserver) -> object:
    return cast(HarnessAguiStreamObserver, observer).export_data()  # the native observer's too


def _observed_encoding(event: BaseEvent) -> tuple[bytes, dict[str, Any] | None]:
    """The observer's events hold plain JSON data only: every value comes from a decoded source item (`worker.wire`
    parses with orjson, which refuses non-finite numbers and lone surrogates) or is built from such values."""
    return encode_event_data(event, plain=True)


def _event_bound(item: Any, widest: int) -> int | None:
    size: int = item.wire_size
    if size <= 0 or is_terminal(item):
        return None
    return _EVENT_GROWTH * size + 2 * widest + _EVENT_SLACK


def _unbounded(item: Any, widest: int) -> int | None:
    return None


def _native_core(native: ModuleType) -> StreamCore:
    """The native module's core: records decoded and observed in Rust, what it leaves to the reference decoder (a
    malformed record, a rare spelling) decoded there and read into a native item; its functions are the module's
    own, called without a Python frame between."""
    observer_type = native.Observer

    def restore_observer(data: Any) -> StreamObserver:
        continuation = ObserverContinuation.model_validate(data)  # the reference's checks and errors
        return cast(StreamObserver, observer_type.restore(True, continuation.model_dump()))

    return StreamCore(
        decode=native.decode_record,
        timestamp_ms=attrgetter("timestamp_ms"),
        is_terminal=attrgetter("is_terminal"),
        new_observer=partial(observer_type, True),
        encode_event=encode_event,
        export_observer=_export_observer,
        restore_observer=restore_observer,
        announced_run=attrgetter("announced_child"),
        event_bound=_unbounded,  # observe_records measures every record it builds
        observe_records=observer_type.observe_records,
    )


def default_core(processor: AguiEventProcessor | str | None = None) -> StreamCore:
    """Return the real core: the native module's where the installation has one and no processor is given, else
    `reference_core(processor)`; both convert every record to the same bytes."""
    native = native_module() if processor is None else None
    if native is not None:
        return _native_core(native)
    return reference_core(processor)


def reference_core(processor: AguiEventProcessor | str | None = None) -> StreamCore:
    """Return the pure-Python core: `worker.wire` decoding and the stream observer without an event log, its events
    passed through `processor` when one is given: a callable, or `module:attribute` naming one (ConfigError when
    that cannot be imported). The processor must be deterministic, since a rebuild runs it again; no bound can
    foresee the size of its events, so they are always measured. A processor sees the reference's items and events,
    so the real core with a processor is this one."""
    checked = encodable(processor) if processor is not None else None

    def new_observer() -> StreamObserver:
        return HarnessAguiStreamObserver(processor=checked, retain_events=False)

    def restore_observer(data: Any) -> StreamObserver:
        return HarnessAguiStreamObserver.restore(ObserverContinuation.model_validate(data), processor=checked)

    return StreamCore(
        decode=decode_item,
        timestamp_ms=timestamp_ms,
        is_terminal=is_terminal,
        new_observer=new_observer,
        encode_event=encode_event,
        export_observer=_export_observer,
        restore_observer=restore_observer,
        announced_run=announced_child,
        event_bound=_event_bound if processor is None else _unbounded,
        encode_data=_observed_encoding if processor is None else encode_event_data,  # a processor's are checked
    )
