"""Cost of the changelog: CPU per record of partition processing alone and with a checkpoint every N records
(side by side, alternating passes, best of each), the export of an observer built by hand against pydantic's,
and the time to restore a partition of many open streams from its changelog values.

Usage: .venv/bin/python bench/checkpoint.py [--records N] [--streams N,N] [--every N] [--repeat N] [--restore N]
                                           [--max-item-bytes N]
The workload is the golden runs, cloned under fresh root run ids and interleaved so that `--streams` are open at
once, taking turns: with more open streams than records between two checkpoints, every record dirties a stream
of its own and each checkpoint writes as many stream records as it covers records (the worst case).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # for bench, devtools, the tests' support: `worker` stays the installed package

from tests.stream._support import checkpoint, restore  # noqa: E402
from worker._native import describe  # noqa: E402
from worker.observe import HarnessAguiStreamObserver, ObserverContinuation  # noqa: E402
from worker.stream import PartitionState, SourceRecord  # noqa: E402

TOPIC = "harness.events"


def load_runs(corpus: Path, max_item_bytes: int = 0) -> list[list[dict[str, object]]]:
    """The golden runs, without those holding an item over `max_item_bytes` (0: all of them)."""
    runs = []
    for path in sorted(corpus.glob("*.jsonl")):
        if path.name.count(".") == 1:
            lines = [line for line in path.read_bytes().split(b"\n") if line.strip()]
            if not max_item_bytes or max(map(len, lines)) <= max_item_bytes:
                runs.append([orjson.loads(line) for line in lines])
    return runs


def clone(run: list[dict[str, object]], root: str, upto: int | None = None) -> list[tuple[bytes, bytes]]:
    """The run's items under root run id `root` (its children keep theirs), as (key, value) pairs."""
    original = run[0]["run_id"]
    items = run if upto is None else run[:upto]
    return [(root.encode(), orjson.dumps({**i, "run_id": root} if i["run_id"] == original else i)) for i in items]


def workload(runs: list[list[dict[str, object]]], total: int, streams: int) -> list[SourceRecord]:
    """`total` records of cloned runs, `streams` of them open at any time, taking turns."""
    clones = 0

    def fresh() -> Iterator[tuple[bytes, bytes]]:
        nonlocal clones
        clones += 1
        return iter(clone(runs[clones % len(runs)], f"run-clone-{clones}"))

    active = [fresh() for _ in range(streams)]
    out: list[SourceRecord] = []
    while len(out) < total:
        for i in range(len(active)):
            pair = next(active[i], None)
            if pair is None:
                active[i] = fresh()
                pair = next(active[i])
            out.append(SourceRecord(TOPIC, 0, len(out), 1_700_000_000_000, pair[0], pair[1]))
    return out[:total]


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.process_time()
    fn()
    return time.process_time() - start


def plain(records: list[SourceRecord]) -> None:
    state = PartitionState(TOPIC, 0)
    for record in records:
        state.process(record)


def checkpointed(records: list[SourceRecord], every: int, written: list[int]) -> None:
    state = PartitionState(TOPIC, 0)
    written.clear()
    for i, record in enumerate(records, 1):
        state.process(record)
        if i % every == 0:
            written.append(len(checkpoint(state, record.offset + 1)))


def compare(runs: list[list[dict[str, object]]], total: int, streams: int, every: int, repeat: int) -> None:
    records = workload(runs, total, streams)
    mean = sum(len(r.value or b"") for r in records) / len(records)
    print(f"workload:    {len(records)} records ({mean:.0f} bytes on average) of {len(runs)} golden runs cloned, "
          f"{streams} streams open at a time; a checkpoint every {every} records")
    written: list[int] = []
    plain(records[:every])  # warm-up
    alone, with_checkpoints = [], []
    for _ in range(repeat):  # alternating, so the machine's phases hit both sides alike
        alone.append(timed(lambda: plain(records)))
        with_checkpoints.append(timed(lambda: checkpointed(records, every, written)))
    a, c = min(alone) / len(records) * 1e6, min(with_checkpoints) / len(records) * 1e6
    per_checkpoint = sum(written) / max(len(written), 1)
    print(f"  processing:  {a:.2f} us/record alone, {c:.2f} us/record with checkpoints (best of {repeat} passes "
          f"each, CPU): {100 * (c - a) / a:+.1f} %")
    print(f"  checkpoints: {len(written)}, {per_checkpoint:.0f} changelog records each, "
          f"{(c - a) * every / per_checkpoint:.1f} us per record written")


