"""CPU of the display fold per class of AG-UI event: where the fold's share of the display's cost lies, event by event.

Usage: .venv/bin/python bench/fold_events.py [--items N] [--rounds N] [--top N] [--beside]

The events are those the worker publishes for bench/e2e.py's mix (the records of bench/display_instructions.py),
converted once, with the JSON objects the display projection folds; each run's `DisplayFold` (keeping finished
items as JSON, as a projection does) then folds them in the mix's order, one source record's events at a time, best
of `--rounds` rounds: the fold alone, without the conversion beside it. A second pass folds one event at a time and
times each call, for the share of each class (an event's type, a CUSTOM event's name; an argument delta that
follows another of its run is a class of its own): per-call timing adds its own cost, so the classes'
sum exceeds the first figure. `--beside` also runs the conversion (the partition state with the display off, 32
records of a partition at a time, as the partition task takes them) with and without the same folds after each
batch, timing each apart: the fold's CPU in place, and how much slower the conversion runs beside it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "bench"))

from display_instructions import records  # noqa: E402

from worker._heap import freeze_heap  # noqa: E402
from worker.display._failures import failed_tool_call  # noqa: E402
from worker.display.bounding import bound_event_json  # noqa: E402
from worker.display.fold import DisplayFold  # noqa: E402
from worker.stream import PartitionState, SourceRecord, default_core  # noqa: E402

Fed = list[tuple[bytes, list[dict[str, Any]], list[bytes], tuple[str, str, str] | None]]
_BATCH = 32  # records of a partition the partition task processes together


def converted(mix: list[tuple[int, bytes, bytes, int]]) -> Fed:
    """Per source record of `mix`: its key, its events' JSON objects (bounded as the projection bounds them), their
    record values, and the tool failure its source item reports."""
    core = default_core()
    observers: dict[bytes, Any] = {}
    fed: Fed = []
    for _, key, value, _ in mix:
        item = core.decode(value)
        observer = observers.get(key)
        if observer is None:
            observer = observers[key] = core.new_observer()
        events = observer.observe(item)
        assert core.encode_data is not None, "the default core gives the events' JSON objects"
        pairs = [core.encode_data(event) for event in events]
        data = [bound_event_json(found, len(encoded)) for encoded, found in pairs if found is not None]
        assert len(data) == len(pairs), "the observer's events are plain JSON data"
        fed.append((key, data, [encoded for encoded, _ in pairs], failed_tool_call(item) if events else None))
    return fed


def _fold(folds: dict[bytes, DisplayFold], fed: Fed, index: int) -> None:
    key, data, encoded, failed = fed[index]
    fold = folds.get(key)
    if fold is None:
        fold = folds[key] = DisplayFold(key.decode())
        fold.keep_finished_as_json()
    if data:
        fold.apply(data, encoded=encoded, failed=failed)


def fold_all(fed: Fed) -> float:
    """CPU seconds of folding every record's events into its run's fold."""
    folds: dict[bytes, DisplayFold] = {}
    began = time.process_time()
    for index in range(len(fed)):
        _fold(folds, fed, index)
    return time.process_time() - began


def beside(mix: list[tuple[int, bytes, bytes, int]], fed: Fed, *, folding: bool) -> tuple[float, float]:
    """CPU seconds of the conversion (the partition state, display off) and of the folds done after each of its
    batches (none unless `folding`), timed apart."""
    states: dict[int, PartitionState] = {}
    waiting: dict[int, list[int]] = {}
    folds: dict[bytes, DisplayFold] = {}
    spent = [0.0, 0.0]

    def run(partition: int) -> None:
        indexes = waiting.pop(partition)
        state = states.get(partition) or states.setdefault(partition, PartitionState("src", partition))
        batch = [SourceRecord("src", partition, index, mix[index][3], mix[index][1], mix[index][2])
                 for index in indexes]  # fmt: skip
        began = time.process_time()
        state.process_batch(batch)
        middle = time.process_time()
        if folding:
            for index in indexes:
                _fold(folds, fed, index)
        spent[0] += middle - began
        spent[1] += time.process_time() - middle

    for index, (partition, _, _, _) in enumerate(mix):
        waiting.setdefault(partition, []).append(index)
        if len(waiting[partition]) == _BATCH:
            run(partition)
    for partition in list(waiting):
        run(partition)
    return spent[0], spent[1]


def _class_of(event: dict[str, Any], previous: str | None) -> str:
    if event["type"] != "CUSTOM":
        return str(event["type"])
    name = str(event.get("name"))
    delta = event.get("value", {}).get("event", {}).get("delta")
    if isinstance(delta, dict) and delta.get("part_delta_kind") == "tool_call":
        return f"{name} (argument delta after another)" if previous == name else f"{name} (argument delta, first)"
    return name


def fold_by_class(fed: Fed) -> tuple[Counter[str], Counter[str]]:
    """Nanoseconds and calls per event class, folding one event at a time."""
    folds: dict[bytes, DisplayFold] = {}
    last: dict[bytes, str] = {}
    spent: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    clock = time.perf_counter_ns
    for key, data, encoded, failed in fed:
        fold = folds.get(key)
        if fold is None:
            fold = folds[key] = DisplayFold(key.decode())
            fold.keep_finished_as_json()
        for index, event in enumerate(data):
            kind = _class_of(event, last.get(key))
            last[key] = str(event.get("name")) if kind.endswith(")") else kind
            began = clock()
            fold.apply([event], encoded=[encoded[index]], failed=failed if index == len(data) - 1 else None)
            spent[kind] += clock() - began
            calls[kind] += 1
    return spent, calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=30000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=16, help="event classes printed, the costliest first")
    parser.add_argument("--beside", action="store_true", help="also fold beside the conversion")
    args = parser.parse_args()
    mix = records(args.items, "mix")
    fed = converted(mix)
    freeze_heap()
    events = sum(len(data) for _, data, _, _ in fed)
    best = min(fold_all(fed) for _ in range(args.rounds))
    print(f"{args.items} source items, {events} events ({events / args.items:.2f} per item): the fold alone "
          f"{best / args.items * 1e6:.1f} us per source item, {best / events * 1e6:.2f} us per event (best of "
          f"{args.rounds})")  # fmt: skip
    if args.beside:
        best_alone = best_with = best_folds = float("inf")
        for round_ in range(args.rounds):
            for folding in (False, True) if round_ % 2 == 0 else (True, False):
                conversion, folds = beside(mix, fed, folding=folding)
                if folding:
                    best_with, best_folds = min(best_with, conversion), min(best_folds, folds)
                else:
                    best_alone = min(best_alone, conversion)
        per_item = 1e6 / args.items
        print(f"beside the conversion (best of {args.rounds}): the conversion {best_alone * per_item:.1f} us per "
              f"item alone, {best_with * per_item:.1f} with the folds after each batch; the folds "
              f"{best_folds * per_item:.1f} us per item in place")  # fmt: skip
    spent, calls = fold_by_class(fed)
    total = sum(spent.values())
    print(f"one event at a time: {total / args.items / 1e3:.1f} us per source item")
    print("| event class | events per item | us per event | us per source item | share |")
    print("|---|---|---|---|---|")
    for kind, nanos in spent.most_common(args.top):
        print(f"| {kind} | {calls[kind] / args.items:.3f} | {nanos / calls[kind] / 1e3:.2f} | "
              f"{nanos / args.items / 1e3:.2f} | {nanos / total:.0%} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
