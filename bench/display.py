"""CPU per source item of the worker's conversion (decode + stream observer + encode_event) alone and with the
display projection fed every event as the worker feeds it (DisplayProjection.accept and complete, with each event's
encoding and JSON object, cadence on the items' own timestamps), side by side in one run, on the golden corpus;
the display records' bytes per source item, and how many events of the output topic's tail a late joiner reads
after the snapshot it starts from.

Usage: .venv/bin/python bench/display.py [--corpus DIR] [--repeat N] [--interval-ms MS] [--max-bytes B]
                                         [--source-time occurred|burst]
Passes alternate between the two pipelines; each side reports its best pass in CPU time. The source timestamps
are each item's `occurred_at` (what a producer that sends as events occur stamps on its records), or with
`burst` one timestamp for all of a run's items (a topic filled in one go, as bench/e2e.py's is), so that only a
run's first and last events are published.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # for bench and devtools: `worker` stays the installed package

from bench.convert import load_runs, memory_per_stream  # noqa: E402
from worker._native import describe  # noqa: E402
from worker.display import DisplayProjection  # noqa: E402
from worker.observe import HarnessAguiStreamObserver, encode_event, encode_event_data  # noqa: E402
from worker.wire import decode_item, is_terminal, timestamp_ms  # noqa: E402


class Totals:
    """What the projection published in one pass."""

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0
        self.evicted = 0
        self.output = 0  # bytes of the events' output record values
        self.tail = 0  # summed over source items: events published after the last display record
        self.tail_max = 0


def convert_only(runs: list[list[bytes]]) -> None:
    for lines in runs:
        observer = HarnessAguiStreamObserver(retain_events=False)
        for line in lines:
            try:
                item = decode_item(line)
                events = observer.observe(item)
            except (ValueError, TypeError):
                continue
            for event in events:
                encode_event(event)


def convert_and_project(
    runs: list[list[bytes]], interval_ms: int, max_bytes: int, totals: Totals, *, burst: bool = False
) -> None:
    for lines in runs:
        observer = HarnessAguiStreamObserver(retain_events=False)
        projection: DisplayProjection | None = None
        n = 0
        for line in lines:
            try:
                item = decode_item(line)
                events = observer.observe(item)
            except (ValueError, TypeError):
                continue
            pairs = [encode_event_data(event, plain=True) for event in events]
            encoded, data = [value for value, _ in pairs], [value for _, value in pairs]
            totals.output += sum(map(len, encoded))
            if projection is None:
                projection = DisplayProjection(item.run_id, item.thread_id, interval_ms=interval_ms,
                                               max_bytes=max_bytes)  # fmt: skip
            ended = is_terminal(item) and item.run_id == projection.run_id
            stamp = 0 if burst else timestamp_ms(item)
            record = projection.complete(projection.accept(events, n, timestamp_ms=stamp, ended=ended, source=item,
                                                           encoded=encoded, data=data, observer=observer))  # fmt: skip
            n += len(events)
            if record is not None:
                totals.records += 1
                totals.bytes += len(record.value)
                totals.evicted += record.evicted
            tail = n - 1 - projection.published_seq  # a joiner arriving now reads these from the output topic
            totals.tail += tail
            totals.tail_max = max(totals.tail_max, tail)


def memory_per_projection(runs: list[list[bytes]], streams: int, interval_ms: int) -> tuple[float, float]:
    """Bytes retained per open projection fed the first half of a golden run (beside its observer, not counted),
    and the mean length of the display record such a projection would publish."""
    halves = []
    for lines in runs:
        observer = HarnessAguiStreamObserver(retain_events=False)
        batches = []
        n = 0
        for line in lines[: max(1, len(lines) // 2)]:
            with contextlib.suppress(ValueError, TypeError):
                item = decode_item(line)
                events = observer.observe(item)
                batches.append((item, events, [encode_event(event) for event in events], n))
                n += len(events)
        if batches:
            halves.append(batches)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    projections = []
    for index in range(streams):
        batches = halves[index % len(halves)]
        first = batches[0][0]
        projection = DisplayProjection(first.run_id, first.thread_id, interval_ms=interval_ms)
        for item, events, encoded, n in batches:
            accepted = projection.accept(events, n, timestamp_ms=timestamp_ms(item), ended=False, source=item,
                                         encoded=encoded)  # fmt: skip
            projection.complete(accepted)
        projections.append(projection)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    sizes = [len(projection.fold.export_json()) for projection in projections]
    return (after - before) / streams, sum(sizes) / len(sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, default=ROOT / "tests" / "data" / "golden")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--max-bytes", type=int, default=1048588)
    parser.add_argument("--source-time", choices=("occurred", "burst"), default="occurred")
    parser.add_argument("--streams", type=int, default=1000)
    args = parser.parse_args()
    runs = load_runs(args.corpus)
    items = sum(len(lines) for lines in runs)
    print(f"corpus:     {len(runs)} runs, {items} items")
    print(f"core:       {describe()}")
    convert_only(runs)
    burst = args.source_time == "burst"
    convert_and_project(runs, args.interval_ms, args.max_bytes, Totals(), burst=burst)
    alone: list[float] = []
    projected: list[float] = []
    totals = Totals()
    for _ in range(args.repeat):  # interleaved, so load from other processes hits both sides alike
        start = time.process_time()
        convert_only(runs)
        alone.append(time.process_time() - start)
        totals = Totals()
        start = time.process_time()
        convert_and_project(runs, args.interval_ms, args.max_bytes, totals, burst=burst)
        projected.append(time.process_time() - start)
    base, with_display = min(alone) / items * 1e6, min(projected) / items * 1e6
    print(f"convert:    {base:6.1f} us CPU per source item (decode + stream observer + encode_event, "
          f"best of {args.repeat})")
    print(f"+ display:  {with_display:6.1f} us CPU per source item (the same, plus the display projection, "
          f"interval {args.interval_ms} ms, max {args.max_bytes} bytes, source time {args.source_time})")
    print(f"projection: {with_display - base:6.1f} us per source item; conversion alone runs "
          f"{base / with_display:.2f}x the time of conversion + display")
    print(f"records:    {totals.records} display records ({totals.records / items:.2f} per source item, "
          f"{totals.records / len(runs):.1f} per run), {totals.bytes / max(totals.records, 1):,.0f} bytes each "
          f"on average, {totals.bytes / items:,.0f} bytes per source item (the output records' "
          f"{totals.output / items:,.0f}), {totals.evicted} items evicted")
    print(f"late join:  {totals.tail / items:.1f} events of the output topic's tail read after the snapshot on "
          f"average (joining after a random source item), {totals.tail_max} at most")
    held, shown = memory_per_projection(runs, args.streams, args.interval_ms)
    observer = memory_per_stream(runs, args.streams)
    print(f"memory:     {held:,.0f} bytes per open projection ({args.streams} streams, mid-run; its snapshot JSON "
          f"{shown:,.0f} bytes) beside {observer:,.0f} bytes per open stream observer")


if __name__ == "__main__":
    main()