def open_state(runs: list[list[dict[str, object]]], streams: int) -> PartitionState:
    """A partition holding `streams` open streams, each fed the first half of a golden run."""
    state = PartitionState(TOPIC, 0, max_open_streams=max(streams, 1))
    offset = 0
    for n in range(streams):
        run = runs[n % len(runs)]
        for key, value in clone(run, f"run-open-{n}", upto=max(1, len(run) // 2)):
            state.process(SourceRecord(TOPIC, 0, offset, 0, key, value), publish=False)
            offset += 1
    return state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, default=ROOT / "tests" / "data" / "golden")
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--streams", default="200,2000", help="open streams of each workload, comma-separated")
    parser.add_argument("--every", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--restore", type=int, default=10_000)
    parser.add_argument("--max-item-bytes", type=int, default=0, help="leave out runs with a larger item")
    args = parser.parse_args()
    runs = load_runs(args.corpus, args.max_item_bytes)
    print(f"core:        {describe()}")
    for streams in map(int, args.streams.split(",")):
        compare(runs, args.records, streams, args.every, args.repeat)
    state = open_state(runs, args.restore)
    end = (state.last_offset or 0) + 1
    values = _whole(state, end)
    size = sum(len(k) + len(v) for k, v in values.items())
    restore_s = min(timed(lambda: restore(TOPIC, 0, values, max_open_streams=args.restore))
                    for _ in range(3))  # fmt: skip
    restored, _ = restore(TOPIC, 0, values, max_open_streams=args.restore)
    assert _whole(restored, end) == values
    print(f"restore:     {state.open_streams} open streams ({size / 1e6:.1f} MB of changelog values) in "
          f"{restore_s:.3f} s CPU, {restore_s / state.open_streams * 1e6:.1f} us per stream (best of 3)")
    export_s = min(timed(lambda: _whole(state, end)) for _ in range(3))
    print(f"export:      all {state.open_streams} streams as changelog values in {export_s:.3f} s CPU, "
          f"{export_s / state.open_streams * 1e6:.1f} us per stream")

    observers = list(_observers(restored))
    by_hand = min(timed(lambda: [orjson.dumps(o.export_data()) for o in observers]) for _ in range(3))
    by_model = min(timed(lambda: [o.export().model_dump_json() for o in observers]) for _ in range(3))
    print(f"observer:    export_data + orjson {by_hand / len(observers) * 1e6:.1f} us, pydantic export + "
          f"model_dump_json {by_model / len(observers) * 1e6:.1f} us per observer ({by_model / by_hand:.1f}x)")


def _whole(state: PartitionState, offset: int) -> dict[bytes, bytes]:
    """The state at `offset` as changelog values: a checkpoint writes every key once told the changelog holds none."""
    state.adopt_changelog_keys(())
    return {key: value for key, value in checkpoint(state, offset) if value is not None}


def _observers(state: PartitionState) -> Iterator[HarnessAguiStreamObserver]:
    """The observers of a state, rebuilt from its checkpoint (the bench reads no private attribute)."""
    for key, value in _whole(state, (state.last_offset or 0) + 1).items():
        if key.startswith(b"stream:"):
            data = orjson.loads(value)["observer"]
            if data is not None:
                yield HarnessAguiStreamObserver.restore(ObserverContinuation.model_validate(data))


if __name__ == "__main__":
    main()
