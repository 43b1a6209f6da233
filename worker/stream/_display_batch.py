"""The display side of a partition state: making each open stream's projection, and folding what the projections
accepted during a batch at its end, each display record joining the outcome of the record it follows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from ag_ui.core import BaseEvent

from worker.display.projection import Accepted, DisplayProjection, ExportsContinuation
from worker.errors import NativePanicError
from worker.stream._build import dead_letter_record
from worker.stream._core import StreamObserver, WireItem
from worker.stream._records import DeadLetterReason, Destination, OutboundRecord, Outcome, SourceRecord, Verdict
from worker.wire import HarnessEvent, HarnessRunResultEvent

__all__ = ["DisplayBatch"]


class DisplayBatch:
    """Projections made with one interval and size limit; the folds they accepted since the batch began, each
    owned by the outcome of the record that offered it; and what the display records published since
    `take_tally` evicted and withheld."""

    __slots__ = ("_deferred", "_evicted", "_withheld", "interval_ms", "max_bytes", "outcome")

    def __init__(self, interval_ms: int, max_bytes: int) -> None:
        self.interval_ms = interval_ms
        self.max_bytes = max_bytes
        # Each fold deferred, with the index of the outcome it belongs to.
        self._deferred: list[tuple[DisplayProjection, Accepted, int]] = []
        self.outcome = 0  # the index of the outcome the folds offered now belong to
        self._evicted = 0
        self._withheld = 0

    def projection(self, run_id: str, thread_id: str, observer: StreamObserver) -> DisplayProjection:
        """A new stream's projection, fed the events of the stream's `observer`."""
        display = DisplayProjection(run_id, thread_id, interval_ms=self.interval_ms, max_bytes=self.max_bytes)
        display.follow(observer)
        return display

    def take_tally(self) -> tuple[int, int]:
        """(items evicted, display records withheld) by the records processed with publishing since the last call."""
        tally = (self._evicted, self._withheld)
        self._evicted = self._withheld = 0
        return tally

    def offer(  # noqa: PLR0917  # positional: called for every source record
        self, display: DisplayProjection, events: tuple[BaseEvent, ...] | int, first: int, timestamp_ms: int,
        values: list[bytes] | None, data: list[dict[str, Any] | None] | None, ended: bool, source: WireItem | None,
        observer: StreamObserver,
    ) -> None:  # fmt: skip
        """Offer the events numbered n = `first`, ... to `display`: published, with their record values `values`
        (and JSON objects `data`, when known), or passed over when `values` is None (never published: their encoding
        failed, or a RUN_ERROR was too large). The projection accepts them now and folds them at the batch's end,
        for the outcome numbered `outcome`. A core that makes no event objects (the native one) gives their number
        for `events` (`DisplayProjection.offer`)."""
        if isinstance(events, int):
            offered = display.offer(events, first, timestamp_ms, values, ended, source, observer)
            if offered is not None:
                self._deferred.append((display, offered, self.outcome))
            return
        count = len(events)
        if values is None:
            display.skip(first, count)
            first, events, count = first + count, (), 0
        reference = source if isinstance(source, (HarnessEvent, HarnessRunResultEvent)) else None
        failed = None if reference is not None or source is None else getattr(source, "failed_tool_call", None)
        accepted = display.accept(
            events, first, timestamp_ms=timestamp_ms, ended=ended, source=reference, failed=failed,
            encoded=values if count else None, data=data if count else None,
            observer=cast(ExportsContinuation, observer) if hasattr(observer, "export_data") else None,
        )  # fmt: skip
        if not accepted.settled:  # completing it would give out and count nothing
            self._deferred.append((display, accepted, self.outcome))

    def fold(
        self, outcomes: list[Outcome], publish: bool, sources: Sequence[SourceRecord]
    ) -> tuple[list[Outcome], Exception | None]:
        """Fold everything accepted in the batch of `outcomes` (of the records `sources`, in order), adding each
        display record due (when publishing) to its owner's records, last. An exception from a fold is a bug: it
        returns the outcomes before its owner and that exception; but a panic of the native fold, caught at its
        boundary, dead-letters its owner's record (`internal-error`, its other records kept) and the batch goes
        on."""
        folds, self._deferred = self._deferred, []
        for display, accepted, owner in folds:
            try:
                shown = self._complete(publish, display, accepted)
            except NativePanicError as exc:
                if owner < len(outcomes):
                    outcomes[owner] = _panicked(outcomes[owner], sources[owner], exc, publish)
                continue
            except Exception as exc:  # a fold bug: the records from this one on are not processed
                return outcomes[:owner], exc
            if shown is not None and owner < len(outcomes):
                done = outcomes[owner]  # a display record is always the last of its outcome's records
                outcomes[owner] = Outcome(done.verdict, (*done.records, shown), done.run_id, done.reason, done.error)
        return outcomes, None

    def _complete(self, publish: bool, display: DisplayProjection, accepted: Accepted) -> OutboundRecord | None:
        """Fold what `display` accepted; the display record due after it, when publishing."""
        withheld = display.withheld
        record = display.complete(accepted)
        if not publish:
            return None
        self._withheld += display.withheld - withheld
        if record is None:
            return None
        self._evicted += record.evicted
        return OutboundRecord(Destination.DISPLAY, record.key, record.value, record.headers, None, None)


def _panicked(done: Outcome, source: SourceRecord, error: NativePanicError, publish: bool) -> Outcome:
    """`done` with its record dead-lettered for the panic of the display fold it fed."""
    reason = DeadLetterReason.INTERNAL_ERROR
    letter = dead_letter_record(source, reason, f"display fold of run {done.run_id}: {error}", error)
    return Outcome(Verdict.DEAD_LETTERED, (*done.records, letter) if publish else (), done.run_id, reason, error)
