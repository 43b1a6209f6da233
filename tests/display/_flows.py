"""The two flows the display topic must agree on: the worker's (its observer, no processor, each source item's
events fed to a DisplayProjection) and `convert --display`'s (DisplayFold with its own bounded observer)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ag_ui.core import BaseEvent
from pydantic import ValidationError

from tests.display._golden import DATA, RUNS, source_lines
from tests.display._synthetic import SYNTHETIC
from worker.display import DisplayFold, DisplayProjection, DisplayRecord, DisplaySnapshot
from worker.errors import AguiObservationError, DecodeError
from worker.observe import HarnessAguiStreamObserver, encode_event
from worker.wire import HarnessItem, decode_item, is_terminal, timestamp_ms

_EXPECTED = (DecodeError, AguiObservationError, TypeError, ValidationError)
DAMAGED = sorted(path.stem for path in (DATA / "damaged").glob("d*.jsonl") if "." not in path.stem)
EDGES = ["edges", "edges2"]
ALL_RUNS = [*RUNS, *(f"damaged/{name}" for name in DAMAGED), *(f"edges/{name}" for name in EDGES),
            *(f"synthetic/{name}" for name in SYNTHETIC)]  # fmt: skip


@cache
def lines_of(run: str) -> tuple[str, ...]:
    """Source lines of a golden (`name`, `damaged/name`, `edges/name`) or synthetic (`synthetic/name`) run."""
    if run.startswith("synthetic/"):
        return tuple(SYNTHETIC[run.removeprefix("synthetic/")]())
    if "/" in run:
        text = (DATA / f"{run}.jsonl").read_text(encoding="utf-8")
        return tuple(line for line in text.split("\n") if line.strip() and not line.startswith("#"))
    return tuple(source_lines(run))


@dataclass(frozen=True)
class Batch:
    """The events the worker publishes for one source item, numbered from `first_seq`."""

    item: HarnessItem
    events: tuple[BaseEvent, ...]
    first_seq: int
    timestamp_ms: int
    ended: bool
    observer: HarnessAguiStreamObserver

    @property
    def encoded(self) -> list[bytes]:
        return [encode_event(event) for event in self.events]


def worker_batches(lines: tuple[str, ...]) -> Iterator[Batch]:
    """Each observable item's events from the worker's observer (no processor); `observer` is shared and moves on."""
    observer = HarnessAguiStreamObserver(retain_events=False)
    root: str | None = None
    n = 0
    for line in lines:
        try:
            item = decode_item(line)
            events = observer.observe(item)
        except _EXPECTED:
            continue
        root = root if root is not None else item.run_id
        ended = is_terminal(item) and item.run_id == root
        yield Batch(item, events, n, timestamp_ms(item), ended, observer)
        n += len(events)


def run_id_of(lines: tuple[str, ...]) -> tuple[str, str]:
    """The run and thread id of the first decodable item."""
    for line in lines:
        try:
            item = decode_item(line)
        except _EXPECTED:
            continue
        return item.run_id, item.thread_id
    raise AssertionError("a run has at least one decodable item")


def offer(
    projection: DisplayProjection, events: Sequence[BaseEvent], first_seq: int, **given: Any
) -> DisplayRecord | None:
    """Fold one record's events at once, as the worker does for a batch of one: `complete(accept(...))`."""
    return projection.complete(projection.accept(events, first_seq, **given))


def project(
    lines: tuple[str, ...], *, interval_ms: int = 0, max_bytes: int = 1048588,
    cut: Callable[[DisplayProjection, int], DisplayProjection] | None = None,
) -> list[DisplayRecord]:  # fmt: skip
    """Every display record of the run; `cut(projection, batch index)` may replace the projection between items."""
    run_id, thread_id = run_id_of(lines)
    projection = DisplayProjection(run_id, thread_id, interval_ms=interval_ms, max_bytes=max_bytes)
    records = []
    for index, batch in enumerate(worker_batches(lines)):
        if cut is not None:
            projection = cut(projection, index)
        record = offer(
            projection, batch.events, batch.first_seq, timestamp_ms=batch.timestamp_ms, ended=batch.ended,
            source=batch.item, encoded=batch.encoded, observer=batch.observer,
        )  # fmt: skip
        if record is not None:
            records.append(record)
    return records


def reference_at_items(lines: tuple[str, ...]) -> dict[int, bytes]:
    """`convert --display`'s snapshot JSON after each item with events, keyed by the n of its last event."""
    fold: DisplayFold | None = None
    out: dict[int, bytes] = {}
    n = 0
    for line in lines:
        try:
            item = decode_item(line)
        except _EXPECTED:
            continue
        fold = fold if fold is not None else DisplayFold(item.run_id)
        try:
            events = fold.events(item)
        except _EXPECTED:
            continue
        with contextlib.suppress(AguiObservationError):  # as convert: an error line, the observer moved on
            fold.fold(events, source=item)
        n += len(events)
        if events:
            out[n - 1] = fold.export().model_dump_json().encode()
    return out


def _without_observer(snapshot: DisplaySnapshot) -> dict[str, Any]:
    dumped: dict[str, Any] = json.loads(snapshot.model_dump_json())
    del dumped["continuation"]["observer"]
    return dumped


def reference_at_events(lines: tuple[str, ...]) -> list[dict[str, Any]]:
    """`convert --display`'s snapshot after every event count k (index k), without the observer continuation:
    each item's events are folded one at a time, the source item given with the last."""
    fold: DisplayFold | None = None
    out: list[dict[str, Any]] = []
    for line in lines:
        try:
            item = decode_item(line)
        except _EXPECTED:
            continue
        if fold is None:
            fold = DisplayFold(item.run_id)
            out.append(_without_observer(fold.export()))
        try:
            events = fold.events(item)
        except _EXPECTED:
            continue
        for index, event in enumerate(events):
            fold.fold([event], source=item if index == len(events) - 1 else None)
            out.append(_without_observer(fold.export()))
    return out


def without_observer(snapshot: DisplaySnapshot) -> dict[str, Any]:
    """A snapshot as JSON data with the observer continuation left out (a reader has no observer)."""
    return _without_observer(snapshot)


def published_values(lines: tuple[str, ...]) -> list[tuple[int, bytes]]:
    """The run's output topic: (agui-seq, value) of every event, in order."""
    return [(batch.first_seq + i, value) for batch in worker_batches(lines) for i, value in enumerate(batch.encoded)]
